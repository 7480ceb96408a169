// The fused two-head loss (kernels/loss.cu) against its CPU twin: metric
// counts exact, gradients and loss sums within f32 rounding (one block, batch
// 1 to 8192, every precision); head_probs against its twin. Device outputs are
// NaN-poisoned first. Runs only where a GPU (or the CUDA emulator) is usable;
// else exits 77 (skipped).
#include <doctest/doctest.h>

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
      kernels::LeakLossDims d;
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
      ops::leak_loss(logits, labels, leak, &cw, &scale, d, dl, sums, counts, nullptr);
      Tensor gscale = Tensor::from_floats(std::vector<float>{scale}, {1}).to(kGpu, s);
      Tensor gl = logits.to(kGpu, s), glab = labels.to(kGpu, s), glk = leak.to(kGpu, s), gcw = cw.to(kGpu, s);
      Tensor gdl = Tensor::empty({B, C + 1}, t, kGpu, Layout::plain, s);
      gdl.fill_bytes(0xff, s);
      Tensor gs = Tensor::zeros({kernels::kLossSums}, DType::f32, kGpu, Layout::plain, s);
      Tensor gc = Tensor::zeros({kernels::kLossCounts + C * C}, DType::i32, kGpu, Layout::plain, s);
      ops::leak_loss(gl, glab, glk, &gcw, gscale.data<float>(), d, gdl, gs, gc, nullptr, s);
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
      ops::head_probs(logits, p, l);
      Tensor gl = logits.to(kGpu, s);
      Tensor gp = Tensor::empty({B, C}, DType::f32, kGpu, Layout::plain, s), glp = Tensor::empty({B}, DType::f32, kGpu, Layout::plain, s);
      gp.fill_bytes(0xff, s);
      glp.fill_bytes(0xff, s);
      ops::head_probs(gl, gp, glp, s);
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
      kernels::LeakLossDims d;
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
      ops::leak_loss(logits, labels, leak, &cw, &scale, d, dl, sums, counts, nullptr, nullptr, &labels_b, &lam);
      Tensor gscale = Tensor::from_floats(std::vector<float>{scale}, {1}).to(kGpu, s);
      Tensor gl = logits.to(kGpu, s), glab = labels.to(kGpu, s), glb = labels_b.to(kGpu, s), glam = lam.to(kGpu, s),
             glk = leak.to(kGpu, s), gcw = cw.to(kGpu, s);
      Tensor gdl = Tensor::empty({B, C + 1}, t, kGpu, Layout::plain, s);
      gdl.fill_bytes(0xff, s);
      Tensor gs = Tensor::zeros({kernels::kLossSums}, DType::f32, kGpu, Layout::plain, s);
      Tensor gc = Tensor::zeros({kernels::kLossCounts + C * C}, DType::i32, kGpu, Layout::plain, s);
      ops::leak_loss(gl, glab, glk, &gcw, gscale.data<float>(), d, gdl, gs, gc, nullptr, s, &glb, &glam);
      s.synchronize();
      CAPTURE(B);
      CHECK(testing::rel_l2(gdl.to_floats(), dl.to_floats()) <= (t == DType::f32 ? 1e-5 : testing::rel_l2_tolerance(t)));
      CHECK(testing::rel_l2(gs.to_floats(), sums.to_floats()) <= 1e-5);
      CHECK(gc.to_floats() == counts.to_floats());
    }
}
