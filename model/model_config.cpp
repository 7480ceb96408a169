#include "model/model_config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/error.hpp"
#include "model/param_buffer.hpp"

namespace mf::model {

int ModelConfig::out_h(int block) const {
  int h = in_mels;
  for (int i = 0; i <= block; ++i) h /= pools[std::size_t(i)];
  return h;
}

int ModelConfig::out_w(int block) const {
  int w = in_frames;
  for (int i = 0; i <= block; ++i) w /= pools[std::size_t(i)];
  return w;
}

std::int64_t ModelConfig::flat_features() const {
  const int L = blocks();
  return std::int64_t(channels.back()) * out_h(L - 1) * out_w(L - 1);
}

std::int64_t ModelConfig::trunk_features() const {
  if (arch == Arch::leakcnn) return dense;
  return cnn_shapes(layers, in_mels, in_frames).back().features();
}

bool ModelConfig::takes_frames(std::int64_t frames) const {
  if (frames == in_frames) return true;
  if (arch != Arch::cnn || frames < 1 || frames > (std::int64_t(1) << 30)) return false;
  ModelConfig other = *this;
  other.in_frames = int(frames);
  try {
    other.validate();
    return other.trunk_features() == trunk_features() && param_layout(other).size == param_layout(*this).size;
  } catch (const Error&) {
    return false;  // too short for the stack's strides and pools
  }
}

void ModelConfig::validate() const {
  MF_CHECK(in_mels >= 1 && in_frames >= 1, "model: input must be at least 1 x 1, found {} x {}", in_mels, in_frames);
  // Speaker sets have thousands of classes; the softmax heads' confusion
  // matrix and file vote are sized for a few hundred.
  const int max_classes = loss == LossType::softmax ? 256 : 65536;
  MF_CHECK(classes >= 1 && classes <= max_classes,
           "model: classes (model.num_classes, or the data's) must be in [1, {}], found {}", max_classes, classes);
  MF_CHECK(embedding >= 0 && embedding <= 65536, "model.embedding: expected 0 (none) or a width in [1, 65536], found {}",
           embedding);
  MF_CHECK(loss == LossType::softmax || !leak_head,
           "loss.type = {}: a metric loss trains speaker embeddings and has no leak head; set model.heads = class",
           loss_type_name(loss));
  if (arch == Arch::cnn) {
    const std::int64_t d = cnn_shapes(layers, in_mels, in_frames).back().features();  // throws naming the layer
    MF_CHECK(d <= (std::int64_t(1) << 30), "model.layers: the heads would read {} features", d);
    return;
  }
  MF_CHECK(!channels.empty(), "model.channels: at least one conv block is needed (found an empty list)");
  MF_CHECK(pools.size() == channels.size(),
           "model.pools: {} pool sizes for {} blocks (model.channels): expected one per block", pools.size(),
           channels.size());
  // The bounds of a CNN stack's layers (model/cnn_layers.hpp): beyond them a
  // model is a damaged or mistyped setting, not a network to allocate.
  MF_CHECK(kernel >= 1 && kernel <= 15 && kernel % 2 == 1, "model.kernel: expected an odd integer in [1, 15], found {}",
           kernel);
  for (std::size_t i = 0; i < channels.size(); ++i) {
    MF_CHECK(channels[i] >= 1 && channels[i] <= kMaxChannels, "model.channels[{}]: expected an integer in [1, {}], "
             "found {}", i, kMaxChannels, channels[i]);
    MF_CHECK(pools[i] >= 1 && pools[i] <= 15, "model.pools[{}]: expected an integer in [1, 15], found {}", i,
             pools[i]);
    MF_CHECK(out_h(int(i)) >= 1 && out_w(int(i)) >= 1,
             "model: input {} x {} is too small for the pools {} (block {} has no output)", in_mels, in_frames,
             fmt::join(pools, "/"), i);
  }
  MF_CHECK(dense >= 1 && dense <= 65536, "model.dense: expected an integer in [1, 65536], found {}", dense);
  MF_CHECK(dropout >= 0.f && dropout < 1.f, "model.dropout: expected a number in [0, 1), found {}", dropout);
}

std::string ModelConfig::str() const {
  std::string extra;
  if (input_norm) extra += ", input instance norm";
  if (embedding > 0) extra += fmt::format(", embedding {}", embedding);
  if (loss != LossType::softmax) extra += fmt::format(", loss {}", loss_type_name(loss));
  if (arch == Arch::cnn) {
    std::vector<std::string> ls;
    for (const CnnLayer& l : layers) ls.push_back(cnn_layer_str(l));
    return fmt::format("{}(input 1x{}x{}, layers [{}], features {}{}, classes {}, heads {})",
                       preset.empty() ? "cnn" : preset, in_mels, in_frames, fmt::join(ls, "; "), trunk_features(),
                       extra, classes, leak_head ? "class+leak" : "class");
  }
  return fmt::format(
      "LeakCNN(input 1x{}x{}, channels {}, pools {}, kernel {}, dense {}, dropout {}{}, classes {}, heads {})",
      in_mels, in_frames, fmt::join(channels, "/"), fmt::join(pools, "/"), kernel, dense, dropout, extra, classes,
      leak_head ? "class+leak" : "class");
}

std::string cnn_description_json(const ModelConfig& m) {
  std::vector<std::string> ls;
  for (const CnnLayer& l : m.layers) ls.push_back(cnn_layer_json(l));
  return fmt::format(R"({{"in_mels": {}, "in_frames": {}, "classes": {}, "leak_head": {}, "layers": [{}]}})", m.in_mels,
                     m.in_frames, m.classes, m.leak_head, fmt::join(ls, ", "));
}

LossType parse_loss_type(std::string_view s) { return parse_enum<LossType>(kLossTypeNames, s, "loss type"); }
std::string_view loss_type_name(LossType t) { return enum_name<LossType>(kLossTypeNames, t); }

Precision parse_precision(std::string_view s) { return parse_enum<Precision>(kPrecisionNames, s, "precision"); }
std::string_view precision_name(Precision p) { return enum_name<Precision>(kPrecisionNames, p); }

DType activation_dtype(Precision p) {
  switch (p) {
    case Precision::fp32: return DType::f32;
    case Precision::bf16: return DType::bf16;
    case Precision::fp16: return DType::f16;
  }
  return DType::f32;
}

}  // namespace mf::model
