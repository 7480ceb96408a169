// The three small CNN stacks the stack suites share (test_cnn_stack.cpp on the
// CPU, test_cnn_stack_gpu.cpp on the GPU): together they cover every layer
// type and both conv paths (fused conv_relu_pool and conv2d + batch norm +
// max pool). Input 16 x 12, 3 classes.
#pragma once

#include <string>
#include <vector>

#include "model/model_config.hpp"
#include "model/run_config.hpp"

namespace mf::testing {

// model.layers parsed from TOML text (the [model] table is prepended).
inline std::vector<model::CnnLayer> layers_from(const std::string& toml_text) {
  model::RunConfig cfg;
  model::load_toml_string(cfg, "[model]\narch = \"cnn\"\n" + toml_text, "test.toml");
  return cfg.layers;
}

// conv+BN+pool, a projecting residual block with SE, an identity block, a
// stride-2 conv with bias and ReLU (unfused), attentive mean+std pooling, a
// dense layer, both heads. Input 16 x 12.
inline model::ModelConfig stack_a() {
  model::ModelConfig m;
  m.arch = model::Arch::cnn;
  m.in_mels = 16;
  m.in_frames = 12;
  m.classes = 3;
  m.layers = layers_from(R"(
[[model.layers]]
type = "conv"
cout = 8
batch_norm = true
pool = 2
[[model.layers]]
type = "residual"
cout = 12
stride = 2
se = 4
[[model.layers]]
type = "residual"
cout = 12
[[model.layers]]
type = "conv"
cout = 16
stride = 2
[[model.layers]]
type = "attentive_stats_pool"
stats = "mean+std"
attention = 8
[[model.layers]]
type = "dense"
units = 16
)");
  return m;
}

// The fused conv (LeakCNN's kind), a 1x1 conv with bias and no activation
// (a 1x1 conv with batch norm right after a conv makes the first conv's bias
// gradient vanish, and Adam would then amplify rounding noise), an identity
// block with SE, global average pooling, a linear embedding, the
// class head alone.
inline model::ModelConfig stack_b() {
  model::ModelConfig m;
  m.arch = model::Arch::cnn;
  m.in_mels = 16;
  m.in_frames = 12;
  m.classes = 3;
  m.leak_head = false;
  m.layers = layers_from(R"(
layers = [
  { type = "conv", k = 3, cout = 8, pool = 2 },
  { type = "conv", k = 1, cout = 8, activation = "none" },
  { type = "residual", cout = 8, se = 2 },
  { type = "global_avg_pool" },
  { type = "dense", units = 8, activation = "none" },
]
)");
  return m;
}

// A stride-2 conv then a dense layer on the flattened (NHWC) activations.
inline model::ModelConfig stack_c() {
  model::ModelConfig m;
  m.arch = model::Arch::cnn;
  m.in_mels = 16;
  m.in_frames = 12;
  m.classes = 3;
  m.layers = layers_from(R"(
layers = [
  { type = "conv", k = 5, cout = 4, stride = 2 },
  { type = "dense", units = 8 },
]
)");
  return m;
}

}  // namespace mf::testing
