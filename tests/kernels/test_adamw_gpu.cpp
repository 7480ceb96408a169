// The fused AdamW step (kernels/adamw.cu) against its CPU twin over three
// steps: master weights, moments, the f32/bf16/f16 working copy and the state
// (step, LR, gradient norm); a non-finite gradient on the device skips the
// step; a frozen mask (train.freeze) on the device keeps the frozen bits and
// leaves them out of the norm, as the twin does. Runs only where a GPU (or the CUDA emulator) is usable; else exits 77
// (skipped).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/stream.hpp"
#include "kernels/adamw.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/tolerance.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {
const Device kGpu = Device::cuda(0);
}  // namespace

TEST_CASE("fused AdamW: CUDA vs CPU twin, f32/bf16/f16 working copy, skip on Inf, per-tensor variant") {
  Stream s(kGpu);
  const std::int64_t n = 1000003, de = 700001;
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    kernels::AdamWConfig c;
    c.max_grad_norm = 50.f;
    c.schedule = kernels::LrSchedule::cosine;
    c.warmup_steps = 1;
    c.total_steps = 5;
    c.dynamic_loss_scale = t == DType::f16;
    auto master = Tensor::from_floats(testing::random_floats(std::size_t(n), 1), {n});
    auto grad = Tensor::from_floats(testing::random_floats(std::size_t(n), 2), {n});
    auto m = Tensor::zeros({n}, DType::f32), v = Tensor::zeros({n}, DType::f32);
    auto state = Tensor::zeros({std::int64_t(sizeof(kernels::AdamWState))}, DType::u8);
    *static_cast<kernels::AdamWState*>(state.raw()) = kernels::AdamWState{};
    auto scratch = Tensor::zeros({std::int64_t(kernels::adamw_scratch_bytes())}, DType::u8);
    Tensor work = Tensor::zeros({n}, t);
    Tensor gmaster = master.to(kGpu, s), ggrad = grad.to(kGpu, s), gm = m.to(kGpu, s), gv = v.to(kGpu, s),
           gstate = state.to(kGpu, s), gscratch = scratch.to(kGpu, s), gwork = work.to(kGpu, s);
    gwork.fill_bytes(0xff, s);
    Tensor* w = t == DType::f32 ? nullptr : &work;
    Tensor* gw = t == DType::f32 ? nullptr : &gwork;
    for (int i = 0; i < 3; ++i) {
      ops::adamw_step(master, grad, m, v, state, c, de, w, nullptr, scratch);
      ops::adamw_step(gmaster, ggrad, gm, gv, gstate, c, de, gw, nullptr, gscratch, s);
    }
    s.synchronize();
    CHECK(testing::rel_l2(gmaster.to_floats(), master.to_floats()) <= 1e-6);
    CHECK(testing::rel_l2(gm.to_floats(), m.to_floats()) <= 1e-6);
    CHECK(testing::rel_l2(gv.to_floats(), v.to_floats()) <= 1e-6);
    if (w) CHECK(testing::rel_l2(gwork.to_floats(), work.to_floats()) <= testing::rel_l2_tolerance(t));
    kernels::AdamWState a, b;
    std::memcpy(&a, state.raw(), sizeof(a));
    Tensor hs = gstate.to(Device::cpu(), s);
    std::memcpy(&b, hs.raw(), sizeof(b));
    CHECK(a.step == b.step);
    CHECK(a.lr == doctest::Approx(b.lr).epsilon(1e-6));
    CHECK(a.grad_norm == doctest::Approx(b.grad_norm).epsilon(1e-5));
    // Inf: skipped on the device.
    const auto before = gmaster.to_floats();
    Tensor inf = Tensor::from_floats(std::vector<float>{INFINITY}, {1});
    ggrad.slice(12345, 12346).copy_from(inf, s);
    ops::adamw_step(gmaster, ggrad, gm, gv, gstate, c, de, gw, nullptr, gscratch, s);
    s.synchronize();
    CHECK(gmaster.to_floats() == before);
  }
}

TEST_CASE("fused AdamW: a frozen mask on the device keeps frozen bits and matches the twin's norm and update") {
  Stream s(kGpu);
  const std::int64_t n = 300007, de = 200001;
  Tensor frozen = Tensor::zeros({n}, DType::u8);
  auto* fz = static_cast<std::uint8_t*>(frozen.raw());
  for (std::int64_t i = 0; i < n; ++i) fz[i] = (i / 1000) % 3 == 1;
  auto master = Tensor::from_floats(testing::random_floats(std::size_t(n), 5), {n});
  auto grad = Tensor::from_floats(testing::random_floats(std::size_t(n), 6), {n});
  grad.data<float>()[1500] = 1e30f;      // frozen: out of the norm
  grad.data<float>()[1501] = INFINITY;   // frozen: no skip
  auto m = Tensor::zeros({n}, DType::f32), v = Tensor::zeros({n}, DType::f32);
  auto state = Tensor::zeros({std::int64_t(sizeof(kernels::AdamWState))}, DType::u8);
  *static_cast<kernels::AdamWState*>(state.raw()) = kernels::AdamWState{};
  auto scratch = Tensor::zeros({std::int64_t(kernels::adamw_scratch_bytes())}, DType::u8);
  Tensor work = Tensor::zeros({n}, DType::bf16);
  Tensor gmaster = master.to(kGpu, s), ggrad = grad.to(kGpu, s), gm = m.to(kGpu, s), gv = v.to(kGpu, s),
         gstate = state.to(kGpu, s), gscratch = scratch.to(kGpu, s), gwork = work.to(kGpu, s),
         gfrozen = frozen.to(kGpu, s);
  kernels::AdamWConfig c;
  c.max_grad_norm = 5.f;
  for (int i = 0; i < 3; ++i) {
    ops::adamw_step(master, grad, m, v, state, c, de, &work, &frozen, scratch);
    ops::adamw_step(gmaster, ggrad, gm, gv, gstate, c, de, &gwork, &gfrozen, gscratch, s);
  }
  s.synchronize();
  const auto p0 = master.to_floats();  // (the twin's result: compared below)
  const auto gp = gmaster.to_floats(), gmv = gm.to_floats(), gvv = gv.to_floats();
  const auto init = Tensor::from_floats(testing::random_floats(std::size_t(n), 5), {n}).to_floats();
  const auto gwf = gwork.to_floats();
  int frozen_changed = 0;
  for (std::int64_t i = 0; i < n; ++i)
    if (fz[i])
      frozen_changed += std::memcmp(&gp[std::size_t(i)], &init[std::size_t(i)], 4) != 0 || gmv[std::size_t(i)] != 0.f ||
                        gvv[std::size_t(i)] != 0.f || gwf[std::size_t(i)] != 0.f;
  CHECK(frozen_changed == 0);
  CHECK(testing::rel_l2(gp, p0) <= 1e-6);
  CHECK(testing::rel_l2(gmv, m.to_floats()) <= 1e-6);
  kernels::AdamWState a, b;
  std::memcpy(&a, state.raw(), sizeof(a));
  Tensor hs = gstate.to(Device::cpu(), s);
  std::memcpy(&b, hs.raw(), sizeof(b));
  CHECK(b.step == 3);
  CHECK(b.skipped_steps == 0);
  CHECK(a.grad_norm == doctest::Approx(b.grad_norm).epsilon(1e-5));
  CHECK(b.grad_norm < 1e4f);
}
