// The fused two-head loss (kernels/loss.cu) against its CPU twin: metric
// counts exact, gradients and loss sums within f32 rounding (one block, batch
// 1 to 8192, every precision); head_probs against its twin. Without the
// confusion matrix (counts [kLossCounts], the warp-per-row kernels): C up to
// 3000 with label smoothing, class weights, mixup targets and the leak head on
// and off, argmax ties and NaN, counts past the third untouched, run twice for
// the same bytes. Device outputs are NaN-poisoned first. Runs only where a GPU (or the CUDA emulator) is usable;
// else exits 77 (skipped).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "engine/stream.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/tolerance.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {
const Device kGpu = Device::cuda(0);
}  // namespace

TEST_CASE("fused loss: CUDA vs CPU twin (metrics exact, gradients and losses within f32 rounding)") {
  Stream s(kGpu);
  for (std::int64_t B : {1, 513, 8192})
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      const int C = 5;
      kernels::ClassLeakLossArgs d;
      d.batch = B;
      d.classes = C;
      d.label_smoothing = 0.1f;
      d.grad_scale = 0.5f;
      const Tensor logits = Tensor::from_floats(testing::random_floats(std::size_t(B * (C + 1)), 7, -4, 4), {B, C + 1}, t);
      std::vector<float> lab, lk;
      for (std::int64_t i = 0; i < B; ++i) {
        lab.push_back(float(i % C));
        lk.push_back(float(i % 2));
      }
      const Tensor labels = Tensor::from_floats(lab, {B}, DType::i32), leak = Tensor::from_floats(lk, {B});
      const Tensor cw = Tensor::from_floats(std::vector<float>{1, 2, 3, 0.5f, 1}, {C});
      Tensor dl = Tensor::empty({B, C + 1}, t), sums = Tensor::zeros({kernels::kLossSums}, DType::f32),
             counts = Tensor::zeros({kernels::kLossCounts + C * C}, DType::i32);
      const float scale = 1024.f;
      ops::class_leak_loss(logits, labels, d, dl, sums, counts, &leak, &cw, nullptr, nullptr, &scale, nullptr);
      Tensor gscale = Tensor::from_floats(std::vector<float>{scale}, {1}).to(kGpu, s);
      Tensor gl = logits.to(kGpu, s), glab = labels.to(kGpu, s), glk = leak.to(kGpu, s), gcw = cw.to(kGpu, s);
      Tensor gdl = Tensor::empty({B, C + 1}, t, kGpu, Layout::plain, s);
      gdl.fill_bytes(0xff, s);
      Tensor gs = Tensor::zeros({kernels::kLossSums}, DType::f32, kGpu, Layout::plain, s);
      Tensor gc = Tensor::zeros({kernels::kLossCounts + C * C}, DType::i32, kGpu, Layout::plain, s);
      ops::class_leak_loss(gl, glab, d, gdl, gs, gc, &glk, &gcw, nullptr, nullptr, gscale.data<float>(), nullptr, s);
      s.synchronize();
      CHECK(testing::rel_l2(gdl.to_floats(), dl.to_floats()) <= (t == DType::f32 ? 1e-5 : testing::rel_l2_tolerance(t)));
      CHECK(testing::rel_l2(gs.to_floats(), sums.to_floats()) <= 1e-5);
      CHECK(gc.to_floats() == counts.to_floats());
    }
}

TEST_CASE("head_probs: CUDA vs CPU twin, every precision, batch 1 to 8192") {
  Stream s(kGpu);
  const int C = 7;
  for (std::int64_t B : {1, 513, 8192})
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      const Tensor logits = Tensor::from_floats(testing::random_floats(std::size_t(B * (C + 1)), 9, -6, 6), {B, C + 1}, t);
      Tensor p = Tensor::empty({B, C}, DType::f32), l = Tensor::empty({B}, DType::f32);
      ops::head_probs(logits, p, &l);
      Tensor gl = logits.to(kGpu, s);
      Tensor gp = Tensor::empty({B, C}, DType::f32, kGpu, Layout::plain, s), glp = Tensor::empty({B}, DType::f32, kGpu, Layout::plain, s);
      gp.fill_bytes(0xff, s);
      glp.fill_bytes(0xff, s);
      ops::head_probs(gl, gp, &glp, s);
      s.synchronize();
      // f32 math on the same inputs; exp may differ by an ulp or two between the two.
      CHECK(testing::rel_l2(gp.to_floats(), p.to_floats()) <= 1e-6);
      CHECK(testing::rel_l2(glp.to_floats(), l.to_floats()) <= 1e-6);
    }
}

TEST_CASE("fused loss, soft targets (mixup): CUDA vs CPU twin (metrics exact, gradients and losses within f32 rounding)") {
  Stream s(kGpu);
  for (std::int64_t B : {1, 513, 4096})
    for (DType t : {DType::f32, DType::bf16}) {
      const int C = 5;
      kernels::ClassLeakLossArgs d;
      d.batch = B;
      d.classes = C;
      d.label_smoothing = 0.1f;
      d.grad_scale = 0.5f;
      const Tensor logits = Tensor::from_floats(testing::random_floats(std::size_t(B * (C + 1)), 8, -4, 4), {B, C + 1}, t);
      std::vector<float> lab, labb, lk;
      for (std::int64_t i = 0; i < B; ++i) {
        lab.push_back(i % 11 == 5 ? -1.f : float(i % C));  // some ignored labels
        labb.push_back(float((i * 3 + 1) % C));
        lk.push_back(float(i % 3) / 2.f);
      }
      const Tensor labels = Tensor::from_floats(lab, {B}, DType::i32), labels_b = Tensor::from_floats(labb, {B}, DType::i32),
                   leak = Tensor::from_floats(lk, {B}), lam = Tensor::from_floats(testing::random_floats(std::size_t(B), 9, 0, 1), {B});
      const Tensor cw = Tensor::from_floats(std::vector<float>{1, 2, 3, 0.5f, 1}, {C});
      Tensor dl = Tensor::empty({B, C + 1}, t), sums = Tensor::zeros({kernels::kLossSums}, DType::f32),
             counts = Tensor::zeros({kernels::kLossCounts + C * C}, DType::i32);
      const float scale = 64.f;
      ops::class_leak_loss(logits, labels, d, dl, sums, counts, &leak, &cw, &labels_b, &lam, &scale, nullptr, nullptr);
      Tensor gscale = Tensor::from_floats(std::vector<float>{scale}, {1}).to(kGpu, s);
      Tensor gl = logits.to(kGpu, s), glab = labels.to(kGpu, s), glb = labels_b.to(kGpu, s), glam = lam.to(kGpu, s),
             glk = leak.to(kGpu, s), gcw = cw.to(kGpu, s);
      Tensor gdl = Tensor::empty({B, C + 1}, t, kGpu, Layout::plain, s);
      gdl.fill_bytes(0xff, s);
      Tensor gs = Tensor::zeros({kernels::kLossSums}, DType::f32, kGpu, Layout::plain, s);
      Tensor gc = Tensor::zeros({kernels::kLossCounts + C * C}, DType::i32, kGpu, Layout::plain, s);
      ops::class_leak_loss(gl, glab, d, gdl, gs, gc, &glk, &gcw, &glb, &glam, gscale.data<float>(), nullptr, s);
      s.synchronize();
      CAPTURE(B);
      CHECK(testing::rel_l2(gdl.to_floats(), dl.to_floats()) <= (t == DType::f32 ? 1e-5 : testing::rel_l2_tolerance(t)));
      CHECK(testing::rel_l2(gs.to_floats(), sums.to_floats()) <= 1e-5);
      CHECK(gc.to_floats() == counts.to_floats());
    }
}

// ---- without the confusion matrix (counts [kLossCounts]): the warp-per-row kernels, any C ----

namespace {

struct NcCase {
  std::int64_t B = 1;
  int C = 1;
  bool leak = true, mix = false, weighted = false;
  float eps = 0.f;
  DType t = DType::f32;
};

struct NcOut {
  std::vector<float> dl, sums, counts, step;
  std::vector<std::uint8_t> dl_bytes;
};

// Inputs as test_loss.cpp's run_nc (an ignored label every 9th row, a label
// C every 11th row of labels_b); logits optionally overridden. On the GPU the
// outputs are NaN-poisoned first and the op runs twice from the same starting
// sums and counts: both runs must give the same bytes.
NcOut run_nc(const NcCase& c, bool gpu, bool confusion, Stream& s, const std::vector<float>* z = nullptr) {
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
  const Device dev = gpu ? kGpu : Device::cpu();
  auto put = [&](const Tensor& h) { return gpu ? h.to(kGpu, s) : h; };
  const Tensor logits = put(Tensor::from_floats(z ? *z : testing::random_floats(std::size_t(B * L), 51, -4, 4), {B, L}, c.t));
  const Tensor lab = put(Tensor::from_floats(ya, {B}, DType::i32)), lb = put(Tensor::from_floats(yb, {B}, DType::i32));
  const Tensor lam = put(Tensor::from_floats(testing::random_floats(std::size_t(B), 52, 0, 1), {B}));
  const Tensor leak = c.leak ? put(Tensor::from_floats(t, {B})) : Tensor();
  const Tensor cw = put(Tensor::from_floats(testing::random_floats(std::size_t(C), 53, 0.25f, 2.f), {C}));
  const Tensor scale = put(Tensor::from_floats(std::vector<float>{8.f}, {1}));
  NcOut first;
  for (int run = 0; run < (gpu ? 2 : 1); ++run) {
    Tensor dl = Tensor::empty({B, L}, c.t, dev, Layout::plain, s);
    dl.fill_bytes(0xff, s);  // NaN: every element must be written
    Tensor sums = put(Tensor::from_floats(std::vector<float>{0.5f, 0.25f, 1.f, 2.f}, {kernels::kLossSums}));
    Tensor counts = Tensor::zeros({kernels::kLossCounts + (confusion ? C * C : 0)}, DType::i32, dev, Layout::plain, s);
    Tensor sl = Tensor::zeros({1}, DType::f32, dev, Layout::plain, s);
    ops::class_leak_loss(logits, lab, d, dl, sums, counts, &leak, c.weighted ? &cw : nullptr, c.mix ? &lb : nullptr,
                         c.mix ? &lam : nullptr, scale.data<float>(), &sl, s);
    s.synchronize();
    const Tensor dh = dl.to(Device::cpu(), s);
    s.synchronize();
    NcOut o{dl.to_floats(), sums.to_floats(), counts.to_floats(), sl.to_floats(), {}};
    o.dl_bytes.assign(static_cast<const std::uint8_t*>(dh.raw()),
                      static_cast<const std::uint8_t*>(dh.raw()) + dh.numel() * dtype_size(c.t));
    if (run == 0) {
      first = o;
    } else {
      CHECK(o.dl_bytes == first.dl_bytes);
      CHECK(std::memcmp(o.sums.data(), first.sums.data(), o.sums.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(o.step.data(), first.step.data(), sizeof(float)) == 0);
      CHECK(o.counts == first.counts);
    }
  }
  return first;
}

void check_nc(const NcCase& c, Stream& s) {
  const std::string dt(dtype_name(c.t));
  CAPTURE(c.B);
  CAPTURE(c.C);
  CAPTURE(dt);
  CAPTURE(c.leak);
  CAPTURE(c.mix);
  CAPTURE(c.weighted);
  CAPTURE(c.eps);
  const NcOut cpu = run_nc(c, false, false, s), gpu = run_nc(c, true, false, s);
  CHECK(testing::rel_l2(gpu.dl, cpu.dl) <= (c.t == DType::f32 ? 1e-5 : testing::rel_l2_tolerance(c.t)));
  CHECK(testing::rel_l2(gpu.sums, cpu.sums) <= 1e-5);
  CHECK(std::fabs(gpu.step[0] - cpu.step[0]) <= 1e-5 * std::fabs(cpu.step[0]));
  CHECK(gpu.counts == cpu.counts);  // samples, class correct (first max wins), leak correct: exact
  CHECK(std::isfinite(gpu.sums[2]));
  // With the matrix (C <= 100: the one-block kernel; above: the warp kernels,
  // counting it in global memory): every count equals the CPU twin's, and the
  // first three those of the run without it. C*C counts: the 3000-class case
  // is left to the run without the matrix.
  if (c.C <= 1000) {
    const NcOut full = run_nc(c, true, true, s), full_cpu = run_nc(c, false, true, s);
    CHECK(full.counts == full_cpu.counts);
    CHECK(std::vector<float>(full.counts.begin(), full.counts.begin() + kernels::kLossCounts) == gpu.counts);
  }
}

}  // namespace

TEST_CASE("fused loss without the confusion matrix: CUDA vs CPU twin, any C (up to 3000), every option") {
  Stream s(kGpu);
  // Options all off and all on in every precision and shape; each option alone and the rest on in f32.
  for (const auto& [B, C] : {std::pair<std::int64_t, int>{1, 1}, {37, 5}, {300, 101}, {5, 3000}, {2, 777}})
    for (DType t : {DType::f32, DType::bf16, DType::f16})
      for (int flags = 0; flags < 16; ++flags) {
        const int bits = __builtin_popcount(unsigned(flags));
        if (!(flags == 0 || flags == 15 || (t == DType::f32 && (bits == 1 || bits == 3)))) continue;
        NcCase c;
        c.B = B;
        c.C = C;
        c.t = t;
        c.leak = flags & 1;
        c.mix = flags & 2;
        c.weighted = flags & 4;
        c.eps = flags & 8 ? 0.1f : 0.f;
        check_nc(c, s);
      }
}

TEST_CASE("fused loss without the confusion matrix: CUDA argmax ties and NaN as the CPU's scan; counts[3..] untouched") {
  Stream s(kGpu);
  NcCase c;
  c.B = 4;
  c.C = 100;
  c.leak = false;
  std::vector<float> z(std::size_t(c.B * c.C), 0.f);
  // Labels (i*7+3)%C: 3, 10, 17, 24.
  for (int col : {70, 38, 6, 3}) z[std::size_t(col)] = 1.f;  // row 0: ties across lanes; the first (3) = the label
  for (int col : {40, 72}) z[std::size_t(100 + col)] = 1.f;  // row 1: 40 wins, label 10 wrong
  z[std::size_t(200 + 5)] = std::nanf("");                   // row 2: a NaN off column 0 is never the max,
  z[std::size_t(200 + 17)] = 2.f;                            //   so the label 17 is right
  z[std::size_t(300)] = std::nanf("");                       // row 3: a NaN in column 0 stays the max (0 != 24)
  const NcOut cpu = run_nc(c, false, false, s, &z), gpu = run_nc(c, true, false, s, &z);
  CHECK(cpu.counts[1] == 2.f);  // rows 0 and 2
  CHECK(gpu.counts == cpu.counts);
  CHECK(std::isnan(gpu.sums[0]));  // NaN logits: NaN loss, as the twin
  CHECK(std::isnan(cpu.sums[0]));
  // The kernel entry point with a guard band after the three counts on the device: left as it was.
  kernels::ClassLeakLossArgs d;
  d.batch = 3;
  d.classes = 2000;
  d.leak_head = false;
  d.confusion = false;
  const Tensor logits = Tensor::from_floats(testing::random_floats(3 * 2000, 71, -3, 3), {3, 2000}).to(kGpu, s);
  const Tensor labels = Tensor::from_floats(std::vector<float>{1, 1999, 5}, {3}, DType::i32).to(kGpu, s);
  std::vector<float> guard(kernels::kLossCounts + 64, -7.f);
  guard[0] = guard[1] = guard[2] = 0.f;
  Tensor counts = Tensor::from_floats(guard, {std::int64_t(guard.size())}, DType::i32).to(kGpu, s);
  Tensor dl = Tensor::empty({3, 2000}, DType::f32, kGpu, Layout::plain, s);
  Tensor sums = Tensor::zeros({kernels::kLossSums}, DType::f32, kGpu, Layout::plain, s);
  kernels::class_leak_loss_cuda(d, DType::f32, logits.raw(), labels.data<std::int32_t>(), nullptr, nullptr, nullptr,
                          nullptr, nullptr, dl.raw(), sums.data<float>(), counts.data<std::int32_t>(), nullptr, s);
  s.synchronize();
  const auto got = counts.to_floats();
  CHECK(got[0] == 3.f);
  for (std::size_t i = kernels::kLossCounts; i < got.size(); ++i) CHECK(got[i] == -7.f);
}

TEST_CASE("fused loss on CUDA: counts with the confusion matrix past 100 classes, or [3]; other sizes refused") {
  Stream s(kGpu);
  const std::int64_t B = 2, C = 101;
  kernels::ClassLeakLossArgs d;
  d.batch = B;
  d.classes = int(C);
  const Tensor logits = Tensor::zeros({B, C + 1}, DType::f32, kGpu, Layout::plain, s),
               lab = Tensor::zeros({B}, DType::i32, kGpu, Layout::plain, s),
               leak = Tensor::zeros({B}, DType::f32, kGpu, Layout::plain, s);
  Tensor dl = Tensor::empty({B, C + 1}, DType::f32, kGpu, Layout::plain, s),
         sums = Tensor::zeros({kernels::kLossSums}, DType::f32, kGpu, Layout::plain, s),
         full = Tensor::zeros({kernels::kLossCounts + C * C}, DType::i32, kGpu, Layout::plain, s),
         small = Tensor::zeros({kernels::kLossCounts}, DType::i32, kGpu, Layout::plain, s),
         bad = Tensor::zeros({kernels::kLossCounts + 1}, DType::i32, kGpu, Layout::plain, s);
  CHECK(testing::error_of([&] { ops::class_leak_loss(logits, lab, d, dl, sums, full, &leak, nullptr, nullptr, nullptr,
                                                     nullptr, nullptr, s); }) ==
        "<no error>");
  CHECK(testing::error_of([&] { ops::class_leak_loss(logits, lab, d, dl, sums, bad, &leak, nullptr, nullptr, nullptr,
                                                     nullptr, nullptr, s); })
            .find("counts must be [3] (no confusion matrix) or [3 + C*C = 10204], found") != std::string::npos);
  CHECK(testing::error_of([&] { ops::class_leak_loss(logits, lab, d, dl, sums, small, &leak, nullptr, nullptr, nullptr,
                                                     nullptr, nullptr, s); }) ==
        "<no error>");
  s.synchronize();
  CHECK(small.to_floats()[0] == float(B));
  // Zero logits: every row's first maximum is class 0; labels 0: both counted at [0][0].
  const auto f = full.to_floats();
  CHECK(f[0] == float(B));
  CHECK(f[kernels::kLossCounts] == float(B));
  CHECK(std::accumulate(f.begin() + kernels::kLossCounts, f.end(), 0.f) == float(B));
}
