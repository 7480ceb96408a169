// The configuration-described CNN stack (model.arch = "cnn", or a named
// preset): an ordered list of layers from the input segment [1, mels, frames]
// to the features the heads read. docs/models.md documents the TOML schema
// ([[model.layers]] tables); this header is its one home in the code.
//
// Layers and what they compute (activations NHWC [N, H, W, C]):
//   conv      k x k (odd), stride 1|2, padding k/2, optional bias, optional
//             batch norm, activation relu|none, then max pool p (1 = none).
//   residual  the basic block: conv3x3(stride)-BN-ReLU-conv3x3-BN, optional
//             squeeze-excitation (reduction ratio se) on the second BN's
//             output, plus the shortcut (identity, or 1x1 conv(stride)-BN when
//             the stride is 2 or the channels change), then ReLU.
//   global_avg_pool       mean over H and W -> [N, C].
//   attentive_stats_pool  mean over H, self-attentive pooling over W (time),
//                         mean or mean+std -> [N, C] or [N, 2C].
//   dense     units, activation relu|none; a spatial input is flattened in
//             NHWC order (h, w, c).
//   dropout   p.
// The heads (class, and the leak head) read the last layer's output
// (flattened in NHWC order when it is still spatial).
//
// Parameter names follow the PyTorch module bench/cnn_stack_torch.py builds
// from the same description (cnn_param_specs lists them).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>


namespace mf::model {

// The most channels a conv layer (of a stack, or of LeakCNN's model.channels) may have.
inline constexpr int kMaxChannels = 4096;

enum class LayerType : std::uint8_t { conv, residual, global_avg_pool, attentive_stats_pool, dense, dropout };

struct CnnLayer {
  LayerType type = LayerType::conv;
  int k = 3;            // conv: kernel size (odd)
  int cout = 0;         // conv, residual: output channels
  int stride = 1;       // conv, residual: 1 or 2
  bool bias = true;     // conv: bias (false by default with batch_norm)
  bool batch_norm = false;  // conv
  bool relu = true;     // conv, dense: activation relu (true) or none
  int pool = 1;         // conv: max pool p x p after the activation (1: none)
  int se = 0;           // residual: squeeze-excitation reduction ratio (0: none)
  bool stats = false;   // attentive_stats_pool: mean+std (true) or mean
  int attention = 0;    // attentive_stats_pool: attention width A (0: the channels)
  int units = 0;        // dense
  float p = 0.f;        // dropout probability

  bool operator==(const CnnLayer&) const = default;
};

std::string_view layer_type_name(LayerType t);

// The activation a layer produces: spatial [H, W, C] or flat [C].
struct ActShape {
  bool spatial = true;
  int h = 1, w = 1, c = 1;
  std::int64_t features() const { return spatial ? std::int64_t(h) * w * c : c; }
};

// The output shape of every layer for an input [mels, frames, 1]; throws
// mf::Error naming the layer (model.layers[i]) and what does not fit.
std::vector<ActShape> cnn_shapes(const std::vector<CnnLayer>& layers, int mels, int frames);

// Squeeze-excitation's hidden width for `cout` channels and ratio `se`.
inline int se_hidden(int cout, int se) { return cout / se > 1 ? cout / se : 1; }
// Whether a residual block from `cin` channels needs the projection shortcut.
inline bool residual_projects(const CnnLayer& l, int cin) { return l.stride != 1 || l.cout != cin; }

// The named presets: "resnet34se-light" (ResNetSE34L-like: a 7x7 stride-2
// stem conv of 16 channels with batch norm, residual stages of 3, 4, 6, 3
// blocks at 16, 32, 64, 128 channels (strides 1, 2, 2, 1) with SE ratio 8,
// self-attentive pooling over time, a 512-wide embedding). Throws for an
// unknown name, listing the presets.
std::vector<CnnLayer> cnn_preset(std::string_view name);
const std::vector<std::string>& cnn_preset_names();

// One layer from a TOML table ({type = "conv", k = 3, ...}); `where` names it
// in errors ("model.layers[2]"). Unknown keys, wrong types and keys of another
// layer type are errors naming the key.
CnnLayer parse_cnn_layer(const toml::node& table, const std::string& where);
// The list from a TOML array of tables (model.layers).
std::vector<CnnLayer> parse_cnn_layers(const toml::node& array, std::string_view origin);
// A layer as a TOML inline table with the keys of its type (round-trips
// through parse_cnn_layer), and as a JSON object (the oracle's model.json).
std::string cnn_layer_toml(const CnnLayer& l);
std::string cnn_layer_json(const CnnLayer& l);
// One line per layer for logs: "conv 7x7/2 16 bn relu", "residual 32/2 se8", ...
std::string cnn_layer_str(const CnnLayer& l);

}  // namespace mf::model
