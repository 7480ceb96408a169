// Shared helpers of the training-step tests: small configs, synthetic batches
// and the PyTorch oracle of the step.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "engine/tensor.hpp"
#include "kernels/adamw.hpp"
#include "kernels/adamw_lab.hpp"
#include "model/torch_layout.hpp"
#include "model/torch_layout_lab.hpp"
#include "model/train_step.hpp"
#include "tests/support/testing.hpp"

namespace mf::testing {

struct Batch {
  std::vector<float> x;        // [B, mels, frames] (one channel)
  std::vector<float> labels;   // class ids as floats
  std::vector<float> leak;     // 0/1
};

// Class c lights a horizontal band of mel rows (c * band .. c * band + band-1)
// with a random amplitude, over noise; leak = (class != 0). Learnable fast.
inline Batch band_batch(std::int64_t B, int mels, int frames, int classes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.f, 0.3f);
  std::uniform_real_distribution<float> amp(0.8f, 1.5f);
  std::uniform_int_distribution<int> cls(0, classes - 1);
  Batch b;
  b.x.resize(std::size_t(B * mels * frames));
  const int band = mels / classes;
  for (std::int64_t i = 0; i < B; ++i) {
    const int c = cls(rng);
    const float a = amp(rng);
    b.labels.push_back(float(c));
    b.leak.push_back(c != 0 ? 1.f : 0.f);
    for (int h = 0; h < mels; ++h)
      for (int w = 0; w < frames; ++w) {
        const bool on = h >= c * band && h < (c + 1) * band && (w % 4) < 2;
        b.x[std::size_t((i * mels + h) * frames + w)] = noise(rng) + (on ? a : 0.f);
      }
  }
  return b;
}

struct BatchTensors {
  Tensor x, labels, leak;
};

inline BatchTensors to_tensors(const Batch& b, std::int64_t B, int mels, int frames, Device dev = Device::cpu()) {
  BatchTensors t;
  t.x = Tensor::from_floats(b.x, {B, mels, frames, 1}, DType::f32, Layout::nhwc).to(dev);
  t.labels = Tensor::from_floats(b.labels, {B}, DType::i32).to(dev);
  t.leak = Tensor::from_floats(b.leak, {B}, DType::f32).to(dev);
  return t;
}

inline model::ModelConfig small_model(int classes = 3) {
  model::ModelConfig m;
  m.in_mels = 16;
  m.in_frames = 12;
  m.channels = {4, 8};
  m.pools = {2, 2};
  m.dense = 16;
  m.classes = classes;
  return m;
}

// DIR/config.txt of the PyTorch oracle (tests/oracle/leakcnn_steps.py): the
// model (both heads or the class head alone), optimizer, loss weights, batch,
// steps (weights compared after step 1 and the last) and the tolerance.
inline void write_oracle_config(const std::string& path, const model::TrainConfig& c, int steps, std::int64_t B,
                                double tol) {
  std::ofstream f(path);
  auto join = [](const std::vector<int>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i) s += ',';
      s += std::to_string(v[i]);
    }
    return s;
  };
  std::string cw;
  for (std::size_t i = 0; i < c.class_weights.size(); ++i) {
    if (i) cw += ',';
    cw += std::to_string(c.class_weights[i]);
  }
  f << "mels=" << c.model.in_mels << "\nframes=" << c.model.in_frames << "\nchannels=" << join(c.model.channels)
    << "\npools=" << join(c.model.pools) << "\nkernel=" << c.model.kernel << "\ndense=" << c.model.dense
    << "\nclasses=" << c.model.classes << "\nbatch=" << B << "\nsteps=" << steps << "\ncheck=1," << steps
    << "\ntol=" << tol << "\ndtype=f64\nlr=" << c.optim.lr << "\nbeta1=" << c.optim.beta1
    << "\nbeta2=" << c.optim.beta2 << "\neps=" << c.optim.eps << "\nwd=" << c.optim.weight_decay
    << "\nmax_norm=" << c.optim.max_grad_norm << "\nschedule="
    << (c.optim.schedule == kernels::LrSchedule::cosine   ? "cosine"
        : c.optim.schedule == kernels::LrSchedule::linear ? "linear"
                                                          : "constant")
    << "\nwarmup=" << c.optim.warmup_steps << "\ntotal=" << c.optim.total_steps << "\nmin_lr=" << c.optim.min_lr
    << "\nclass_weights=" << cw << "\nsmoothing=" << c.label_smoothing << "\nwclass=" << c.class_loss_weight
    << "\nwleak=" << c.leak_loss_weight << "\nheads=" << (c.model.leak_head ? "class+leak" : "class") << "\n";
}

// The PyTorch oracle of the CPU training step (tests/oracle/leakcnn_steps.py):
// `steps` AdamW steps of a fixed configuration (cosine schedule with warmup,
// clipping, class weights, label smoothing, seed 11) on `model`, the weights
// after step 1 and after the last step compared with torch in float64.
// `name` keeps the folders of concurrent oracle tests apart.
inline void check_steps_against_torch(const model::ModelConfig& model, const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("melforge_oracle_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(dir / "init");
  model::TrainConfig cfg;
  cfg.model = model;
  cfg.micro_batch = 8;
  cfg.optim.lr = 3e-3f;
  cfg.optim.weight_decay = 0.05f;
  cfg.optim.max_grad_norm = 0.5f;  // small enough to clip
  cfg.optim.schedule = kernels::LrSchedule::cosine;
  cfg.optim.warmup_steps = 2;
  cfg.optim.total_steps = 6;
  cfg.optim.min_lr = 1e-4f;
  cfg.class_weights = {1.0f, 2.0f, 0.5f};
  cfg.label_smoothing = 0.1f;
  cfg.class_loss_weight = 1.0f;
  cfg.leak_loss_weight = 0.7f;  // without the leak head: must not matter
  cfg.seed = 11;
  const int steps = 5;
  const std::int64_t B = cfg.micro_batch;
  model::TrainStep ts(cfg, Device::cpu());
  model::write_arrays((dir / "init").string(), model::export_torch(ts.params(), ts.params().master()));
  write_oracle_config((dir / "config.txt").string(), cfg, steps, B, 1e-5);
  for (int s = 0; s < steps; ++s) {
    const auto b = band_batch(B, cfg.model.in_mels, cfg.model.in_frames, 3, 100 + std::uint64_t(s));
    {
      std::ofstream f(dir / ("batch" + std::to_string(s) + ".bin"), std::ios::binary);
      f.write(reinterpret_cast<const char*>(b.x.data()), std::streamsize(b.x.size() * 4));
      f.write(reinterpret_cast<const char*>(b.labels.data()), std::streamsize(b.labels.size() * 4));
      f.write(reinterpret_cast<const char*>(b.leak.data()), std::streamsize(b.leak.size() * 4));
    }
    const auto t = to_tensors(b, B, cfg.model.in_mels, cfg.model.in_frames);
    ts.step(t.x, t.labels, t.leak, nullptr);
    const model::StepMetrics m = ts.read_metrics(nullptr);
    MESSAGE("step " << s + 1 << ": melforge loss " << m.loss << " grad norm " << m.grad_norm << " lr " << m.lr);
    CHECK(m.step == s + 1);
    CHECK(std::fabs(double(m.lr) - kernels::lr_at(cfg.optim, s)) < 1e-9);
    if (s + 1 == 1 || s + 1 == steps) {
      const fs::path out = dir / ("after" + std::to_string(s + 1));
      fs::create_directories(out);
      model::write_arrays(out.string(), model::export_torch(ts.params(), ts.params().master()));
    }
  }
  CHECK(run_oracle("leakcnn_steps.py", dir.string()) == 0);
  fs::remove_all(dir);
}

}  // namespace mf::testing
