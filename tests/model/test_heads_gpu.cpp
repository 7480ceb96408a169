// model.heads = class on the GPU: the class-only loss and head_probs CUDA
// kernels against their CPU twins (outputs NaN-poisoned first), the class-only
// file vote, and the whole class-only step against the CPU backend with CUDA
// graph replay bit-identical to eager execution. Runs only where a GPU (or the
// CUDA emulator) is usable; else exits 77 (skipped).
#include <doctest/doctest.h>

#include <cstring>

#include "engine/stream.hpp"
#include "kernels/ops.hpp"
#include "model/metrics.hpp"
#include "model/train_step.hpp"
#include "tests/model/step_fixture.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {
const Device kGpu = Device::cuda(0);
// Relative L2 between the twins' outputs held in dtype t: summation order
// only in f32, one rounding of the output in bf16/f16.
double tol_for(DType t) { return t == DType::f32 ? 1e-5 : t == DType::bf16 ? 1e-2 : 2e-3; }
}  // namespace

TEST_CASE("class-only loss and head_probs: CUDA vs CPU twin (metrics exact, no leak terms)") {
  Stream s(kGpu);
  for (std::int64_t B : {1, 513, 4096})
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      const int C = 5;
      kernels::ClassLeakLossArgs d;
      d.batch = B;
      d.classes = C;
      d.label_smoothing = 0.1f;
      d.grad_scale = 0.5f;
      d.leak_head = false;
      const Tensor logits = Tensor::from_floats(testing::random_floats(std::size_t(B * C), 7, -4, 4), {B, C}, t);
      std::vector<float> lab;
      for (std::int64_t i = 0; i < B; ++i) lab.push_back(float(i % C));
      const Tensor labels = Tensor::from_floats(lab, {B}, DType::i32);
      const Tensor cw = Tensor::from_floats(std::vector<float>{1, 2, 3, 0.5f, 1}, {C});
      Tensor dl = Tensor::empty({B, C}, t), sums = Tensor::zeros({kernels::kLossSums}, DType::f32),
             counts = Tensor::zeros({kernels::kLossCounts + C * C}, DType::i32), sl = Tensor::zeros({1}, DType::f32);
      const float scale = 1024.f;
      ops::class_leak_loss(logits, labels, d, dl, sums, counts, nullptr, &cw, nullptr, nullptr, &scale, &sl);
      Tensor gscale = Tensor::from_floats(std::vector<float>{scale}, {1}).to(kGpu, s);
      Tensor gl = logits.to(kGpu, s), glab = labels.to(kGpu, s), gcw = cw.to(kGpu, s);
      Tensor gdl = Tensor::empty({B, C}, t, kGpu, Layout::plain, s);
      gdl.fill_bytes(0xff, s);
      Tensor gs = Tensor::zeros({kernels::kLossSums}, DType::f32, kGpu, Layout::plain, s);
      Tensor gc = Tensor::zeros({kernels::kLossCounts + C * C}, DType::i32, kGpu, Layout::plain, s);
      Tensor gsl = Tensor::zeros({1}, DType::f32, kGpu, Layout::plain, s);
      ops::class_leak_loss(gl, glab, d, gdl, gs, gc, nullptr, &gcw, nullptr, nullptr, gscale.data<float>(), &gsl, s);
      s.synchronize();
      CHECK(testing::rel_l2(gdl.to_floats(), dl.to_floats()) <= tol_for(t));
      const auto gsv = gs.to_floats(), csv = sums.to_floats();
      CHECK(testing::rel_l2(gsv, csv) <= 1e-5);
      CHECK(gsv[1] == 0.f);  // no leak loss
      CHECK(testing::rel_l2(gsl.to_floats(), sl.to_floats()) <= 1e-5);
      CHECK(gc.to_floats() == counts.to_floats());
      CHECK(gc.to_floats()[2] == 0.f);  // no leak correct count

      Tensor probs = Tensor::empty({B, C}, DType::f32);
      ops::head_probs(logits, probs, nullptr);
      Tensor gp = Tensor::empty({B, C}, DType::f32, kGpu, Layout::plain, s), gnone;
      gp.fill_bytes(0xff, s);
      ops::head_probs(gl, gp, nullptr, s);
      s.synchronize();
      CHECK(testing::rel_l2(gp.to_floats(), probs.to_floats()) <= 1e-5);
    }
}

TEST_CASE("class-only file vote: CUDA == CPU twin bit for bit, no leak outputs") {
  Stream s(kGpu);
  const std::int64_t F = 37, L = 3, S = 4, N = F * L * S;
  const int C = 4;
  auto raw = testing::random_floats(std::size_t(N * C), 9, 0.f, 1.f);
  const Tensor hc = Tensor::from_floats(raw, {N, C});
  const Tensor dc = hc.to(kGpu, s);
  const model::FileVote want = model::vote_files(hc, Tensor(), F, L, S, 0.5, false);
  const model::FileVote got = model::vote_files(dc, Tensor(), F, L, S, 0.5, false, s);
  CHECK_FALSE(got.has_leak);
  CHECK(got.leak.empty());
  CHECK(got.klass == want.klass);
  CHECK(got.probs == want.probs);
}

namespace {
std::vector<float> gpu_run(model::TrainConfig cfg, int steps, Stream& s) {
  model::TrainStep ts(cfg, kGpu, s);
  const std::int64_t n = ts.batch();
  for (int i = 0; i < steps; ++i) {
    const auto b = testing::band_batch(n, cfg.model.in_mels, cfg.model.in_frames, cfg.model.classes, 70 + std::uint64_t(i));
    const auto t = testing::to_tensors(b, n, cfg.model.in_mels, cfg.model.in_frames, kGpu);
    MF_CUDA_CHECK(cudaDeviceSynchronize());  // the inputs were copied on the legacy stream
    ts.step(t.x, t.labels, t.leak, s);
    s.synchronize();  // the inputs are freed on the legacy stream
  }
  if (cfg.cuda_graph && steps > 1) CHECK(ts.graph_captured());
  const model::StepMetrics m = ts.read_metrics(s);
  CHECK_FALSE(m.has_leak);
  CHECK(m.leak_loss == 0);
  s.synchronize();
  return ts.params().master().to_floats();
}
}  // namespace

TEST_CASE("class-only step: GPU vs CPU backend, graphs vs eager bit-identical") {
  Stream s(kGpu, "heads-test");
  model::TrainConfig cfg;
  cfg.model = testing::small_model(3);
  cfg.model.leak_head = false;
  cfg.micro_batch = 16;
  cfg.accum_steps = 2;
  cfg.optim.max_grad_norm = 1.f;
  cfg.seed = 4;
  for (model::Precision p : {model::Precision::fp32, model::Precision::bf16}) {
    cfg.precision = p;
    cfg.cuda_graph = true;
    const auto a = gpu_run(cfg, 3, s);
    cfg.cuda_graph = false;
    const auto c = gpu_run(cfg, 3, s);
    CHECK(std::memcmp(a.data(), c.data(), a.size() * 4) == 0);
    model::TrainStep cpu(cfg, Device::cpu());
    for (int i = 0; i < 3; ++i) {
      const auto bt = testing::band_batch(cpu.batch(), cfg.model.in_mels, cfg.model.in_frames, 3, 70 + std::uint64_t(i));
      const auto t = testing::to_tensors(bt, cpu.batch(), cfg.model.in_mels, cfg.model.in_frames);
      cpu.step(t.x, t.labels, t.leak, nullptr);
    }
    CHECK(testing::rel_l2(a, cpu.params().master().to_floats()) <= (p == model::Precision::fp32 ? 1e-5 : 2e-2));
    // forward_eval on the GPU: no leak output, the CPU backend's probabilities.
    model::TrainStep g(cfg, kGpu, s);
    const auto v = testing::band_batch(20, cfg.model.in_mels, cfg.model.in_frames, 3, 99);
    const auto tv = testing::to_tensors(v, 20, cfg.model.in_mels, cfg.model.in_frames, kGpu);
    MF_CUDA_CHECK(cudaDeviceSynchronize());
    const model::EvalOutput e = g.forward_eval(tv.x, s);
    s.synchronize();
    CHECK_FALSE(e.leak_prob.defined());
    CHECK(e.probs.shape() == Shape{20, 3});
  }
}
