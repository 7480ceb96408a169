// The whole training step on the GPU: against the CPU backend (same math,
// other summation orders), CUDA graph replay against eager execution
// (bit-identical), and run-to-run determinism, in every precision with dropout
// and gradient accumulation. Each op's kernel against its CPU twin has its own
// suite (tests/kernels/test_<op>_gpu.cpp). Runs only where a GPU (or the CUDA
// emulator) is usable; else exits 77 (skipped).
#include <doctest/doctest.h>

#include <cstring>

#include "engine/stream.hpp"
#include "model/train_step.hpp"
#include "tests/model/step_fixture.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {
const Device kGpu = Device::cuda(0);
}  // namespace

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

TEST_CASE("the step with augmentation and mixup: the draws replay inside the graph, GPU vs CPU backend") {
  Stream s(kGpu, "step-aug-test");
  model::TrainConfig cfg;
  cfg.model = testing::small_model(3);
  cfg.micro_batch = 16;
  cfg.accum_steps = 2;
  cfg.seed = 4;
  auto& a = cfg.augment;
  a.time_masks = 2;
  a.time_mask_width = 3;
  a.freq_masks = 1;
  a.freq_mask_width = 2;
  a.time_shift = 3;
  a.gain_db = 2;
  a.db_per_unit = 10;
  a.noise_count = 3;
  a.snr_lo_db = 0;
  a.snr_hi_db = 12;
  cfg.mixup_alpha = 0.4f;
  const std::int64_t seg = cfg.model.in_mels * cfg.model.in_frames;
  cfg.augment_noise.resize(std::size_t(a.noise_count * seg));
  for (std::size_t i = 0; i < cfg.augment_noise.size(); ++i) cfg.augment_noise[i] = float(i % 7) * 0.1f - 0.3f;
  for (model::Precision p : {model::Precision::fp32, model::Precision::bf16}) {
    cfg.precision = p;
    cfg.cuda_graph = true;
    const auto graphed = gpu_run(cfg, 4, s);
    cfg.cuda_graph = false;
    const auto eager = gpu_run(cfg, 4, s);
    CHECK(std::memcmp(graphed.data(), eager.data(), graphed.size() * 4) == 0);
    model::TrainStep cpu(cfg, Device::cpu());
    for (int i = 0; i < 4; ++i) {
      const auto bt = testing::band_batch(cpu.batch(), cfg.model.in_mels, cfg.model.in_frames, 3, 50 + std::uint64_t(i));
      const auto t = testing::to_tensors(bt, cpu.batch(), cfg.model.in_mels, cfg.model.in_frames);
      cpu.step(t.x, t.labels, t.leak, nullptr);
    }
    CHECK(testing::rel_l2(graphed, cpu.params().master().to_floats()) <= (p == model::Precision::fp32 ? 1e-5 : 2e-2));
    // Without augmentation the weights differ: the op ran.
    model::TrainConfig off = cfg;
    off.augment = {};
    off.augment_noise.clear();
    off.mixup_alpha = 0;
    CHECK(std::memcmp(gpu_run(off, 4, s).data(), graphed.data(), graphed.size() * 4) != 0);
  }
}
