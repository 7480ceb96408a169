// The metric losses in the training step (issue 20) on the CPU backend, against
// an independent PyTorch oracle (tests/oracle/metric_loss_steps.py: the losses
// written from voxceleb_trainer's formulas in bench/metric_losses_torch.py, the
// models in bench/leakcnn_torch.py and bench/cnn_stack_torch.py): AM-softmax,
// AAM-softmax, angleproto and softmaxproto on a small CNN stack (conv + batch
// norm, a residual block with SE, attentive statistics pooling) and on a small
// LeakCNN, each with a 16-wide embedding layer; fp32 TrainStep for 4 clipped
// AdamW steps against torch in float64, every parameter (loss.* included) and
// batch norm's running statistics compared after steps 1 and 4, the loss of
// every step and the eval-mode embeddings of the first batch too. The cases
// also cover the input instance norm, gradient accumulation (each micro-batch
// its own episode), non-default margin and scale, and 3 segments per class.
// Plus the configurations TrainStep must refuse.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/error.hpp"
#include "model/torch_layout.hpp"
#include "model/torch_layout_lab.hpp"
#include "model/train_step.hpp"
#include "tests/model/cnn_stacks.hpp"
#include "tests/model/step_fixture.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using namespace mf::model;

namespace {

constexpr int kClasses = 6;
// Per-tensor relative L2 of fp32 melforge against float64 torch after 4 steps.
// Reached: <= 1.1e-5 for every parameter, 1.7e-5 for a batch-norm running mean
// after the input instance norm (the mean of near-zero-mean conv outputs:
// cancellation); the CNN-stack oracle with softmax reaches ~6e-6. A wrong
// formula (margin, scale, prototype, a gradient) gives >= 1e-3.
constexpr double kTol = 5e-5;

// `micro_batches` micro-batches of B rows each. With per_class = M > 0 each
// micro-batch holds M consecutive rows of each of B/M distinct classes (a
// speaker-balanced episode); otherwise the classes are drawn per row. Class c
// lights mel rows 2c, 2c+1 on alternate frame pairs; each segment also gets a
// random offset and gain per mel band, which the input instance norm removes.
testing::Batch speaker_batch(std::int64_t B, int micro_batches, int per_class, int mels, int frames,
                             std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.f, 0.3f);
  std::uniform_real_distribution<float> amp(0.8f, 1.5f), offset(-2.f, 2.f), gain(0.7f, 1.4f);
  std::uniform_int_distribution<int> cls(0, kClasses - 1);
  std::vector<int> labels;
  for (int j = 0; j < micro_batches; ++j) {
    if (per_class > 0) {
      std::vector<int> order(kClasses);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      for (std::int64_t i = 0; i < B / per_class; ++i)
        labels.insert(labels.end(), std::size_t(per_class), order[std::size_t(i)]);
    } else {
      for (std::int64_t i = 0; i < B; ++i) labels.push_back(cls(rng));
    }
  }
  testing::Batch b;
  const std::int64_t rows = B * micro_batches;
  b.x.resize(std::size_t(rows * mels * frames));
  for (std::int64_t i = 0; i < rows; ++i) {
    const int c = labels[std::size_t(i)];
    const float a = amp(rng);
    b.labels.push_back(float(c));
    b.leak.push_back(0.f);
    for (int h = 0; h < mels; ++h) {
      const float off = offset(rng), gn = gain(rng);
      for (int w = 0; w < frames; ++w) {
        const bool on = h / 2 == c && (w % 4) < 2;
        b.x[std::size_t((i * mels + h) * frames + w)] = off + gn * (noise(rng) + (on ? a : 0.f));
      }
    }
  }
  return b;
}

// conv + batch norm + pool, a projecting residual block with SE, attentive
// mean+std pooling; a 16-wide embedding. Input 16 x 12, no leak head.
ModelConfig small_stack() {
  ModelConfig m;
  m.arch = Arch::cnn;
  m.in_mels = 16;
  m.in_frames = 12;
  m.classes = kClasses;
  m.leak_head = false;
  m.embedding = 16;
  m.layers = testing::layers_from(R"(
layers = [
  { type = "conv", cout = 8, batch_norm = true, pool = 2 },
  { type = "residual", cout = 12, stride = 2, se = 4 },
  { type = "attentive_stats_pool", stats = "mean+std", attention = 8 },
]
)");
  return m;
}

// LeakCNN 16 x 12, blocks 4/8, dense 16, a 16-wide embedding, no leak head.
ModelConfig small_leakcnn() {
  ModelConfig m = testing::small_model(kClasses);
  m.leak_head = false;
  m.embedding = 16;
  return m;
}

struct Case {
  std::string name;
  ModelConfig model;
  LossType loss;
  int per_class = 0;
  int accum = 1;
  bool input_norm = false;
  float margin = 0.2f, scale = 30.f;
  float label_smoothing = 0.f;
  std::int64_t micro_batch = 8;
};

// DIR for tests/oracle/metric_loss_steps.py: the init weights, 4 steps'
// batches, the weights after steps 1 and 4, melforge's losses and eval-mode
// embeddings; then the oracle's verdict.
void check_against_torch(const Case& c, double tol) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("melforge_metric_oracle_" + c.name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "init");
  fs::create_directories(dir / "forward");
  TrainConfig cfg;
  cfg.model = c.model;
  cfg.model.loss = c.loss;
  cfg.model.input_norm = c.input_norm;
  cfg.micro_batch = c.micro_batch;
  cfg.accum_steps = c.accum;
  cfg.per_class = c.per_class;
  cfg.margin = c.margin;
  cfg.margin_scale = c.scale;
  cfg.label_smoothing = c.label_smoothing;
  cfg.optim.lr = 3e-3f;
  cfg.optim.weight_decay = 0.05f;
  cfg.optim.max_grad_norm = 0.5f;  // small enough to clip
  cfg.optim.schedule = kernels::LrSchedule::cosine;
  cfg.optim.warmup_steps = 2;
  cfg.optim.total_steps = 6;
  cfg.optim.min_lr = 1e-4f;
  cfg.seed = 11;
  const int steps = 4;
  const ModelConfig& m = cfg.model;
  const std::int64_t B = cfg.micro_batch, rows = B * c.accum;
  TrainStep ts(cfg, Device::cpu());
  write_arrays((dir / "init").string(), export_torch(ts.params(), ts.params().master()));
  testing::write_oracle_config((dir / "config.txt").string(), cfg, steps, B, tol);
  {
    std::ofstream f(dir / "config.txt", std::ios::app);
    f << "arch=" << (m.arch == Arch::cnn ? "cnn" : "leakcnn") << "\nloss=" << loss_type_name(m.loss)
      << "\nmargin=" << c.margin << "\nscale=" << c.scale << "\nper_class=" << c.per_class
      << "\nembedding=" << m.embedding << "\ninput_norm=" << (m.input_norm ? 1 : 0) << "\naccum=" << c.accum
      << "\nloss_tol=1e-5\n";
  }
  if (m.arch == Arch::cnn) std::ofstream(dir / "model.json") << cnn_description_json(m) << "\n";
  {
    std::ofstream d(dir / "decay.txt");
    for (const ParamInfo& p : ts.params().params())
      if (p.decay) d << p.name << "\n";
  }
  std::ofstream losses(dir / "losses.txt");
  for (int s = 0; s < steps; ++s) {
    const auto b = speaker_batch(B, c.accum, c.per_class, m.in_mels, m.in_frames, 300 + std::uint64_t(s));
    {
      std::ofstream f(dir / ("batch" + std::to_string(s) + ".bin"), std::ios::binary);
      f.write(reinterpret_cast<const char*>(b.x.data()), std::streamsize(b.x.size() * 4));
      f.write(reinterpret_cast<const char*>(b.labels.data()), std::streamsize(b.labels.size() * 4));
    }
    const auto t = testing::to_tensors(b, rows, m.in_mels, m.in_frames);
    if (s == 0) {  // the eval-mode embeddings of the first micro-batch with the init weights
      const EvalOutput e = ts.forward_eval(t.x.slice(0, B), nullptr);
      CHECK(e.probs.defined() == m.class_head());
      const std::vector<float> v = e.embedding.to_floats();
      std::ofstream f(dir / "forward" / "emb_eval.bin", std::ios::binary);
      f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * 4));
    }
    ts.step(t.x, t.labels, t.leak, nullptr);
    const StepMetrics sm = ts.read_metrics(nullptr);
    MESSAGE(c.name << " step " << s + 1 << ": melforge loss " << sm.loss << " (proto " << sm.proto_loss
                   << ") grad norm " << sm.grad_norm);
    CHECK(sm.micro_batches == c.accum);
    // No confusion matrix with the metric losses: they are for speaker sets (thousands of classes), so
    // softmaxproto's class head too runs leak_loss with counts [kLossCounts]; only softmax keeps it.
    CHECK(sm.confusion.size() == (m.loss == LossType::softmax ? std::size_t(kClasses * kClasses) : 0u));
    CHECK(sm.step == s + 1);
    char line[64];
    std::snprintf(line, sizeof line, "%.9g %.9g\n", sm.loss, double(sm.grad_norm));
    losses << line << std::flush;
    if (s + 1 == 1 || s + 1 == steps) {
      const fs::path out = dir / ("after" + std::to_string(s + 1));
      fs::create_directories(out);
      write_arrays(out.string(), export_torch(ts.params(), ts.params().master()));
    }
  }
  losses.close();
  CHECK(testing::run_oracle("metric_loss_steps.py", dir.string()) == 0);
  fs::remove_all(dir);
}

}  // namespace

TEST_CASE("metric losses on a CNN stack: fp32 steps against PyTorch (float64)") {
  SUBCASE("am_softmax") { check_against_torch({"stack_am", small_stack(), LossType::am_softmax}, kTol); }
  SUBCASE("aam_softmax, margin 0.3, scale 15") {
    Case c{"stack_aam", small_stack(), LossType::aam_softmax};
    c.margin = 0.3f;
    c.scale = 15.f;
    check_against_torch(c, kTol);
  }
  SUBCASE("angleproto, 4 classes x 2, input instance norm") {
    Case c{"stack_proto", small_stack(), LossType::angleproto};
    c.per_class = 2;
    c.input_norm = true;
    check_against_torch(c, kTol);
  }
  SUBCASE("softmaxproto, 4 classes x 2, 2 accumulated micro-batches") {
    Case c{"stack_softmaxproto", small_stack(), LossType::softmaxproto};
    c.per_class = 2;
    c.accum = 2;
    check_against_torch(c, kTol);
  }
}

TEST_CASE("metric losses on LeakCNN: fp32 steps against PyTorch (float64)") {
  SUBCASE("am_softmax, 2 accumulated micro-batches") {
    Case c{"leak_am", small_leakcnn(), LossType::am_softmax};
    c.accum = 2;
    check_against_torch(c, kTol);
  }
  SUBCASE("aam_softmax, input instance norm") {
    Case c{"leak_aam", small_leakcnn(), LossType::aam_softmax};
    c.input_norm = true;
    check_against_torch(c, kTol);
  }
  SUBCASE("angleproto, 3 classes x 3") {
    Case c{"leak_proto", small_leakcnn(), LossType::angleproto};
    c.per_class = 3;
    c.micro_batch = 9;
    check_against_torch(c, kTol);
  }
  SUBCASE("softmaxproto, 4 classes x 2, label smoothing") {
    Case c{"leak_softmaxproto", small_leakcnn(), LossType::softmaxproto};
    c.per_class = 2;
    c.label_smoothing = 0.1f;
    check_against_torch(c, kTol);
  }
}

TEST_CASE("TrainStep refuses a prototypical loss without balanced batches and a metric loss with the leak head") {
  TrainConfig cfg;
  cfg.model = small_leakcnn();
  cfg.micro_batch = 8;
  for (LossType t : {LossType::angleproto, LossType::softmaxproto}) {
    cfg.model.loss = t;
    cfg.per_class = 0;
    const std::string no_episodes =
        fmt::format("loss.type = {}: each micro-batch must hold per_class", loss_type_name(t));
    CHECK_THROWS_WITH_AS(TrainStep(cfg, Device::cpu()), doctest::Contains(no_episodes.c_str()), Error);
    cfg.per_class = 3;  // 8 rows are not whole classes of 3
    CHECK_THROWS_WITH_AS(TrainStep(cfg, Device::cpu()), doctest::Contains("found micro-batch 8 and per_class 3"),
                         Error);
    cfg.per_class = 8;  // one class: no negatives
    CHECK_THROWS_AS(TrainStep(cfg, Device::cpu()), Error);
    cfg.per_class = 2;
    CHECK_NOTHROW(TrainStep(cfg, Device::cpu()));
  }
  for (LossType t : {LossType::am_softmax, LossType::aam_softmax, LossType::angleproto, LossType::softmaxproto}) {
    cfg.model = small_leakcnn();
    cfg.model.loss = t;
    cfg.model.leak_head = true;
    cfg.per_class = 2;
    const std::string no_leak =
        fmt::format("loss.type = {}: a metric loss trains speaker embeddings and has no leak head", loss_type_name(t));
    CHECK_THROWS_WITH_AS(TrainStep(cfg, Device::cpu()), doctest::Contains(no_leak.c_str()), Error);
  }
}
