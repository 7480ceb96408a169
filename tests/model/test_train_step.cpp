// The training step on the CPU backend: parameter layout and PyTorch
// conversions, the PyTorch oracle (1 and 5 optimizer steps), determinism,
// gradient accumulation, and a real convergence run.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/parallel.hpp"
#include "model/torch_layout.hpp"
#include "model/train_step.hpp"
#include "tests/model/step_fixture.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using namespace mf::model;

TEST_CASE("ParamBuffer: PyTorch names, weights before biases, adjacent heads, aligned offsets") {
  ModelConfig mc;  // LeakCNN-64
  ParamBuffer pb(mc, DType::bf16, Device::cpu());
  std::vector<std::string> names;
  for (const auto& p : pb.params()) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"blocks.0.conv.weight", "blocks.1.conv.weight", "blocks.2.conv.weight",
                                          "fc.weight", "class_head.weight", "leak_head.weight",
                                          "blocks.0.conv.bias", "blocks.1.conv.bias", "blocks.2.conv.bias",
                                          "fc.bias", "class_head.bias", "leak_head.bias"});
  CHECK(pb.info("fc.weight").shape == Shape{256, 8192});
  CHECK(pb.info("blocks.1.conv.weight").shape == Shape{64, 3, 3, 32});
  CHECK(pb.info("blocks.1.conv.weight").torch_shape == Shape{64, 32, 3, 3});
  CHECK(pb.info("leak_head.weight").offset == pb.info("class_head.weight").offset + 2 * 256);
  CHECK(pb.info("leak_head.bias").offset == pb.info("class_head.bias").offset + 2);
  CHECK(pb.decay_end() == pb.info("leak_head.weight").offset + 256);
  for (const auto& p : pb.params()) {
    CHECK(p.decay == (p.kind != ParamKind::bias));
    CHECK((p.decay ? p.offset + p.numel <= pb.decay_end() : p.offset >= pb.decay_end()));
    if (p.name != "leak_head.weight" && p.name != "leak_head.bias") CHECK(p.offset % 8 == 0);
  }
  // 1*32*9+32 + 32*64*9+64 + 64*128*9+128 + 8192*256+256 + 2*256+2 + 256+1
  CHECK(pb.count() == 320 + 18496 + 73856 + 2097408 + 514 + 257);
  CHECK(pb.head_weight(pb.master()).shape() == Shape{3, 256});
}

TEST_CASE("init follows PyTorch's bounds and is reproducible from the seed") {
  ParamBuffer a(testing::small_model(), DType::f32, Device::cpu());
  ParamBuffer b(testing::small_model(), DType::f32, Device::cpu());
  a.init(7);
  b.init(7);
  CHECK(std::memcmp(a.master().raw(), b.master().raw(), a.master().nbytes()) == 0);
  b.init(8);
  CHECK(std::memcmp(a.master().raw(), b.master().raw(), a.master().nbytes()) != 0);
  for (const auto& p : a.params()) {
    const auto v = a.view(a.master(), p.name).to_floats();
    const double bound = 1.0 / std::sqrt(double(p.fan_in));
    double mx = 0, mean = 0;
    for (float x : v) {
      mx = std::max(mx, std::fabs(double(x)));
      mean += x;
    }
    CHECK(mx <= bound);
    if (v.size() > 100) {
      CHECK(mx > 0.9 * bound);
      CHECK(std::fabs(mean / double(v.size())) < 0.1 * bound);
    }
  }
}

TEST_CASE("PyTorch layout conversions: conv OIHW <-> OHWI and fc column permutation round-trip") {
  const ModelConfig mc = testing::small_model();
  ParamBuffer pb(mc, DType::f32, Device::cpu());
  pb.init(3);
  const auto arrays = export_torch(pb, pb.master());
  // Element checks against the documented index maps.
  const auto& w = arrays[0];  // blocks.0.conv.weight torch [4, 1, 3, 3]
  const auto ours = pb.view(pb.master(), "blocks.1.conv.weight").to_floats();
  const auto& w1 = arrays[1];  // torch [8, 4, 3, 3]; ours [8, 3, 3, 4]
  CHECK(w.shape == Shape{4, 1, 3, 3});
  CHECK(w1.values[((5 * 4 + 2) * 3 + 1) * 3 + 0] == ours[((5 * 3 + 1) * 3 + 0) * 4 + 2]);
  const auto fc = pb.view(pb.master(), "fc.weight").to_floats();
  const auto& tfc = arrays[2];
  const int H = mc.out_h(1), W = mc.out_w(1), C = mc.channels.back();
  const std::int64_t F = mc.flat_features();
  REQUIRE(F == std::int64_t(C) * H * W);
  CHECK(tfc.values[std::size_t(3 * F + (5 * H + 2) * W + 1)] == fc[std::size_t(3 * F + (2 * W + 1) * C + 5)]);
  Tensor back = Tensor::zeros({pb.size()}, DType::f32);
  import_torch(pb, back, arrays);
  CHECK(std::memcmp(back.raw(), pb.master().raw(), pb.master().nbytes()) == 0);
}

namespace {

struct OracleSetup {
  TrainConfig cfg;
  int steps = 5;
};

}  // namespace

TEST_CASE("PyTorch oracle: 1 and 5 AdamW steps of the CPU backend match torch (fp32 vs float64)") {
  testing::check_steps_against_torch(testing::small_model(3), "step");
}

namespace {
std::vector<float> run_steps(TrainConfig cfg, int steps, std::uint64_t data_seed) {
  TrainStep ts(cfg, Device::cpu());
  const std::int64_t n = ts.batch();
  for (int s = 0; s < steps; ++s) {
    const auto b = testing::band_batch(n, cfg.model.in_mels, cfg.model.in_frames, cfg.model.classes,
                                       data_seed + std::uint64_t(s));
    const auto t = testing::to_tensors(b, n, cfg.model.in_mels, cfg.model.in_frames);
    ts.step(t.x, t.labels, t.leak, nullptr);
  }
  return ts.params().master().to_floats();
}
}  // namespace

TEST_CASE("determinism: same seed and data give bit-identical weights (dropout, accumulation, thread counts)") {
  TrainConfig cfg;
  cfg.model = testing::small_model(3);
  cfg.model.dropout = 0.3f;
  cfg.micro_batch = 6;
  cfg.accum_steps = 2;
  cfg.optim.max_grad_norm = 1.f;
  cfg.seed = 5;
  for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16}) {
    cfg.precision = p;
    const auto a = run_steps(cfg, 6, 40);
    const auto b = run_steps(cfg, 6, 40);
    CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
    const int threads = cpu_threads();
    set_cpu_threads(1);
    const auto c = run_steps(cfg, 6, 40);
    set_cpu_threads(threads);
    CHECK(std::memcmp(a.data(), c.data(), a.size() * 4) == 0);
    cfg.seed = 6;  // another seed: other weights
    const auto d = run_steps(cfg, 6, 40);
    cfg.seed = 5;
    CHECK(std::memcmp(a.data(), d.data(), a.size() * 4) != 0);
  }
}

TEST_CASE("gradient accumulation: 2 micro-batches of B equal one batch of 2B (unweighted mean)") {
  TrainConfig one;
  one.model = testing::small_model(3);
  one.micro_batch = 16;
  one.seed = 9;
  TrainConfig two = one;
  two.micro_batch = 8;
  two.accum_steps = 2;
  const auto a = run_steps(one, 3, 70);
  const auto b = run_steps(two, 3, 70);
  CHECK(testing::rel_l2(b, a) < 1e-5);
}

TEST_CASE("dropout changes the step and is drawn per step") {
  TrainConfig cfg;
  cfg.model = testing::small_model(3);
  cfg.micro_batch = 8;
  const auto a = run_steps(cfg, 2, 3);
  cfg.model.dropout = 0.5f;
  const auto b = run_steps(cfg, 2, 3);
  CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) != 0);
}

TEST_CASE("convergence: a small LeakCNN learns band patterns on the CPU in seconds") {
  TrainConfig cfg;
  cfg.model = testing::small_model(4);
  cfg.model.in_mels = 16;
  cfg.model.in_frames = 16;
  cfg.model.channels = {8, 16};
  cfg.model.dense = 32;
  cfg.micro_batch = 32;
  cfg.optim.lr = 3e-3f;
  cfg.optim.weight_decay = 0.01f;
  cfg.optim.max_grad_norm = 1.f;
  cfg.optim.schedule = kernels::LrSchedule::cosine;
  cfg.optim.warmup_steps = 5;
  cfg.optim.total_steps = 80;
  cfg.seed = 1;
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    cfg.precision = p;
    TrainStep ts(cfg, Device::cpu());
    StepMetrics first, last;
    for (int s = 0; s < cfg.optim.total_steps; ++s) {
      const auto b = testing::band_batch(32, 16, 16, 4, 1000 + std::uint64_t(s));
      const auto t = testing::to_tensors(b, 32, 16, 16);
      ts.step(t.x, t.labels, t.leak, nullptr);
      if (s == 0) first = ts.read_metrics(nullptr);
      if (s % 20 == 19) last = ts.read_metrics(nullptr);
    }
    const auto v = testing::band_batch(256, 16, 16, 4, 999999);
    const auto t = testing::to_tensors(v, 256, 16, 16);
    const EvalOutput e = ts.forward_eval(t.x, nullptr);
    const auto probs = e.probs.to_floats();
    const auto lp = e.leak_prob.to_floats();
    int correct = 0, leak_correct = 0;
    for (int i = 0; i < 256; ++i) {
      int arg = 0;
      for (int c = 1; c < 4; ++c)
        if (probs[std::size_t(i * 4 + c)] > probs[std::size_t(i * 4 + arg)]) arg = c;
      correct += arg == int(v.labels[std::size_t(i)]);
      leak_correct += (lp[std::size_t(i)] > 0.5f) == (v.leak[std::size_t(i)] > 0.5f);
    }
    MESSAGE(precision_name(p) << ": loss " << first.loss << " -> " << last.loss << ", held-out accuracy "
                              << correct / 256.0 << ", leak accuracy " << leak_correct / 256.0
                              << ", train accuracy (last 20 steps) " << double(last.class_correct) / double(last.samples));
    CHECK(last.loss < 0.5 * first.loss);
    CHECK(correct >= 0.95 * 256);
    CHECK(leak_correct >= 0.95 * 256);
    std::int64_t conf_sum = 0;
    for (auto c : last.confusion) conf_sum += c;
    CHECK(conf_sum == last.samples);
  }
}
