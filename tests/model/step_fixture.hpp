// Shared helpers of the training-step tests: small configs and synthetic batches.
#pragma once

#include <cmath>
#include <fstream>
#include <string>
#include <random>
#include <vector>

#include "engine/tensor.hpp"
#include "model/train_step.hpp"

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

inline model::LeakCNNConfig small_model(int classes = 3) {
  model::LeakCNNConfig m;
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

}  // namespace mf::testing
