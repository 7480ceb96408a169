// GPU suite of the training step: every CUDA kernel against its CPU twin
// (outputs NaN-poisoned first), the whole step on the GPU against the CPU
// backend, CUDA graph replay against eager execution (bit-identical), and
// run-to-run determinism.
#include <doctest/doctest.h>

#include <cstring>

#include "engine/stream.hpp"
#include "kernels/ops.hpp"
#include "model/train_step.hpp"
#include "tests/model/step_fixture.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {
const Device kGpu = Device::cuda(0);
double tol_for(DType t) { return t == DType::f32 ? 1e-5 : t == DType::bf16 ? 1e-2 : 2e-3; }
}  // namespace

TEST_CASE("dense forward/backward: CUDA (cuBLASLt) vs CPU twin, every precision, odd shapes, batch 1") {
  Stream s(kGpu);
  for (auto [M, K, N] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 8, 3}, {37, 72, 17}, {256, 8192, 256}})
    for (DType t : {DType::f32, DType::bf16, DType::f16})
      for (bool relu : {false, true}) {
        const Tensor x = Tensor::from_floats(testing::random_floats(std::size_t(M * K), 1), {M, K}, t);
        const Tensor w = Tensor::from_floats(testing::random_floats(std::size_t(N * K), 2, -0.1f, 0.1f), {N, K}, t);
        const Tensor b = Tensor::from_floats(testing::random_floats(std::size_t(N), 3), {N}, t);
        const Tensor dyv = Tensor::from_floats(testing::random_floats(std::size_t(M * N), 4), {M, N}, t);
        Tensor y = Tensor::empty({M, N}, t), dy = Tensor::empty({M, N}, t);
        Tensor dx = Tensor::empty({M, K}, t), dw = Tensor::empty({N, K}, DType::f32), db = Tensor::empty({N}, DType::f32);
        dy.copy_from(dyv);
        ops::dense_forward(x, w, b, relu, y);
        ops::dense_backward(x, w, y, dy, relu, &dx, dw, db);
        Tensor gx = x.to(kGpu, s), gw = w.to(kGpu, s), gb = b.to(kGpu, s), gdy = dyv.to(kGpu, s);
        Tensor gy = Tensor::empty({M, N}, t, kGpu, Layout::plain, s), gdx = Tensor::empty({M, K}, t, kGpu, Layout::plain, s);
        Tensor gdw = Tensor::empty({N, K}, DType::f32, kGpu, Layout::plain, s), gdb = Tensor::empty({N}, DType::f32, kGpu, Layout::plain, s);
        for (Tensor* p : {&gy, &gdx, &gdw, &gdb}) p->fill_bytes(0xff, s);
        ops::dense_forward(gx, gw, gb, relu, gy, s);
        ops::dense_backward(gx, gw, gy, gdy, relu, &gdx, gdw, gdb, s);
        s.synchronize();
        const double tol = tol_for(t);
        CHECK(testing::rel_l2(gy.to_floats(), y.to_floats()) <= tol);
        CHECK(testing::rel_l2(gdx.to_floats(), dx.to_floats()) <= tol);
        CHECK(testing::rel_l2(gdw.to_floats(), dw.to_floats()) <= tol);
        CHECK(testing::rel_l2(gdb.to_floats(), db.to_floats()) <= tol);
      }
}

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
      CHECK(testing::rel_l2(gdl.to_floats(), dl.to_floats()) <= (t == DType::f32 ? 1e-5 : tol_for(t)));
      CHECK(testing::rel_l2(gs.to_floats(), sums.to_floats()) <= 1e-5);
      CHECK(gc.to_floats() == counts.to_floats());
    }
}

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
      ops::adamw_step(c, de, master, grad, m, v, w, state, scratch);
      ops::adamw_step(c, de, gmaster, ggrad, gm, gv, gw, gstate, gscratch, s);
    }
    s.synchronize();
    CHECK(testing::rel_l2(gmaster.to_floats(), master.to_floats()) <= 1e-6);
    CHECK(testing::rel_l2(gm.to_floats(), m.to_floats()) <= 1e-6);
    CHECK(testing::rel_l2(gv.to_floats(), v.to_floats()) <= 1e-6);
    if (w) CHECK(testing::rel_l2(gwork.to_floats(), work.to_floats()) <= tol_for(t));
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
    ops::adamw_step(c, de, gmaster, ggrad, gm, gv, gw, gstate, gscratch, s);
    s.synchronize();
    CHECK(gmaster.to_floats() == before);
  }
}

TEST_CASE("dropout: CUDA mask equals the CPU twin's") {
  Stream s(kGpu);
  const std::int64_t n = 300001;
  const Tensor x = Tensor::from_floats(testing::random_floats(std::size_t(n), 5), {n});
  Tensor y = Tensor::empty({n}, DType::f32);
  std::int32_t ctr = 17;
  ops::dropout_forward(x, y, 0.25f, 99, 2, &ctr);
  Tensor gctr = Tensor::from_floats(std::vector<float>{17.f}, {1}, DType::i32).to(kGpu, s);
  Tensor gx = x.to(kGpu, s), gy = Tensor::empty({n}, DType::f32, kGpu, Layout::plain, s);
  gy.fill_bytes(0xff, s);
  ops::dropout_forward(gx, gy, 0.25f, 99, 2, gctr.data<std::int32_t>(), s);
  s.synchronize();
  CHECK(gy.to_floats() == y.to_floats());
}

namespace {
std::vector<float> gpu_run(model::TrainConfig cfg, int steps, Stream& s) {
  model::TrainStep ts(cfg, kGpu, s);
  const std::int64_t n = ts.batch();
  for (int i = 0; i < steps; ++i) {
    const auto b = testing::band_batch(n, cfg.model.in_mels, cfg.model.in_frames, cfg.model.classes, 50 + std::uint64_t(i));
    const auto t = testing::to_tensors(b, n, cfg.model.in_mels, cfg.model.in_frames, kGpu);
    MF_CUDA_CHECK(cudaDeviceSynchronize());  // the inputs were copied on the legacy stream
    ts.step(t.x, t.labels, t.leak, s);
    s.synchronize();  // the inputs are freed on the legacy stream
  }
  if (cfg.cuda_graph && steps > 1) CHECK(ts.graph_captured());
  s.synchronize();
  return ts.params().master().to_floats();
}
}  // namespace

TEST_CASE("the whole step: GPU vs CPU backend, graphs vs eager bit-identical, deterministic") {
  Stream s(kGpu, "step-test");
  model::TrainConfig cfg;
  cfg.model = testing::small_model(3);
  cfg.model.dropout = 0.2f;
  cfg.micro_batch = 16;
  cfg.accum_steps = 2;
  cfg.optim.max_grad_norm = 1.f;
  cfg.seed = 3;
  for (model::Precision p : {model::Precision::fp32, model::Precision::bf16, model::Precision::fp16}) {
    cfg.precision = p;
    cfg.cuda_graph = true;
    const auto a = gpu_run(cfg, 4, s);
    const auto b = gpu_run(cfg, 4, s);
    CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
    cfg.cuda_graph = false;
    const auto c = gpu_run(cfg, 4, s);
    CHECK(std::memcmp(a.data(), c.data(), a.size() * 4) == 0);
    // Against the CPU backend: same math, other summation orders.
    model::TrainStep cpu(cfg, Device::cpu());
    for (int i = 0; i < 4; ++i) {
      const auto bt = testing::band_batch(cpu.batch(), cfg.model.in_mels, cfg.model.in_frames, 3, 50 + std::uint64_t(i));
      const auto t = testing::to_tensors(bt, cpu.batch(), cfg.model.in_mels, cfg.model.in_frames);
      cpu.step(t.x, t.labels, t.leak, nullptr);
    }
    CHECK(testing::rel_l2(a, cpu.params().master().to_floats()) <= (p == model::Precision::fp32 ? 1e-5 : 2e-2));
  }
}
