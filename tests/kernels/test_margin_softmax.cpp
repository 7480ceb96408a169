// margin_softmax_loss's CPU twin (kernels/margin_softmax.hpp) against a naive
// float64 loop written from the contract (loss, demb, dweight, metrics; every
// dtype, AM and AAM, batch 1, C = 1, odd shapes), the float64 loop's analytic
// gradient against its own central differences (incl. samples near AAM's
// fallback threshold and with cos near +-1), the twin's gradient against
// central differences of its own f32 loss, exact ignored-label behaviour,
// loss_scale/grad_scale (fp16), metrics and their accumulation, 1 vs 2 threads
// (identical bytes), NaN propagation, error messages, and PyTorch
// (tests/oracle/margin_softmax.py: voxceleb_trainer's formulas with autograd).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <string>
#include <vector>

#include "engine/parallel.hpp"
#include "kernels/loss.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/tolerance.hpp"
#include "tests/support/oracle_files.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using kernels::MarginType;

namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;

struct Problem {
  std::int64_t B = 1;
  int C = 2, D = 3;
  MarginType type = MarginType::aam;
  float s = 30.f, m = 0.2f;
  Vec emb, w;
  std::vector<std::int32_t> labels;
};

kernels::MarginSoftmaxArgs dims_of(const Problem& p, float grad_scale = 1.f) {
  kernels::MarginSoftmaxArgs d;
  d.batch = p.B;
  d.dim = p.D;
  d.classes = p.C;
  d.type = p.type;
  d.scale = p.s;
  d.margin = p.m;
  d.grad_scale = grad_scale;
  return d;
}

// Random problem; labels in [0, C) except where `ignored` puts -1 and C.
Problem random_problem(std::int64_t B, int C, int D, MarginType type, std::uint64_t seed, bool ignored = false) {
  Problem p;
  p.B = B;
  p.C = C;
  p.D = D;
  p.type = type;
  p.m = type == MarginType::am ? 0.3f : 0.2f;
  p.emb = testing::random_floats(std::size_t(B * D), seed);
  p.w = testing::random_floats(std::size_t(C) * D, seed + 1);
  const Vec l = testing::random_floats(std::size_t(B), seed + 2, 0.f, float(C));
  for (float v : l) p.labels.push_back(std::min(std::int32_t(v), C - 1));
  if (ignored && B >= 3) {
    p.labels[1] = -1;
    p.labels[std::size_t(B - 1)] = C;
  }
  return p;
}

Tensor labels_tensor(const std::vector<std::int32_t>& l) {
  Tensor t = Tensor::empty({std::int64_t(l.size())}, DType::i32);
  if (!l.empty()) std::memcpy(t.raw(), l.data(), l.size() * sizeof(std::int32_t));
  return t;
}

struct Out {
  Tensor demb, dweight, sums, counts, step;
};

Out run_twin(const Problem& p, DType t, float loss_scale = 1.f, float grad_scale = 1.f, bool confusion = true) {
  const Tensor emb = Tensor::from_floats(p.emb, {p.B, p.D}, t);
  const Tensor w = Tensor::from_floats(p.w, {p.C, p.D}, t);
  Out o;
  o.demb = Tensor::empty({p.B, p.D}, t);
  o.dweight = Tensor::empty({p.C, p.D}, DType::f32);
  o.demb.fill_bytes(0xff);
  o.dweight.fill_bytes(0xff);
  o.sums = Tensor::zeros({kernels::kLossSums}, DType::f32);
  o.counts = Tensor::zeros({kernels::kLossCounts + (confusion ? std::int64_t(p.C) * p.C : 0)}, DType::i32);
  o.step = Tensor::empty({1}, DType::f32);
  ops::margin_softmax_loss(emb, w, labels_tensor(p.labels), dims_of(p, grad_scale), o.demb, o.dweight, o.sums,
                           o.counts, &loss_scale, &o.step, nullptr);
  return o;
}

// ---- the float64 loop, from the contract ----
struct Ref {
  double loss = 0;
  DVec demb, dw;
  std::vector<int> pred;
};

// Values as the kernel sees them (rounded to t).
DVec rounded(const Vec& v, DType t) {
  const Vec r = Tensor::from_floats(v, {std::int64_t(v.size())}, t).to_floats();
  return DVec(r.begin(), r.end());
}

Ref reference(const Problem& p, const DVec& emb, const DVec& w, double gscale = 1.0, bool grads = true) {
  const std::int64_t B = p.B;
  const int C = p.C, D = p.D;
  const double m = p.m, s = p.s;
  // The f32 constants, as the contract rounds them.
  const double cos_m = float(std::cos(m)), sin_m = float(std::sin(m));
  const double th = float(std::cos(std::numbers::pi - m)), mm = float(std::sin(std::numbers::pi - m) * m);
  auto norm_of = [&](const double* x, bool& clamped) {
    double ss = 0;
    for (int j = 0; j < D; ++j) ss += x[j] * x[j];
    clamped = std::sqrt(ss) < 1e-12;
    return clamped ? 1e-12 : std::sqrt(ss);
  };
  Ref r;
  r.demb.assign(std::size_t(B * D), 0.0);
  r.dw.assign(std::size_t(C) * D, 0.0);
  r.pred.assign(std::size_t(B), 0);
  DVec xn(static_cast<std::size_t>(B * D)), wn(static_cast<std::size_t>(C) * D), nx(static_cast<std::size_t>(B)), nw(static_cast<std::size_t>(C));
  std::vector<bool> cx(static_cast<std::size_t>(B)), cw(static_cast<std::size_t>(C));
  for (std::int64_t b = 0; b < B; ++b) {
    bool c;
    nx[std::size_t(b)] = norm_of(&emb[std::size_t(b * D)], c);
    cx[std::size_t(b)] = c;
    for (int j = 0; j < D; ++j) xn[std::size_t(b * D + j)] = emb[std::size_t(b * D + j)] / nx[std::size_t(b)];
  }
  for (int k = 0; k < C; ++k) {
    bool c;
    nw[std::size_t(k)] = norm_of(&w[std::size_t(k) * D], c);
    cw[std::size_t(k)] = c;
    for (int j = 0; j < D; ++j) wn[std::size_t(k * D + j)] = w[std::size_t(k * D + j)] / nw[std::size_t(k)];
  }
  int n = 0;
  for (auto y : p.labels) n += y >= 0 && y < C;
  DVec dcos(static_cast<std::size_t>(B) * C, 0.0), cosv(static_cast<std::size_t>(B) * C);
  for (std::int64_t b = 0; b < B; ++b) {
    for (int k = 0; k < C; ++k) {
      double dot = 0;
      for (int j = 0; j < D; ++j) dot += xn[std::size_t(b * D + j)] * wn[std::size_t(k * D + j)];
      cosv[std::size_t(b * C + k)] = dot;
      if (dot > cosv[std::size_t(b * C + r.pred[std::size_t(b)])]) r.pred[std::size_t(b)] = k;
    }
    const int y = p.labels[std::size_t(b)];
    if (y < 0 || y >= C) continue;
    const double cy = cosv[std::size_t(b * C + y)];
    double f, df;
    if (p.type == MarginType::am) {
      f = cy - m;
      df = 1;
    } else if (cy - th <= 0) {
      f = cy - mm;
      df = 1;
    } else {
      const double v = std::clamp(1 - cy * cy, 0.0, 1.0), sine = std::sqrt(v);
      f = cy * cos_m - sine * sin_m;
      df = cos_m + (sine > 0 ? cy / sine : 0.0) * sin_m;
    }
    DVec z(static_cast<std::size_t>(C));
    double mx = -INFINITY;
    for (int k = 0; k < C; ++k) {
      z[std::size_t(k)] = s * (k == y ? f : cosv[std::size_t(b * C + k)]);
      mx = std::max(mx, z[std::size_t(k)]);
    }
    double se = 0;
    for (int k = 0; k < C; ++k) se += std::exp(z[std::size_t(k)] - mx);
    const double lse = mx + std::log(se);
    r.loss += (lse - z[std::size_t(y)]) / n;
    for (int k = 0; k < C; ++k) {
      const double pk = std::exp(z[std::size_t(k)] - lse);
      dcos[std::size_t(b * C + k)] = s * (pk - (k == y)) * (k == y ? df : 1.0) / n * gscale;
    }
  }
  if (!grads) return r;
  // Chain rule through the normalisations: d xn_j / d x_i = (delta_ij - xn_i xn_j) / n.
  for (std::int64_t b = 0; b < B; ++b)
    for (int k = 0; k < C; ++k) {
      const double g = dcos[std::size_t(b * C + k)];
      for (int i = 0; i < D; ++i) {
        double ge = 0, gw = 0;
        for (int j = 0; j < D; ++j) {
          const double jx = ((i == j) - (cx[std::size_t(b)] ? 0 : xn[std::size_t(b * D + i)] * xn[std::size_t(b * D + j)])) / nx[std::size_t(b)];
          const double jw = ((i == j) - (cw[std::size_t(k)] ? 0 : wn[std::size_t(k * D + i)] * wn[std::size_t(k * D + j)])) / nw[std::size_t(k)];
          ge += wn[std::size_t(k * D + j)] * jx;
          gw += xn[std::size_t(b * D + j)] * jw;
        }
        r.demb[std::size_t(b * D + i)] += g * ge;
        r.dw[std::size_t(k * D + i)] += g * gw;
      }
    }
  return r;
}

double rel(const Tensor& got, const DVec& want) { return testing::rel_l2(got.to_floats(), want); }

// Sets emb row b to a * wn_y + sqrt(1 - a^2) * (a unit vector orthogonal to w_y),
// so cos(emb_b, w_y) = a.
void set_cos(Problem& p, std::int64_t b, int y, double a) {
  const int D = p.D;
  DVec wy(static_cast<std::size_t>(D)), o(static_cast<std::size_t>(D));
  double nw = 0;
  for (int j = 0; j < D; ++j) nw += double(p.w[std::size_t(y * D + j)]) * p.w[std::size_t(y * D + j)];
  nw = std::sqrt(nw);
  for (int j = 0; j < D; ++j) wy[std::size_t(j)] = p.w[std::size_t(y * D + j)] / nw;
  double dot = 0;
  for (int j = 0; j < D; ++j) {
    o[std::size_t(j)] = std::sin(1.3 * j + 0.7);
    dot += o[std::size_t(j)] * wy[std::size_t(j)];
  }
  double no = 0;
  for (int j = 0; j < D; ++j) {
    o[std::size_t(j)] -= dot * wy[std::size_t(j)];
    no += o[std::size_t(j)] * o[std::size_t(j)];
  }
  no = std::sqrt(no);
  for (int j = 0; j < D; ++j)
    p.emb[std::size_t(b * D + j)] = float(1.7 * (a * wy[std::size_t(j)] + std::sqrt(1 - a * a) * o[std::size_t(j)] / no));
}

}  // namespace

TEST_CASE("margin_softmax: the float64 loop's analytic gradient matches its own central differences") {
  for (MarginType type : {MarginType::am, MarginType::aam}) {
    Problem p = random_problem(6, 5, 4, type, 11, true);
    p.labels = {0, -1, 2, 3, 4, 5};
    // Targets near AAM's fallback threshold cos(pi - m) on both sides, and near +-1.
    const double th = std::cos(std::numbers::pi - double(p.m));
    set_cos(p, 0, 0, th + 0.01);
    set_cos(p, 2, 2, th - 0.01);
    set_cos(p, 3, 3, 1 - 2e-4);
    set_cos(p, 4, 4, -1 + 2e-4);
    p.s = 4.f;  // keeps every softmax term alive so every derivative is exercised
    const DVec emb(p.emb.begin(), p.emb.end()), w(p.w.begin(), p.w.end());
    const Ref r = reference(p, emb, w);
    const double h = 1e-7;
    DVec fe(emb.size()), fw(w.size());
    for (std::size_t i = 0; i < emb.size(); ++i) {
      DVec a = emb, b = emb;
      a[i] += h;
      b[i] -= h;
      fe[i] = (reference(p, a, w, 1, false).loss - reference(p, b, w, 1, false).loss) / (2 * h);
    }
    for (std::size_t i = 0; i < w.size(); ++i) {
      DVec a = w, b = w;
      a[i] += h;
      b[i] -= h;
      fw[i] = (reference(p, emb, a, 1, false).loss - reference(p, emb, b, 1, false).loss) / (2 * h);
    }
    CHECK(testing::rel_l2(r.demb, fe) <= 1e-6);
    CHECK(testing::rel_l2(r.dw, fw) <= 1e-6);
    for (int j = 0; j < p.D; ++j) CHECK(r.demb[std::size_t(1 * p.D + j)] == 0.0);  // the ignored row
  }
}

TEST_CASE("margin_softmax: CPU twin vs the float64 loop, every dtype, AM and AAM, odd shapes, batch 1, C = 1") {
  struct Shape3 {
    std::int64_t B;
    int C, D;
  };
  for (Shape3 sh : {Shape3{1, 1, 3}, Shape3{1, 5, 4}, Shape3{7, 13, 9}, Shape3{16, 37, 33}, Shape3{5, 300, 64}})
    for (MarginType type : {MarginType::am, MarginType::aam})
      for (DType t : {DType::f32, DType::bf16, DType::f16}) {
        CAPTURE(sh.B);
        CAPTURE(sh.C);
        CAPTURE(int(type));
        CAPTURE(dtype_name(t));
        const Problem p = random_problem(sh.B, sh.C, sh.D, type, std::uint64_t(sh.B * 100 + sh.C), true);
        const Out o = run_twin(p, t);
        const Ref r = reference(p, rounded(p.emb, t), rounded(p.w, t));
        const double tol = testing::rel_l2_tolerance(t);
        CHECK(std::fabs(o.step.to_floats()[0] - r.loss) <= 1e-5 * std::max(1.0, std::fabs(r.loss)));
        CHECK(rel(o.demb, r.demb) <= tol);
        CHECK(rel(o.dweight, r.dw) <= 2e-5);  // f32 output; s = 30 amplifies the f32 cosines' rounding
        const Vec sums = o.sums.to_floats(), counts = o.counts.to_floats();
        CHECK(sums[0] == o.step.to_floats()[0]);
        CHECK(sums[1] == 0.f);
        CHECK(sums[2] == sums[0]);
        CHECK(sums[3] == 1.f);
        CHECK(counts[0] == float(p.B));
        CHECK(counts[2] == 0.f);
        int correct = 0;
        std::vector<int> conf(static_cast<std::size_t>(p.C) * p.C, 0);
        for (std::int64_t b = 0; b < p.B; ++b) {
          const int y = p.labels[std::size_t(b)];
          if (y < 0 || y >= p.C) continue;
          correct += r.pred[std::size_t(b)] == y;
          ++conf[std::size_t(y * p.C + r.pred[std::size_t(b)])];
        }
        CHECK(counts[1] == float(correct));
        for (std::size_t i = 0; i < conf.size(); ++i) CHECK(counts[kernels::kLossCounts + i] == float(conf[i]));
      }
}

TEST_CASE("margin_softmax: edge samples (AAM fallback threshold, cos near +-1) vs the float64 loop") {
  for (MarginType type : {MarginType::am, MarginType::aam}) {
    Problem p = random_problem(5, 6, 8, type, 21);
    p.labels = {0, 1, 2, 3, 4};
    const double th = std::cos(std::numbers::pi - double(p.m));
    set_cos(p, 0, 0, th + 1e-3);
    set_cos(p, 1, 1, th - 1e-3);
    set_cos(p, 2, 2, 1 - 1e-3);
    set_cos(p, 3, 3, -1 + 1e-3);
    set_cos(p, 4, 5, 1 - 1e-3);  // a non-target class at cos near 1 (argmax 5, label 4)
    const Out o = run_twin(p, DType::f32);
    const Ref r = reference(p, rounded(p.emb, DType::f32), rounded(p.w, DType::f32));
    CHECK(std::fabs(o.step.to_floats()[0] - r.loss) <= 1e-5 * std::max(1.0, r.loss));
    // 1 - cos^2 near cos = +-1 loses f32 digits: d sine / d cos = -cos / sine is ~1e-4 off.
    CHECK(rel(o.demb, r.demb) <= 2e-4);
    CHECK(rel(o.dweight, r.dw) <= 2e-4);
    CHECK(o.counts.to_floats()[kernels::kLossCounts + 4 * p.C + 5] == 1.f);
  }
}

TEST_CASE("margin_softmax: the twin's gradients match central differences of its own f32 loss") {
  for (MarginType type : {MarginType::am, MarginType::aam}) {
    Problem p = random_problem(4, 5, 3, type, 31, false);
    p.s = 5.f;
    const Out o = run_twin(p, DType::f32);
    const double h = 1e-3;
    auto loss_at = [&](const Problem& q) { return double(run_twin(q, DType::f32).step.to_floats()[0]); };
    DVec fe(p.emb.size()), fw(p.w.size());
    for (std::size_t i = 0; i < p.emb.size(); ++i) {
      Problem a = p, b = p;
      a.emb[i] += float(h);
      b.emb[i] -= float(h);
      fe[i] = (loss_at(a) - loss_at(b)) / (2 * h);
    }
    for (std::size_t i = 0; i < p.w.size(); ++i) {
      Problem a = p, b = p;
      a.w[i] += float(h);
      b.w[i] -= float(h);
      fw[i] = (loss_at(a) - loss_at(b)) / (2 * h);
    }
    CHECK(rel(o.demb, fe) <= 3e-3);
    CHECK(rel(o.dweight, fw) <= 3e-3);
  }
}

TEST_CASE("margin_softmax: ignored labels add no loss, no gradient, no count; all ignored gives 0") {
  for (MarginType type : {MarginType::am, MarginType::aam}) {
    Problem p = random_problem(6, 7, 5, type, 41);
    p.labels = {3, -1, 0, 7, 6, -5};
    Problem q = p;  // the valid samples only
    q.B = 3;
    q.labels = {3, 0, 6};
    q.emb.clear();
    for (int b : {0, 2, 4}) q.emb.insert(q.emb.end(), p.emb.begin() + b * p.D, p.emb.begin() + (b + 1) * p.D);
    const Out o = run_twin(p, DType::f32), oq = run_twin(q, DType::f32);
    CHECK(o.step.to_floats()[0] == oq.step.to_floats()[0]);
    const Vec de = o.demb.to_floats(), deq = oq.demb.to_floats();
    int k = 0;
    for (int b = 0; b < 6; ++b)
      for (int j = 0; j < p.D; ++j) {
        if (b == 0 || b == 2 || b == 4) CHECK(de[std::size_t(b * p.D + j)] == deq[std::size_t(k++)]);
        else CHECK(de[std::size_t(b * p.D + j)] == 0.f);
      }
    CHECK(o.dweight.to_floats() == oq.dweight.to_floats());
    const Vec c = o.counts.to_floats(), cq = oq.counts.to_floats();
    CHECK(c[0] == 6.f);  // samples counts the whole batch, as leak_loss
    CHECK(cq[0] == 3.f);
    for (std::size_t i = 1; i < c.size(); ++i) CHECK(c[i] == cq[i]);

    p.labels = {-1, 7, 100, -2, 7, 8};
    const Out z = run_twin(p, DType::f32);
    CHECK(z.step.to_floats()[0] == 0.f);
    for (float v : z.demb.to_floats()) CHECK(v == 0.f);
    for (float v : z.dweight.to_floats()) CHECK(v == 0.f);
    const Vec zc = z.counts.to_floats();
    CHECK(zc[0] == 6.f);
    for (std::size_t i = 1; i < zc.size(); ++i) CHECK(zc[i] == 0.f);
  }
}

TEST_CASE("margin_softmax: loss_scale and grad_scale scale every gradient (fp16 keeps small ones)") {
  for (MarginType type : {MarginType::am, MarginType::aam}) {
    const Problem p = random_problem(9, 11, 7, type, 51, true);
    const Out base = run_twin(p, DType::f32), sc = run_twin(p, DType::f32, 1024.f, 0.5f);
    CHECK(sc.step.to_floats()[0] == base.step.to_floats()[0]);  // the loss is not scaled
    const Vec b1 = base.demb.to_floats(), s1 = sc.demb.to_floats();
    for (std::size_t i = 0; i < b1.size(); ++i) CHECK(s1[i] == 512.f * b1[i]);  // powers of 2: exact
    const Vec b2 = base.dweight.to_floats(), s2 = sc.dweight.to_floats();
    for (std::size_t i = 0; i < b2.size(); ++i) CHECK(s2[i] == 512.f * b2[i]);
    // fp16: the scaled demb against the float64 loop with the same scale.
    const Out h = run_twin(p, DType::f16, 1024.f, 0.5f);
    const Ref r = reference(p, rounded(p.emb, DType::f16), rounded(p.w, DType::f16), 512.0);
    CHECK(rel(h.demb, r.demb) <= testing::rel_l2_tolerance(DType::f16));
    CHECK(rel(h.dweight, r.dw) <= 2e-5);
  }
}

TEST_CASE("margin_softmax: metrics: exact confusion matrix, accumulation, the short counts form") {
  // Embeddings equal to class rows: argmax is known. Labels disagree on two samples.
  Problem p;
  p.B = 5;
  p.C = 3;
  p.D = 3;
  p.w = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  p.emb = {2, 0.1f, 0, 0, 3, 0.2f, 0.1f, 0, 1, 0, 1, 0.5f, 4, 0, 0.5f};  // argmax 0, 1, 2, 1, 0
  p.labels = {0, 1, 2, 2, 1};
  const Tensor emb = Tensor::from_floats(p.emb, {5, 3}), w = Tensor::from_floats(p.w, {3, 3});
  Tensor demb = Tensor::empty({5, 3}, DType::f32), dw = Tensor::empty({3, 3}, DType::f32);
  Tensor sums = Tensor::zeros({kernels::kLossSums}, DType::f32);
  Tensor counts = Tensor::zeros({kernels::kLossCounts + 9}, DType::i32);
  Tensor step = Tensor::empty({1}, DType::f32);
  const Tensor labels = labels_tensor(p.labels);
  ops::margin_softmax_loss(emb, w, labels, dims_of(p), demb, dw, sums, counts, nullptr, &step, nullptr);
  const float l1 = step.to_floats()[0];
  ops::margin_softmax_loss(emb, w, labels, dims_of(p), demb, dw, sums, counts, nullptr, nullptr, nullptr);
  const Vec c = counts.to_floats(), s = sums.to_floats();
  CHECK(c[0] == 10.f);
  CHECK(c[1] == 6.f);  // samples 0, 1, 2 correct, twice
  CHECK(c[2] == 0.f);
  const Vec conf = {2, 0, 0, 2, 2, 0, 0, 2, 2};  // [true][pred]
  for (int i = 0; i < 9; ++i) CHECK(c[std::size_t(kernels::kLossCounts + i)] == conf[std::size_t(i)]);
  CHECK(s[0] == l1 + l1);
  CHECK(s[2] == l1 + l1);
  CHECK(s[3] == 2.f);
  Tensor short_counts = Tensor::zeros({kernels::kLossCounts}, DType::i32);
  ops::margin_softmax_loss(emb, w, labels, dims_of(p), demb, dw, sums, short_counts, nullptr, nullptr, nullptr);
  CHECK(short_counts.to_floats() == Vec{5, 3, 0});
}

TEST_CASE("margin_softmax: the twin's bytes do not depend on the thread count") {
  for (MarginType type : {MarginType::am, MarginType::aam})
    for (DType t : {DType::f32, DType::bf16}) {
      const Problem p = random_problem(33, 70, 40, type, 61, true);
      set_cpu_threads(1);
      const Out a = run_twin(p, t);
      set_cpu_threads(2);
      const Out b = run_twin(p, t);
      set_cpu_threads(0);
      for (auto [x, y] : {std::pair{&a.demb, &b.demb}, {&a.dweight, &b.dweight}, {&a.sums, &b.sums},
                          {&a.counts, &b.counts}, {&a.step, &b.step}})
        CHECK(std::memcmp(x->raw(), y->raw(), x->nbytes()) == 0);
    }
}

TEST_CASE("margin_softmax: NaN propagates; a zero embedding takes the 1e-12 clamp") {
  Problem p = random_problem(3, 4, 5, MarginType::aam, 71);
  p.emb[7] = NAN;  // sample 1
  const Out o = run_twin(p, DType::f32);
  CHECK(std::isnan(o.step.to_floats()[0]));
  const Vec de = o.demb.to_floats();
  for (int j = 0; j < p.D; ++j) CHECK(std::isnan(de[std::size_t(p.D + j)]));
  Problem z = random_problem(3, 4, 5, MarginType::aam, 72);
  for (int j = 0; j < z.D; ++j) z.emb[std::size_t(z.D + j)] = 0.f;
  const Out oz = run_twin(z, DType::f32);
  const Ref r = reference(z, rounded(z.emb, DType::f32), rounded(z.w, DType::f32));
  CHECK(std::fabs(oz.step.to_floats()[0] - r.loss) <= 1e-5 * std::max(1.0, r.loss));
  CHECK(rel(oz.demb, r.demb) <= 1e-5);  // row 1: g / 1e-12 (no radial term), huge but finite
  CHECK(rel(oz.dweight, r.dw) <= 2e-5);
}

TEST_CASE("margin_softmax: errors name what was expected and found") {
  const Problem p = random_problem(4, 5, 6, MarginType::aam, 81);
  const Tensor emb = Tensor::from_floats(p.emb, {4, 6}), w = Tensor::from_floats(p.w, {5, 6});
  const Tensor labels = labels_tensor(p.labels);
  Tensor demb = Tensor::empty({4, 6}, DType::f32), dw = Tensor::empty({5, 6}, DType::f32);
  Tensor sums = Tensor::zeros({kernels::kLossSums}, DType::f32);
  Tensor counts = Tensor::zeros({kernels::kLossCounts + 25}, DType::i32);
  auto err = [&](const Tensor& e, const Tensor& ww, const Tensor& l, kernels::MarginSoftmaxArgs d, Tensor& de,
                 Tensor& dww, Tensor& c) {
    return testing::error_of([&] { ops::margin_softmax_loss(e, ww, l, d, de, dww, sums, c, nullptr, nullptr,
                                                            nullptr); });
  };
  const auto d = dims_of(p);
  CHECK(err(emb, w, labels, d, demb, dw, counts) == "<no error>");
  const Tensor w7 = Tensor::from_floats(testing::random_floats(35, 1), {5, 7});
  CHECK(err(emb, w7, labels, d, demb, dw, counts).find("weight must be [C, D = 6]") != std::string::npos);
  const Tensor wbf = Tensor::from_floats(p.w, {5, 6}, DType::bf16);
  CHECK(err(emb, wbf, labels, d, demb, dw, counts).find("weight (emb's dtype)") != std::string::npos);
  const Tensor lf = Tensor::from_floats(Vec{0, 1, 2, 3}, {4});
  CHECK(err(emb, w, lf, d, demb, dw, counts).find("labels") != std::string::npos);
  Tensor dwb = Tensor::empty({5, 6}, DType::bf16);
  CHECK(err(emb, w, labels, d, demb, dwb, counts).find("dweight") != std::string::npos);
  Tensor demb5 = Tensor::empty({5, 6}, DType::f32);
  CHECK(err(emb, w, labels, d, demb5, dw, counts).find("demb (emb's shape)") != std::string::npos);
  Tensor c7 = Tensor::zeros({7}, DType::i32);
  CHECK(err(emb, w, labels, d, demb, dw, c7).find("counts must be [3] (no confusion matrix) or [3 + C*C = 28]") !=
        std::string::npos);
  auto d2 = d;
  d2.batch = 3;
  CHECK(err(emb, w, labels, d2, demb, dw, counts).find("batch 3 configured") != std::string::npos);
  d2 = d;
  d2.classes = 6;
  CHECK(err(emb, w, labels, d2, demb, dw, counts).find("6 classes configured") != std::string::npos);
  d2 = d;
  d2.scale = 0.f;
  CHECK(err(emb, w, labels, d2, demb, dw, counts).find("scale s must be finite and > 0") != std::string::npos);
  d2 = d;
  d2.margin = 3.2f;
  CHECK(err(emb, w, labels, d2, demb, dw, counts).find("aam margin must be an angle in [0, pi)") !=
        std::string::npos);
  d2.type = MarginType::am;
  CHECK(err(emb, w, labels, d2, demb, dw, counts) == "<no error>");
}

// ---- PyTorch oracle ----
TEST_CASE("margin_softmax: PyTorch oracle (voxceleb_trainer's formulas, autograd, float64)") {
  struct Case {
    Problem p;
    DType t;
    float ls, gs;
    std::filesystem::path dir;
    Out out;
  };
  const auto root = std::filesystem::temp_directory_path() / ("mf_margin_softmax_oracle_" + std::to_string(getpid()));
  std::filesystem::create_directories(root);
  std::vector<Case> cases;
  int id = 0;
  for (MarginType type : {MarginType::am, MarginType::aam})
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      Problem p = random_problem(9, 17, 12, type, std::uint64_t(91 + id), true);
      if (type == MarginType::aam) {
        set_cos(p, 0, p.labels[0], std::cos(std::numbers::pi - double(p.m)) + 0.01);
        set_cos(p, 2, p.labels[2], std::cos(std::numbers::pi - double(p.m)) - 0.01);
        set_cos(p, 3, p.labels[3], 0.9);
      }
      const float ls = t == DType::f16 ? 256.f : 1.f, gs = t == DType::f16 ? 0.5f : 1.f;
      Case c{p, t, ls, gs, root / std::to_string(id++), {}};
      std::filesystem::create_directories(c.dir);
      c.out = run_twin(p, t, ls, gs);
      testing::write_bin(c.dir / "emb.bin", Tensor::from_floats(p.emb, {p.B, p.D}, t).to_floats());
      testing::write_bin(c.dir / "w.bin", Tensor::from_floats(p.w, {p.C, p.D}, t).to_floats());
      testing::write_bin(c.dir / "labels.bin", p.labels);
      cases.push_back(std::move(c));
    }
  {
    std::ofstream f(root / "cases.txt");
    for (const Case& c : cases)
      f << c.dir.string() << ' ' << c.p.B << ' ' << c.p.C << ' ' << c.p.D << ' '
        << (c.p.type == MarginType::am ? "am" : "aam") << ' ' << c.p.s << ' ' << c.p.m << ' ' << c.ls * c.gs << '\n';
  }
  REQUIRE(testing::run_oracle("margin_softmax.py", (root / "cases.txt").string()) == 0);
  for (const Case& c : cases) {
    CAPTURE(c.dir.string());
    const DVec loss = testing::read_f64(c.dir / "loss.bin", 2);
    CHECK(std::fabs(c.out.step.to_floats()[0] - loss[0]) <= 1e-5 * std::max(1.0, loss[0]));
    CHECK(c.out.counts.to_floats()[1] == float(loss[1]));  // correct (plain-cosine argmax)
    CHECK(rel(c.out.demb, testing::read_f64(c.dir / "demb.bin", std::size_t(c.p.B * c.p.D))) <=
          testing::rel_l2_tolerance(c.t));
    CHECK(rel(c.out.dweight, testing::read_f64(c.dir / "dw.bin", std::size_t(c.p.C * c.p.D))) <= 2e-5);
  }
  std::filesystem::remove_all(root);
}
