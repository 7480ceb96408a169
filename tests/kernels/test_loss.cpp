// The fused two-head loss and the evaluation head (kernels/loss.hpp), CPU
// twin: leak_loss against a float64 evaluation of PyTorch's formulas (class
// weights, label smoothing), its gradient against finite differences of that
// evaluation, and its metric counts against a direct count; head_probs
// against a float64 softmax and sigmoid. Without the confusion matrix
// (counts [kLossCounts]): the same bits as with it, up to C = 3000, and the
// counts' size errors. The CUDA kernels against this twin: test_loss_gpu.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/parallel.hpp"
#include "kernels/ops.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {

// PyTorch's formulas in float64 (weighted mean with smoothing as in
// torch.nn.functional.cross_entropy; BCEWithLogits mean).
double total_loss(const std::vector<double>& z, const std::vector<int>& y, const std::vector<float>& t,
                  const std::vector<float>& cw, std::int64_t B, std::int64_t C, double eps, double wc, double wl, double* ce_out,
                  double* bce_out) {
  double nll = 0, smooth = 0, den = 0, bce = 0;
  for (std::int64_t i = 0; i < B; ++i) {
    const double* r = z.data() + i * (C + 1);
    double mx = r[0];
    for (std::int64_t c = 1; c < C; ++c) mx = std::max(mx, r[c]);
    double se = 0;
    for (std::int64_t c = 0; c < C; ++c) se += std::exp(r[c] - mx);
    const double lse = mx + std::log(se);
    const double wy = cw.empty() ? 1 : cw[std::size_t(y[std::size_t(i)])];
    nll += wy * (lse - r[y[std::size_t(i)]]);
    den += wy;
    for (std::int64_t c = 0; c < C; ++c) smooth += (cw.empty() ? 1 : cw[std::size_t(c)]) * (lse - r[c]);
    const double zl = r[C], tt = t[std::size_t(i)];
    bce += std::max(zl, 0.0) - zl * tt + std::log1p(std::exp(-std::fabs(zl)));
  }
  const double ce = (1 - eps) * nll / den + eps / C * smooth / den;
  if (ce_out) *ce_out = ce;
  if (bce_out) *bce_out = bce / B;
  return wc * ce + wl * bce / B;
}

}  // namespace

TEST_CASE("fused loss: PyTorch semantics (class weights, label smoothing), gradients by finite differences, metrics") {
  const std::int64_t B = 13, C = 4;
  const auto zf = testing::random_floats(std::size_t(B * (C + 1)), 21, -3, 3);
  std::vector<int> y;
  std::vector<float> labels, t;
  for (std::int64_t i = 0; i < B; ++i) {
    y.push_back((i * 7) % C);
    labels.push_back(float(y.back()));
    t.push_back(float(i % 3 == 0));
  }
  for (const std::vector<float>& cw : {std::vector<float>{}, std::vector<float>{1.f, 2.5f, 0.5f, 1.5f}})
    for (float eps : {0.f, 0.2f}) {
      kernels::ClassLeakLossArgs d;
      d.batch = B;
      d.classes = int(C);
      d.label_smoothing = eps;
      d.class_loss_weight = 0.8f;
      d.leak_loss_weight = 1.3f;
      d.grad_scale = 0.5f;
      const float loss_scale = 4.f;
      Tensor logits = Tensor::from_floats(zf, {B, C + 1});
      Tensor lab = Tensor::from_floats(labels, {B}, DType::i32), leak = Tensor::from_floats(t, {B});
      Tensor cwt = cw.empty() ? Tensor() : Tensor::from_floats(cw, {C});
      Tensor dl = Tensor::empty({B, C + 1}, DType::f32);
      dl.fill_bytes(0xff);
      Tensor sums = Tensor::zeros({kernels::kLossSums}, DType::f32), counts = Tensor::zeros({kernels::kLossCounts + C * C}, DType::i32);
      Tensor sl = Tensor::zeros({1}, DType::f32);
      ops::class_leak_loss(logits, lab, d, dl, sums, counts, &leak, cw.empty() ? nullptr : &cwt, nullptr, nullptr,
                           &loss_scale, &sl);
      std::vector<double> z(zf.begin(), zf.end());
      double ce = 0, bce = 0;
      const double ref = total_loss(z, y, t, cw, B, C, eps, 0.8, 1.3, &ce, &bce);
      CHECK(std::fabs(sl.to_floats()[0] - ref) <= 1e-5 * std::fabs(ref));
      const auto s = sums.to_floats();
      CHECK(std::fabs(s[0] - ce) <= 1e-5 * ce);
      CHECK(std::fabs(s[1] - bce) <= 1e-5 * bce);
      CHECK(s[3] == 1.f);
      std::vector<double> fd;
      for (std::size_t i = 0; i < z.size(); ++i) {
        auto zp = z, zm = z;
        zp[i] += 1e-5;
        zm[i] -= 1e-5;
        fd.push_back((total_loss(zp, y, t, cw, B, C, eps, 0.8, 1.3, nullptr, nullptr) -
                      total_loss(zm, y, t, cw, B, C, eps, 0.8, 1.3, nullptr, nullptr)) /
                     2e-5 * loss_scale * 0.5);
      }
      CHECK(testing::rel_l2(dl.to_floats(), fd) < 1e-5);
      // Metrics: argmax correct counts and the confusion matrix.
      const auto cnt = counts.to_floats();
      int correct = 0, lc = 0;
      std::vector<int> conf(std::size_t(C * C), 0);
      for (std::int64_t i = 0; i < B; ++i) {
        std::int64_t arg = 0;
        for (std::int64_t c = 1; c < C; ++c)
          if (zf[std::size_t(i * (C + 1) + c)] > zf[std::size_t(i * (C + 1) + arg)]) arg = c;
        correct += arg == y[std::size_t(i)];
        ++conf[std::size_t(y[std::size_t(i)] * C + arg)];
        lc += (zf[std::size_t(i * (C + 1) + C)] > 0) == (t[std::size_t(i)] > 0.5f);
      }
      CHECK(cnt[0] == B);
      CHECK(cnt[1] == correct);
      CHECK(cnt[2] == lc);
      for (std::int64_t i = 0; i < C * C; ++i) CHECK(cnt[std::size_t(kernels::kLossCounts + i)] == conf[std::size_t(i)]);
    }
}

TEST_CASE("head_probs: softmax of the class columns and sigmoid of the leak column, every precision") {
  const std::int64_t B = 37, C = 6;
  const auto z = testing::random_floats(std::size_t(B * (C + 1)), 22, -8, 8);
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    const Tensor logits = Tensor::from_floats(z, {B, C + 1}, t);
    const auto zt = logits.to_floats();  // the reference reads the logits as rounded to t
    std::vector<double> want_p, want_l;
    for (std::int64_t i = 0; i < B; ++i) {
      const float* r = zt.data() + i * (C + 1);
      const double mx = *std::max_element(r, r + C);
      double se = 0;
      for (std::int64_t c = 0; c < C; ++c) se += std::exp(r[c] - mx);
      for (std::int64_t c = 0; c < C; ++c) want_p.push_back(std::exp(r[c] - mx) / se);
      want_l.push_back(1 / (1 + std::exp(-double(r[C]))));
    }
    Tensor p = Tensor::empty({B, C}, DType::f32), l = Tensor::empty({B}, DType::f32);
    p.fill_bytes(0xff);  // NaN: every element must be written
    l.fill_bytes(0xff);
    ops::head_probs(logits, p, &l);
    // f32 arithmetic on exact inputs: a few ulps.
    CHECK(testing::rel_l2(p.to_floats(), want_p) < 1e-6);
    CHECK(testing::rel_l2(l.to_floats(), want_l) < 1e-6);
  }
  Tensor wrong = Tensor::empty({B, C + 1}, DType::f32), l = Tensor::empty({B}, DType::f32);
  CHECK_THROWS_WITH_AS(ops::head_probs(Tensor::zeros({B, C + 1}, DType::f32), wrong, &l),
                       doctest::Contains("head_probs: probs must have shape"), Error);
}

namespace {

// The soft-target (mixup) class loss of kernels/loss.hpp in float64:
// sum_i [lam_i n_i(y_a) + o_i n_i(y_b)] / sum_i [lam_i w_ya + o_i w_yb], o_i
// the f32 1 - lam_i; a label outside [0, C) contributes nothing.
double soft_class_loss(const std::vector<double>& z, const std::vector<int>& ya, const std::vector<int>& yb,
                       const std::vector<float>& lam, const std::vector<float>& cw, std::int64_t B, std::int64_t C,
                       double eps) {
  double num = 0, den = 0;
  for (std::int64_t i = 0; i < B; ++i) {
    const double* r = z.data() + i * (C + 1);
    double mx = r[0];
    for (std::int64_t c = 1; c < C; ++c) mx = std::max(mx, r[c]);
    double se = 0;
    for (std::int64_t c = 0; c < C; ++c) se += std::exp(r[c] - mx);
    const double lse = mx + std::log(se);
    double smooth = 0;
    for (std::int64_t c = 0; c < C; ++c) smooth += (cw.empty() ? 1 : cw[std::size_t(c)]) * (lse - r[c]);
    const double l = lam[std::size_t(i)], o = double(1.f - lam[std::size_t(i)]);
    for (const auto& [y, wt] : {std::pair<int, double>{ya[std::size_t(i)], l}, {yb[std::size_t(i)], o}}) {
      if (y < 0 || y >= C) continue;
      const double wy = cw.empty() ? 1 : cw[std::size_t(y)];
      num += wt * ((1 - eps) * wy * (lse - r[y]) + eps / double(C) * smooth);
      den += wt * wy;
    }
  }
  return den > 0 ? num / den : 0;
}

double bce_loss(const std::vector<double>& z, const std::vector<float>& t, std::int64_t B, std::int64_t C) {
  double bce = 0;
  for (std::int64_t i = 0; i < B; ++i) {
    const double zl = z[std::size_t(i * (C + 1) + C)], tt = t[std::size_t(i)];
    bce += std::max(zl, 0.0) - zl * tt + std::log1p(std::exp(-std::fabs(zl)));
  }
  return bce / double(B);
}

struct LossOut {
  std::vector<float> dl, sums, counts, step;
};

LossOut run_loss(const std::vector<float>& z, const std::vector<float>& ya, const std::vector<float>* yb,
                 const std::vector<float>* lam, const std::vector<float>& t, const std::vector<float>& cw,
                 const kernels::ClassLeakLossArgs& d, float loss_scale) {
  const std::int64_t B = d.batch, C = d.classes;
  const Tensor logits = Tensor::from_floats(z, {B, C + 1});
  const Tensor lab = Tensor::from_floats(ya, {B}, DType::i32), leak = Tensor::from_floats(t, {B});
  const Tensor cwt = cw.empty() ? Tensor() : Tensor::from_floats(cw, {C});
  const Tensor lb = yb ? Tensor::from_floats(*yb, {B}, DType::i32) : Tensor();
  const Tensor lm = lam ? Tensor::from_floats(*lam, {B}) : Tensor();
  Tensor dl = Tensor::empty({B, C + 1}, DType::f32);
  dl.fill_bytes(0xff);
  Tensor sums = Tensor::zeros({kernels::kLossSums}, DType::f32),
         counts = Tensor::zeros({kernels::kLossCounts + C * C}, DType::i32), sl = Tensor::zeros({1}, DType::f32);
  ops::class_leak_loss(logits, lab, d, dl, sums, counts, &leak, cw.empty() ? nullptr : &cwt, yb ? &lb : nullptr,
                       lam ? &lm : nullptr, &loss_scale, &sl, nullptr);
  return {dl.to_floats(), sums.to_floats(), counts.to_floats(), sl.to_floats()};
}

}  // namespace

TEST_CASE("fused loss, soft targets (mixup): float64 reference, finite-difference gradients, dominant-label metrics") {
  const std::int64_t B = 17, C = 5;
  const auto zf = testing::random_floats(std::size_t(B * (C + 1)), 31, -3, 3);
  const auto lamf = testing::random_floats(std::size_t(B), 32, 0, 1);
  std::vector<int> ya, yb;
  std::vector<float> fa, fb, t;
  for (std::int64_t i = 0; i < B; ++i) {
    ya.push_back(i == 3 ? -1 : int((i * 7) % C));  // one ignored label on each side
    yb.push_back(i == 8 ? int(C) : int((i * 3 + 1) % C));
    fa.push_back(float(ya.back()));
    fb.push_back(float(yb.back()));
    t.push_back(float(i % 4) / 3.f);  // mixed (soft) leak targets
  }
  for (const std::vector<float>& cw : {std::vector<float>{}, std::vector<float>{1.f, 2.5f, 0.5f, 1.5f, 0.8f}})
    for (float eps : {0.f, 0.15f}) {
      CAPTURE(cw.size());
      CAPTURE(eps);
      kernels::ClassLeakLossArgs d;
      d.batch = B;
      d.classes = int(C);
      d.label_smoothing = eps;
      d.class_loss_weight = 0.7f;
      d.leak_loss_weight = 1.4f;
      d.grad_scale = 0.25f;
      const float scale = 8.f;
      const LossOut out = run_loss(zf, fa, &fb, &lamf, t, cw, d, scale);
      const std::vector<double> z(zf.begin(), zf.end());
      auto total = [&](const std::vector<double>& zz) {
        return 0.7 * soft_class_loss(zz, ya, yb, lamf, cw, B, C, eps) + 1.4 * bce_loss(zz, t, B, C);
      };
      const double ce = soft_class_loss(z, ya, yb, lamf, cw, B, C, eps), bce = bce_loss(z, t, B, C);
      CHECK(std::fabs(out.sums[0] - ce) <= 1e-5 * ce);
      CHECK(std::fabs(out.sums[1] - bce) <= 1e-5 * bce);
      CHECK(std::fabs(out.step[0] - total(z)) <= 1e-5 * total(z));
      std::vector<double> fd;
      for (std::size_t i = 0; i < z.size(); ++i) {
        auto zp = z, zm = z;
        zp[i] += 1e-5;
        zm[i] -= 1e-5;
        fd.push_back((total(zp) - total(zm)) / 2e-5 * scale * 0.25);
      }
      CHECK(testing::rel_l2(out.dl, fd) < 1e-5);
      int correct = 0;
      std::vector<int> conf(std::size_t(C * C), 0);
      for (std::int64_t i = 0; i < B; ++i) {
        std::int64_t arg = 0;
        for (std::int64_t c = 1; c < C; ++c)
          if (zf[std::size_t(i * (C + 1) + c)] > zf[std::size_t(i * (C + 1) + arg)]) arg = c;
        const int y = lamf[std::size_t(i)] >= 0.5f ? ya[std::size_t(i)] : yb[std::size_t(i)];
        if (y < 0 || y >= C) continue;
        correct += arg == y;
        ++conf[std::size_t(y * C + arg)];
      }
      CHECK(out.counts[0] == B);
      CHECK(out.counts[1] == correct);
      for (std::int64_t i = 0; i < C * C; ++i)
        CHECK(out.counts[std::size_t(kernels::kLossCounts + i)] == conf[std::size_t(i)]);
    }
}

TEST_CASE("fused loss, soft targets: lam = 1 gives the hard labels' bits, lam = 0 those of labels_b; both or neither") {
  const std::int64_t B = 23, C = 4;
  const auto z = testing::random_floats(std::size_t(B * (C + 1)), 41, -4, 4);
  std::vector<float> ya, yb, t;
  for (std::int64_t i = 0; i < B; ++i) {
    ya.push_back(float(i % C));
    yb.push_back(float((i * 5 + 2) % C));
    t.push_back(float(i % 2));
  }
  const std::vector<float> cw{0.5f, 1.f, 2.f, 1.5f}, ones(std::size_t(B), 1.f), zeros(std::size_t(B), 0.f);
  kernels::ClassLeakLossArgs d;
  d.batch = B;
  d.classes = int(C);
  d.label_smoothing = 0.1f;
  d.grad_scale = 0.5f;
  const LossOut hard_a = run_loss(z, ya, nullptr, nullptr, t, cw, d, 2.f);
  const LossOut hard_b = run_loss(z, yb, nullptr, nullptr, t, cw, d, 2.f);
  const LossOut soft_1 = run_loss(z, ya, &yb, &ones, t, cw, d, 2.f);
  const LossOut soft_0 = run_loss(z, ya, &yb, &zeros, t, cw, d, 2.f);
  CHECK(soft_1.dl == hard_a.dl);
  CHECK(soft_1.sums == hard_a.sums);
  CHECK(soft_1.counts == hard_a.counts);
  CHECK(soft_0.dl == hard_b.dl);
  CHECK(soft_0.sums == hard_b.sums);
  CHECK(soft_0.counts == hard_b.counts);
  CHECK(hard_a.dl != hard_b.dl);  // the two label sets do differ
  const Tensor logits = Tensor::from_floats(z, {B, C + 1}), lab = Tensor::from_floats(ya, {B}, DType::i32),
               leak = Tensor::from_floats(t, {B}), lb = Tensor::from_floats(yb, {B}, DType::i32);
  Tensor dl = Tensor::empty({B, C + 1}, DType::f32), sums = Tensor::zeros({kernels::kLossSums}, DType::f32),
         counts = Tensor::zeros({kernels::kLossCounts + C * C}, DType::i32);
  CHECK(testing::error_of([&] {
          ops::class_leak_loss(logits, lab, d, dl, sums, counts, &leak, nullptr, &lb, nullptr, nullptr, nullptr,
                               nullptr);
        }).find("labels_b and lam must be given together") != std::string::npos);
}

// ---- without the confusion matrix (counts [kLossCounts]; issue 20: thousands of speakers) ----

namespace {

// One case's inputs: random logits, labels with an ignored one every 9th row,
// soft targets (mixup) and class weights when asked.
struct NcCase {
  std::int64_t B = 1;
  int C = 1;
  bool leak = true, mix = false, weighted = false;
  float eps = 0.f;
  DType t = DType::f32;
};

struct NcOut {
  std::vector<float> dl, sums, counts, step;
};

NcOut run_nc(const NcCase& c, bool confusion, int threads = 0) {
  const std::int64_t B = c.B, C = c.C, L = C + (c.leak ? 1 : 0);
  kernels::ClassLeakLossArgs d;
  d.batch = B;
  d.classes = c.C;
  d.leak_head = c.leak;
  d.label_smoothing = c.eps;
  d.class_loss_weight = 0.9f;
  d.leak_loss_weight = 1.2f;
  d.grad_scale = 0.5f;
  std::vector<float> ya, yb, t;
  for (std::int64_t i = 0; i < B; ++i) {
    ya.push_back(i % 9 == 4 ? -1.f : float((i * 7 + 3) % C));
    yb.push_back(i % 11 == 6 ? float(C) : float((i * 5 + 1) % C));
    t.push_back(float(i % 3) / 2.f);
  }
  const Tensor logits = Tensor::from_floats(testing::random_floats(std::size_t(B * L), 51, -4, 4), {B, L}, c.t);
  const Tensor lab = Tensor::from_floats(ya, {B}, DType::i32), lb = Tensor::from_floats(yb, {B}, DType::i32);
  const Tensor lam = Tensor::from_floats(testing::random_floats(std::size_t(B), 52, 0, 1), {B});
  const Tensor leak = c.leak ? Tensor::from_floats(t, {B}) : Tensor();
  const Tensor cw = Tensor::from_floats(testing::random_floats(std::size_t(C), 53, 0.25f, 2.f), {C});
  Tensor dl = Tensor::empty({B, L}, c.t);
  dl.fill_bytes(0xff);  // NaN: every element must be written
  Tensor sums = Tensor::from_floats(std::vector<float>{0.5f, 0.25f, 1.f, 2.f}, {kernels::kLossSums});  // += onto these
  Tensor counts = Tensor::zeros({kernels::kLossCounts + (confusion ? C * C : 0)}, DType::i32);
  Tensor sl = Tensor::zeros({1}, DType::f32);
  const int saved = cpu_threads();
  if (threads) set_cpu_threads(threads);
  const float scale = 8.f;
  ops::class_leak_loss(logits, lab, d, dl, sums, counts, &leak, c.weighted ? &cw : nullptr, c.mix ? &lb : nullptr,
                       c.mix ? &lam : nullptr, &scale, &sl, nullptr);
  set_cpu_threads(saved);
  return {dl.to_floats(), sums.to_floats(), counts.to_floats(), sl.to_floats()};
}

// Bit equality of float vectors (NaN == NaN when the bits agree).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("fused loss without the confusion matrix: the full mode's loss, gradients, sums and counts, bit for bit") {
  // C up to 3000 (a speaker set): the full mode's counts then hold 9M entries, fine on the CPU.
  for (const auto& [B, C] : {std::pair<std::int64_t, int>{1, 1}, {13, 4}, {130, 37}, {6, 3000}})
    for (DType t : {DType::f32, DType::bf16, DType::f16})
      for (int flags = 0; flags < 16; ++flags) {
        NcCase c;
        c.B = B;
        c.C = C;
        c.t = t;
        c.leak = flags & 1;
        c.mix = flags & 2;
        c.weighted = flags & 4;
        c.eps = flags & 8 ? 0.1f : 0.f;
        if (t != DType::f32 && flags != 0 && flags != 15) continue;  // the other precisions: all off, all on
        CAPTURE(B);
        CAPTURE(C);
        const std::string dt(dtype_name(t));
        CAPTURE(dt);
        CAPTURE(flags);
        const NcOut full = run_nc(c, true), nc = run_nc(c, false);
        CHECK(same_bits(nc.dl, full.dl));
        CHECK(same_bits(nc.sums, full.sums));
        CHECK(same_bits(nc.step, full.step));
        REQUIRE(nc.counts.size() == std::size_t(kernels::kLossCounts));
        CHECK(std::vector<float>(full.counts.begin(), full.counts.begin() + kernels::kLossCounts) == nc.counts);
        // Not vacuous: the full mode did count the matrix (one entry per row with a valid dominant label),
        // the results are finite and the leak counts move with the head.
        double conf = 0;
        for (std::size_t i = kernels::kLossCounts; i < full.counts.size(); ++i) conf += full.counts[i];
        CHECK(conf > 0);
        CHECK(conf <= double(B));
        CHECK(std::isfinite(nc.sums[2]));
        CHECK(nc.counts[0] == float(B));
        if (!c.leak) CHECK(nc.counts[2] == 0.f);
      }
}

TEST_CASE("fused loss without the confusion matrix: thread-count independent; the twin touches only counts[0..2]") {
  NcCase c;
  c.B = 300;  // several 64-row chunks
  c.C = 211;
  c.mix = c.weighted = true;
  c.eps = 0.05f;
  const NcOut one = run_nc(c, false, 1), two = run_nc(c, false, 2);
  CHECK(same_bits(one.dl, two.dl));
  CHECK(same_bits(one.sums, two.sums));
  CHECK(one.counts == two.counts);
  // The kernel entry point with a guard band after the three counts: left as it was.
  const std::int64_t B = 9;
  const int C = 6;
  kernels::ClassLeakLossArgs d;
  d.batch = B;
  d.classes = C;
  d.confusion = false;
  auto z = testing::random_floats(std::size_t(B * (C + 1)), 61, -2, 2);
  std::vector<std::int32_t> labels;
  std::vector<float> leak, dl(std::size_t(B * (C + 1)));
  for (std::int64_t i = 0; i < B; ++i) {
    labels.push_back(std::int32_t(i % C));
    leak.push_back(float(i % 2));
    if (i % 2 == 0) z[std::size_t(i * (C + 1) + i % C)] += 5.f;  // the label wins on even rows
  }
  std::vector<float> sums(kernels::kLossSums, 0.f);
  std::vector<std::int32_t> counts(kernels::kLossCounts + 64, -7);
  counts[0] = counts[1] = counts[2] = 0;
  kernels::class_leak_loss_cpu(d, DType::f32, z.data(), labels.data(), nullptr, nullptr, leak.data(), nullptr, nullptr,
                         dl.data(), sums.data(), counts.data(), nullptr, nullptr);
  CHECK(counts[0] == B);
  CHECK(counts[1] >= 5);  // the even rows at least
  for (std::size_t i = kernels::kLossCounts; i < counts.size(); ++i) CHECK(counts[i] == -7);
}

TEST_CASE("fused loss: counts must be [kLossCounts] or [kLossCounts + C*C]") {
  const std::int64_t B = 4, C = 3;
  kernels::ClassLeakLossArgs d;
  d.batch = B;
  d.classes = int(C);
  const Tensor logits = Tensor::zeros({B, C + 1}, DType::f32), lab = Tensor::zeros({B}, DType::i32),
               leak = Tensor::zeros({B}, DType::f32);
  Tensor dl = Tensor::empty({B, C + 1}, DType::f32), sums = Tensor::zeros({kernels::kLossSums}, DType::f32);
  for (const Shape& bad : {Shape{4}, Shape{kernels::kLossCounts + C * C - 1}, Shape{kernels::kLossCounts + C * C + 1},
                           Shape{1, kernels::kLossCounts}, Shape{0}}) {
    Tensor counts = Tensor::zeros(bad, DType::i32);
    const std::string e = testing::error_of([&] { ops::class_leak_loss(logits, lab, d, dl, sums, counts, &leak, nullptr,
                                                                       nullptr, nullptr, nullptr, nullptr); });
    CAPTURE(e);
    CHECK(e.find("class_leak_loss: counts must be [3] (no confusion matrix) or [3 + C*C = 12], found") != std::string::npos);
  }
  Tensor counts = Tensor::zeros({kernels::kLossCounts}, DType::f32);  // the right size, the wrong dtype
  CHECK(testing::error_of([&] { ops::class_leak_loss(logits, lab, d, dl, sums, counts, &leak, nullptr, nullptr, nullptr,
                                                     nullptr, nullptr); })
            .find("leak_loss") != std::string::npos);
  for (std::int64_t n : {std::int64_t(kernels::kLossCounts), kernels::kLossCounts + C * C}) {  // both accepted
    Tensor ok = Tensor::zeros({n}, DType::i32);
    CHECK(testing::error_of([&] { ops::class_leak_loss(logits, lab, d, dl, sums, ok, &leak, nullptr, nullptr, nullptr,
                                                       nullptr, nullptr); }) ==
          "<no error>");
  }
}
