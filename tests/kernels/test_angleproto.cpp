// angleproto_loss's CPU twin (kernels/angleproto.hpp) against a naive float64
// loop written from the contract (loss, demb, dw, db, metrics; every dtype,
// N = 2, M = 2 and 3, odd shapes), the float64 loop's analytic gradient
// against its own central differences wrt emb, w and b (w above and below
// the 1e-6 clamp), the twin's gradient against central differences of its
// own f32 loss, loss_scale/grad_scale (fp16), metrics and their accumulation
// (the counts' tail untouched), 1 vs 2 threads (identical bytes), NaN
// propagation, error messages, and PyTorch (tests/oracle/angleproto.py:
// voxceleb_trainer's formulas with autograd, float64).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/parallel.hpp"
#include "kernels/loss.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/tolerance.hpp"
#include "tests/support/oracle_files.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;

struct Problem {
  int N = 2, M = 2, D = 3;
  float w = 10.f, b = -5.f;
  Vec emb;
  std::int64_t rows() const { return std::int64_t(N) * M; }
};

kernels::AngleProtoArgs dims_of(const Problem& p, float grad_scale = 1.f) {
  kernels::AngleProtoArgs d;
  d.classes = p.N;
  d.per_class = p.M;
  d.dim = p.D;
  d.grad_scale = grad_scale;
  return d;
}

Problem random_problem(int N, int M, int D, std::uint64_t seed, float w = 10.f, float b = -5.f) {
  Problem p;
  p.N = N;
  p.M = M;
  p.D = D;
  p.w = w;
  p.b = b;
  p.emb = testing::random_floats(std::size_t(N) * std::size_t(M) * std::size_t(D), seed);
  return p;
}

struct Out {
  Tensor demb, dwb, sums, counts, step;
};

Out run_twin(const Problem& p, DType t, float loss_scale = 1.f, float grad_scale = 1.f, std::int64_t counts_len = 3) {
  const Tensor emb = Tensor::from_floats(p.emb, {p.rows(), p.D}, t);
  const Tensor wb = Tensor::from_floats(Vec{p.w, p.b}, {2});
  Out o;
  o.demb = Tensor::empty({p.rows(), p.D}, t);
  o.dwb = Tensor::empty({2}, DType::f32);
  o.demb.fill_bytes(0xff);
  o.dwb.fill_bytes(0xff);
  o.sums = Tensor::zeros({kernels::kLossSums}, DType::f32);
  o.counts = Tensor::zeros({counts_len}, DType::i32);
  o.step = Tensor::empty({1}, DType::f32);
  ops::angleproto_loss(emb, wb, dims_of(p, grad_scale), o.demb, o.dwb, o.sums, o.counts, &loss_scale, &o.step, nullptr);
  return o;
}

// ---- the float64 loop, from the contract ----
struct Ref {
  double loss = 0, dw = 0, db = 0;
  DVec demb;
  std::vector<int> pred;
};

DVec rounded(const Vec& v, DType t) {
  const Vec r = Tensor::from_floats(v, {std::int64_t(v.size())}, t).to_floats();
  return DVec(r.begin(), r.end());
}

Ref reference(const Problem& p, const DVec& emb, double w, double b, double gscale = 1.0) {
  const int N = p.N, M = p.M, D = p.D;
  const double eps = 1e-8, w_eff = w < double(1e-6f) ? double(1e-6f) : w;
  const std::size_t nd = std::size_t(N * D), n1 = std::size_t(N);
  DVec q(nd), pr(nd), nq(n1), np(n1);
  std::vector<bool> cq(n1), cp(n1);
  for (int c = 0; c < N; ++c) {
    double sq = 0, sp = 0;
    for (int k = 0; k < D; ++k) {
      const double qv = emb[std::size_t((c * M) * D + k)];
      double acc = 0;
      for (int m = 1; m < M; ++m) acc += emb[std::size_t((c * M + m) * D + k)];
      q[std::size_t(c * D + k)] = qv;
      pr[std::size_t(c * D + k)] = acc / (M - 1);
      sq += qv * qv;
      sp += acc / (M - 1) * acc / (M - 1);
    }
    cq[std::size_t(c)] = std::sqrt(sq) < eps;
    cp[std::size_t(c)] = std::sqrt(sp) < eps;
    nq[std::size_t(c)] = std::max(std::sqrt(sq), eps);
    np[std::size_t(c)] = std::max(std::sqrt(sp), eps);
  }
  Ref r;
  r.demb.assign(emb.size(), 0.0);
  r.pred.assign(std::size_t(N), 0);
  DVec cos(n1 * n1), dz(n1 * n1);
  for (int i = 0; i < N; ++i) {
    DVec z(n1);
    for (int j = 0; j < N; ++j) {
      double dot = 0;
      for (int k = 0; k < D; ++k) dot += q[std::size_t(i * D + k)] * pr[std::size_t(j * D + k)];
      cos[std::size_t(i * N + j)] = dot / (nq[std::size_t(i)] * np[std::size_t(j)]);
      z[std::size_t(j)] = w_eff * cos[std::size_t(i * N + j)] + b;
      if (z[std::size_t(j)] > z[std::size_t(r.pred[std::size_t(i)])]) r.pred[std::size_t(i)] = j;
    }
    const double mx = *std::max_element(z.begin(), z.end());
    double se = 0;
    for (double v : z) se += std::exp(v - mx);
    const double lse = mx + std::log(se);
    r.loss += (lse - z[std::size_t(i)]) / N;
    for (int j = 0; j < N; ++j) {
      const double g = (std::exp(z[std::size_t(j)] - lse) - (i == j)) / N * gscale;
      dz[std::size_t(i * N + j)] = g;
      r.dw += g * cos[std::size_t(i * N + j)];
      r.db += g;
    }
  }
  if (w < double(1e-6f)) r.dw = 0;
  // d cos_ij / d q_i = (pn_j - cos_ij qn_i) / nq_i (no radial term for a clamped norm); likewise for p_j.
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < N; ++j) {
      const double gc = w_eff * dz[std::size_t(i * N + j)], c = cos[std::size_t(i * N + j)];
      for (int k = 0; k < D; ++k) {
        const double qn = q[std::size_t(i * D + k)] / nq[std::size_t(i)];
        const double pn = pr[std::size_t(j * D + k)] / np[std::size_t(j)];
        r.demb[std::size_t((i * M) * D + k)] += gc * (pn - (cq[std::size_t(i)] ? 0 : c * qn)) / nq[std::size_t(i)];
        const double dp = gc * (qn - (cp[std::size_t(j)] ? 0 : c * pn)) / np[std::size_t(j)] / (M - 1);
        for (int m = 1; m < M; ++m) r.demb[std::size_t((j * M + m) * D + k)] += dp;
      }
    }
  return r;
}

double rel(const Tensor& got, const DVec& want) { return testing::rel_l2(got.to_floats(), want); }

}  // namespace

TEST_CASE("angleproto: the float64 loop's analytic gradient matches its own central differences (emb, w, b)") {
  struct Case {
    int N, M, D;
    float w;
  };
  // w = 10 (the init), 0.7, and 1e-7 (below the clamp: dw = 0, w's differences stay below 1e-6 too).
  for (Case c : {Case{2, 2, 3, 10.f}, Case{3, 3, 4, 0.7f}, Case{4, 2, 5, 1e-7f}, Case{2, 3, 1, 2.f}}) {
    CAPTURE(c.N);
    CAPTURE(c.M);
    CAPTURE(c.w);
    const Problem p = random_problem(c.N, c.M, c.D, std::uint64_t(c.N * 10 + c.M), c.w, -0.3f);
    const DVec emb(p.emb.begin(), p.emb.end());
    const Ref r = reference(p, emb, p.w, p.b);
    const double h = c.w < 1e-6f ? 1e-4 : 1e-7;  // tiny gradients: a wider step beats the loss's rounding
    DVec fe(emb.size());
    for (std::size_t i = 0; i < emb.size(); ++i) {
      DVec a = emb, b = emb;
      a[i] += h;
      b[i] -= h;
      fe[i] = (reference(p, a, p.w, p.b).loss - reference(p, b, p.w, p.b).loss) / (2 * h);
    }
    // Below the clamp the gradient is ~1e-7 against a loss of ~log N: the differences keep ~5 digits.
    CHECK(testing::rel_l2(r.demb, fe) <= (c.w < 1e-6f ? 3e-5 : 1e-6));
    const double hw = c.w < 1e-6f ? 1e-9 : 1e-6;
    const double fw = (reference(p, emb, double(p.w) + hw, p.b).loss - reference(p, emb, double(p.w) - hw, p.b).loss) /
                      (2 * hw);
    const double hb = 1e-7;
    const double fb = (reference(p, emb, p.w, double(p.b) + hb).loss - reference(p, emb, p.w, double(p.b) - hb).loss) /
                      (2 * hb);
    CHECK(std::fabs(r.dw - fw) <= 1e-7 * std::max(1.0, std::fabs(fw)));
    if (c.w < 1e-6f) {
      CHECK(r.dw == 0.0);
      CHECK(fw == 0.0);
    } else {
      CHECK(r.dw != 0.0);
    }
    CHECK(std::fabs(r.db - fb) <= 1e-7);
    CHECK(std::fabs(r.db) <= 1e-12);  // softmax rows sum to 1
  }
}

TEST_CASE("angleproto: CPU twin vs the float64 loop, every dtype, N = 2, M = 2 and 3, odd shapes") {
  struct Shape3 {
    int N, M, D;
  };
  for (Shape3 sh : {Shape3{2, 2, 1}, Shape3{2, 3, 5}, Shape3{7, 2, 33}, Shape3{16, 3, 64}, Shape3{3, 5, 7},
                    Shape3{64, 2, 192}})
    for (float w : {10.f, 1e-7f})
      for (DType t : {DType::f32, DType::bf16, DType::f16}) {
        CAPTURE(sh.N);
        CAPTURE(sh.M);
        CAPTURE(sh.D);
        CAPTURE(w);
        CAPTURE(dtype_name(t));
        const Problem p = random_problem(sh.N, sh.M, sh.D, std::uint64_t(sh.N * 100 + sh.M * 10 + sh.D), w, -5.f);
        // Below the clamp the gradients are ~1e-7: fp16 needs the loss scale AMP would give it.
        const float ls = w < 1e-6f ? 65536.f : 1.f;
        const Out o = run_twin(p, t, ls);
        const Ref r = reference(p, rounded(p.emb, t), p.w, p.b, ls);
        const double tol = testing::rel_l2_tolerance(t);
        const float loss = o.step.to_floats()[0];
        CHECK(std::fabs(loss - r.loss) <= 1e-5 * std::max(1.0, std::fabs(r.loss)));
        CHECK(rel(o.demb, r.demb) <= tol);
        const Vec dwb = o.dwb.to_floats();
        CHECK(std::fabs(dwb[0] - r.dw) <= 1e-5 * std::max(1.0, std::fabs(r.dw)));
        CHECK(std::fabs(dwb[1]) <= 1e-6 * ls);  // sum of softmax rows minus one-hots: 0 up to f32 rounding
        if (w < 1e-6f) CHECK(dwb[0] == 0.f);
        const Vec sums = o.sums.to_floats(), counts = o.counts.to_floats();
        CHECK(sums == Vec{loss, 0.f, loss, 1.f});
        int correct = 0;
        for (int i = 0; i < p.N; ++i) correct += r.pred[std::size_t(i)] == i;
        // Below the clamp the logits w_eff cos + b differ by ~1e-6: f32 rounds them into ties, so
        // the argmax is not comparable with float64's there.
        if (w >= 1e-6f) CHECK(counts == Vec{float(p.N), float(correct), 0.f});
        CHECK(counts[0] == float(p.N));
        CHECK(counts[2] == 0.f);
      }
}

TEST_CASE("angleproto: the twin's gradients match central differences of its own f32 loss") {
  for (int M : {2, 3}) {
    const Problem p = random_problem(3, M, 4, 31 + std::uint64_t(M), 2.f, -1.f);
    const Out o = run_twin(p, DType::f32);
    const double h = 1e-3;
    auto loss_at = [&](const Problem& q) { return double(run_twin(q, DType::f32).step.to_floats()[0]); };
    DVec fe(p.emb.size());
    for (std::size_t i = 0; i < p.emb.size(); ++i) {
      Problem a = p, b = p;
      a.emb[i] += float(h);
      b.emb[i] -= float(h);
      fe[i] = (loss_at(a) - loss_at(b)) / (2 * h);
    }
    CHECK(rel(o.demb, fe) <= 3e-3);
    Problem a = p, b = p;
    a.w += float(h);
    b.w -= float(h);
    const double fw = (loss_at(a) - loss_at(b)) / (2 * h);
    CHECK(std::fabs(o.dwb.to_floats()[0] - fw) <= 3e-3 * std::max(1.0, std::fabs(fw)));
    a = p;
    b = p;
    a.b += float(h);
    b.b -= float(h);
    CHECK(std::fabs(o.dwb.to_floats()[1] - (loss_at(a) - loss_at(b)) / (2 * h)) <= 1e-3);
  }
}

TEST_CASE("angleproto: loss_scale and grad_scale scale every gradient (fp16 keeps small ones)") {
  for (int M : {2, 3}) {
    const Problem p = random_problem(9, M, 7, 51 + std::uint64_t(M));
    const Out base = run_twin(p, DType::f32), sc = run_twin(p, DType::f32, 1024.f, 0.5f);
    CHECK(sc.step.to_floats()[0] == base.step.to_floats()[0]);  // the loss is not scaled
    const Vec b1 = base.demb.to_floats(), s1 = sc.demb.to_floats();
    for (std::size_t i = 0; i < b1.size(); ++i) CHECK(s1[i] == 512.f * b1[i]);  // powers of 2: exact
    const Vec b2 = base.dwb.to_floats(), s2 = sc.dwb.to_floats();
    CHECK(s2[0] == 512.f * b2[0]);
    CHECK(s2[1] == 512.f * b2[1]);
    const Out h = run_twin(p, DType::f16, 1024.f, 0.5f);
    const Ref r = reference(p, rounded(p.emb, DType::f16), p.w, p.b, 512.0);
    CHECK(rel(h.demb, r.demb) <= testing::rel_l2_tolerance(DType::f16));
    CHECK(std::fabs(h.dwb.to_floats()[0] - r.dw) <= 1e-5 * std::max(1.0, std::fabs(r.dw)));
  }
}

TEST_CASE("angleproto: metrics: known argmax, accumulation, a longer counts' tail untouched") {
  // Class i's segments point along axis i, except class 2's query, which points along axis 0.
  Problem p;
  p.N = 3;
  p.M = 2;
  p.D = 3;
  p.emb = {1, 0.1f, 0, 2, 0, 0.1f, 0, 1, 0.2f, 0.1f, 3, 0, 4, 0, 0.3f, 0, 0.2f, 1};
  const Tensor emb = Tensor::from_floats(p.emb, {6, 3}), wb = Tensor::from_floats(Vec{10.f, -5.f}, {2});
  Tensor demb = Tensor::empty({6, 3}, DType::f32), dwb = Tensor::empty({2}, DType::f32);
  Tensor sums = Tensor::zeros({kernels::kLossSums}, DType::f32);
  Tensor counts = Tensor::from_floats(Vec{0, 0, 0, 7, 8}, {5}, DType::i32);
  Tensor step = Tensor::empty({1}, DType::f32);
  ops::angleproto_loss(emb, wb, dims_of(p), demb, dwb, sums, counts, nullptr, &step, nullptr);
  const float l1 = step.to_floats()[0];
  ops::angleproto_loss(emb, wb, dims_of(p), demb, dwb, sums, counts, nullptr, nullptr, nullptr);
  CHECK(counts.to_floats() == Vec{6, 4, 0, 7, 8});  // rows 0 and 1 correct, twice
  CHECK(sums.to_floats() == Vec{l1 + l1, 0.f, l1 + l1, 2.f});
  const Ref r = reference(p, DVec(p.emb.begin(), p.emb.end()), 10, -5);
  CHECK(r.pred == std::vector<int>{0, 1, 0});
  CHECK(std::fabs(l1 - r.loss) <= 1e-5 * r.loss);
}

TEST_CASE("angleproto: the twin's bytes do not depend on the thread count") {
  for (int M : {2, 3})
    for (DType t : {DType::f32, DType::bf16}) {
      const Problem p = random_problem(37, M, 40, 61 + std::uint64_t(M));
      set_cpu_threads(1);
      const Out a = run_twin(p, t);
      set_cpu_threads(2);
      const Out b = run_twin(p, t);
      set_cpu_threads(0);
      for (auto [x, y] : {std::pair{&a.demb, &b.demb}, {&a.dwb, &b.dwb}, {&a.sums, &b.sums}, {&a.counts, &b.counts},
                          {&a.step, &b.step}})
        CHECK(std::memcmp(x->raw(), y->raw(), x->nbytes()) == 0);
    }
}

TEST_CASE("angleproto: NaN propagates; a zero query takes the 1e-8 clamp") {
  Problem p = random_problem(3, 2, 5, 71);
  p.emb[7] = NAN;  // row 1: class 0's prototype
  const Out o = run_twin(p, DType::f32);
  CHECK(std::isnan(o.step.to_floats()[0]));
  CHECK(std::isnan(o.dwb.to_floats()[0]));
  Problem z = random_problem(3, 3, 5, 72);
  for (int k = 0; k < z.D; ++k) z.emb[std::size_t(3 * z.D + k)] = 0.f;  // class 1's query
  const Out oz = run_twin(z, DType::f32);
  const Ref r = reference(z, rounded(z.emb, DType::f32), z.w, z.b);
  CHECK(std::fabs(oz.step.to_floats()[0] - r.loss) <= 1e-5 * std::max(1.0, r.loss));
  CHECK(rel(oz.demb, r.demb) <= 1e-5);  // the zero row: g / 1e-8 (no radial term), huge but finite
}

TEST_CASE("angleproto: errors name what was expected and found") {
  const Problem p = random_problem(3, 2, 4, 81);
  const Tensor emb = Tensor::from_floats(p.emb, {6, 4}), wb = Tensor::from_floats(Vec{10.f, -5.f}, {2});
  Tensor demb = Tensor::empty({6, 4}, DType::f32), dwb = Tensor::empty({2}, DType::f32);
  Tensor sums = Tensor::zeros({kernels::kLossSums}, DType::f32);
  Tensor counts = Tensor::zeros({3}, DType::i32);
  auto err = [&](const Tensor& e, const Tensor& w, kernels::AngleProtoArgs d, Tensor& de, Tensor& dw, Tensor& c) {
    return testing::error_of([&] { ops::angleproto_loss(e, w, d, de, dw, sums, c, nullptr, nullptr, nullptr); });
  };
  const auto d = dims_of(p);
  CHECK(err(emb, wb, d, demb, dwb, counts) == "<no error>");
  auto d2 = d;
  d2.per_class = 3;
  CHECK(err(emb, wb, d2, demb, dwb, counts).find("N = 3 classes of M = 3 segments configured (N*M = 9 rows)") !=
        std::string::npos);
  d2 = d;
  d2.per_class = 1;
  d2.classes = 6;
  CHECK(err(emb, wb, d2, demb, dwb, counts).find("at least 2 segments per class") != std::string::npos);
  d2 = d;
  d2.classes = 1;
  d2.per_class = 6;
  CHECK(err(emb, wb, d2, demb, dwb, counts).find("at least 2 classes") != std::string::npos);
  d2 = d;
  d2.dim = 5;
  CHECK(err(emb, wb, d2, demb, dwb, counts).find("embedding size 5 configured") != std::string::npos);
  const Tensor wb3 = Tensor::from_floats(Vec{1, 2, 3}, {3});
  CHECK(err(emb, wb3, d, demb, dwb, counts).find("wb (w, b)") != std::string::npos);
  const Tensor wbh = Tensor::from_floats(Vec{1, 2}, {2}, DType::bf16);
  CHECK(err(emb, wbh, d, demb, dwb, counts).find("wb (w, b)") != std::string::npos);
  Tensor demb_h = Tensor::empty({6, 4}, DType::f16);
  CHECK(err(emb, wb, d, demb_h, dwb, counts).find("demb (emb's dtype)") != std::string::npos);
  Tensor dwb1 = Tensor::empty({1}, DType::f32);
  CHECK(err(emb, wb, d, demb, dwb1, counts).find("dwb (dw, db)") != std::string::npos);
  Tensor c2 = Tensor::zeros({2}, DType::i32);
  CHECK(err(emb, wb, d, demb, dwb, c2).find("counts must be [3] or longer") != std::string::npos);
  const Tensor e3 = Tensor::from_floats(p.emb, {6, 4, 1});
  CHECK(err(e3, wb, d, demb, dwb, counts).find("emb must be [N*M, D]") != std::string::npos);
}

// ---- PyTorch oracle ----
TEST_CASE("angleproto: PyTorch oracle (voxceleb_trainer's formulas, autograd, float64)") {
  struct Case {
    Problem p;
    DType t;
    float ls, gs;
    std::filesystem::path dir;
    Out out;
  };
  const auto root = std::filesystem::temp_directory_path() / ("mf_angleproto_oracle_" + std::to_string(getpid()));
  std::filesystem::create_directories(root);
  std::vector<Case> cases;
  int id = 0;
  for (int M : {2, 3})
    for (DType t : {DType::f32, DType::bf16, DType::f16})
      for (float w : {10.f, 1e-7f}) {
        const Problem p = random_problem(M == 2 ? 2 : 11, M, M == 2 ? 6 : 24, std::uint64_t(91 + id), w, -5.f);
        const float ls = t != DType::f16 ? 1.f : w < 1e-6f ? 65536.f : 256.f, gs = t == DType::f16 ? 0.5f : 1.f;
        Case c{p, t, ls, gs, root / std::to_string(id++), {}};
        std::filesystem::create_directories(c.dir);
        c.out = run_twin(p, t, ls, gs);
        testing::write_bin(c.dir / "emb.bin", Tensor::from_floats(p.emb, {p.rows(), p.D}, t).to_floats());
        cases.push_back(std::move(c));
      }
  {
    std::ofstream f(root / "cases.txt");
    f.precision(9);
    for (const Case& c : cases)
      f << c.dir.string() << ' ' << c.p.N << ' ' << c.p.M << ' ' << c.p.D << ' ' << c.p.w << ' ' << c.p.b << ' '
        << c.ls * c.gs << '\n';
  }
  REQUIRE(testing::run_oracle("angleproto.py", (root / "cases.txt").string()) == 0);
  for (const Case& c : cases) {
    CAPTURE(c.dir.string());
    const DVec res = testing::read_f64(c.dir / "loss.bin", 4);
    CHECK(std::fabs(c.out.step.to_floats()[0] - res[0]) <= 1e-5 * std::max(1.0, res[0]));
    if (c.p.w >= 1e-6f) CHECK(c.out.counts.to_floats()[1] == float(res[1]));  // ties below the clamp
    const Vec dwb = c.out.dwb.to_floats();
    CHECK(std::fabs(dwb[0] - res[2]) <= 1e-5 * std::max(1.0, std::fabs(res[2])));
    if (c.p.w < 1e-6f) CHECK(res[2] == 0.0);  // torch.clamp's gradient too
    CHECK(std::fabs(dwb[1] - res[3]) <= 1e-5 * double(c.ls * c.gs));
    CHECK(rel(c.out.demb, testing::read_f64(c.dir / "demb.bin", std::size_t(c.p.rows() * c.p.D))) <=
          testing::rel_l2_tolerance(c.t));
  }
  std::filesystem::remove_all(root);
}
