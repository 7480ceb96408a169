// The model's configuration (LeakCNN, or a configuration-described CNN stack)
// and the precision policy of a training run.
//
// arch = leakcnn: input 1 x mels x frames (NHWC [N, mels, frames, 1] in melforge);
// blocks i = 0..L-1 of conv k x k (padding k/2) + bias + ReLU + max pool p_i
// (fused: kernels/conv_relu_pool.hpp), channels 1 -> c_0 -> ... -> c_{L-1};
// flatten; fc (dense, + ReLU); dropout (optional); class head (C logits) and,
// when leak_head (model.heads = class+leak, model/heads.hpp), the leak head (1
// logit). Default LeakCNN-64: 64 x 64, channels 32/64/128, pools 2/2/2, k = 3,
// dense 256, 2 classes, both heads.
//
// arch = cnn: `layers` (model/cnn_layers.hpp) from the input to the features
// the heads read; channels, pools, kernel, dense and dropout are not used.
// `preset` names the preset the layers came from ("" when written out).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/dtype.hpp"
#include "engine/named_enum.hpp"
#include "model/cnn_layers.hpp"

namespace mf::model {

enum class Arch : std::uint8_t { leakcnn, cnn };

// The training loss (loss.type), which decides what follows the embedding:
//   softmax       the class head (and the leak head with heads = class+leak)
//   am_softmax,   a class-weight matrix loss.weight [C, E] scored by cosine
//   aam_softmax   with a margin (kernels/margin_softmax.hpp); no class head
//   angleproto    the angular prototypical loss's learnable scale and bias
//                 loss.w, loss.b (kernels/angleproto.hpp); no class head
//   softmaxproto  the class head (softmax) plus angleproto
enum class LossType : std::uint8_t { softmax, am_softmax, aam_softmax, angleproto, softmaxproto };
inline constexpr NamedEnum<LossType> kLossTypeNames[] = {{LossType::softmax, "softmax"},
                                                         {LossType::am_softmax, "am_softmax"},
                                                         {LossType::aam_softmax, "aam_softmax"},
                                                         {LossType::angleproto, "angleproto"},
                                                         {LossType::softmaxproto, "softmaxproto"}};
// "softmax", "am_softmax", ...; throws mf::Error listing the choices.
LossType parse_loss_type(std::string_view s);
std::string_view loss_type_name(LossType t);
// Whether the loss is a prototypical one (batches of per_class segments of each class).
inline bool loss_is_prototypical(LossType t) { return t == LossType::angleproto || t == LossType::softmaxproto; }

struct ModelConfig {
  Arch arch = Arch::leakcnn;
  std::vector<CnnLayer> layers;  // arch = cnn
  std::string preset;            // arch = cnn: the preset's name, or empty
  int in_mels = 64;
  int in_frames = 64;
  std::vector<int> channels{32, 64, 128};
  std::vector<int> pools{2, 2, 2};  // one per block; 1 = no pool
  int kernel = 3;
  int dense = 256;
  float dropout = 0.f;
  int classes = 2;
  bool leak_head = true;  // false: the class head alone (no leak parameters, loss term or outputs)
  // A linear embedding layer (no activation) of this width between the trunk
  // and the heads ("embedding.weight/bias"); 0: none.
  int embedding = 0;
  // Per-segment instance normalisation of each mel band over time at the
  // input (kernels/ops.hpp: instance_norm), in training and inference.
  bool input_norm = false;
  LossType loss = LossType::softmax;

  int blocks() const { return int(channels.size()); }
  int in_channels(int block) const { return block == 0 ? 1 : channels[std::size_t(block - 1)]; }
  // Spatial size after block i (floor division by each pool, as PyTorch).
  int out_h(int block) const;
  int out_w(int block) const;
  // fc's input features: C_last * H_last * W_last.
  std::int64_t flat_features() const;
  // The trunk's output: dense (leakcnn), or the last layer's output (cnn;
  // flattened when spatial).
  std::int64_t trunk_features() const;
  // What the heads and the metric losses read: the embedding when there is
  // one, else the trunk's output.
  std::int64_t features() const { return embedding > 0 ? embedding : trunk_features(); }
  // Whether the model has the class head (softmax and softmaxproto losses).
  bool class_head() const { return loss == LossType::softmax || loss == LossType::softmaxproto; }
  // Logits of the heads together: C, plus 1 for the leak head (0 without a class head).
  int head_outputs() const { return class_head() ? classes + (leak_head ? 1 : 0) : 0; }
  // Whether inference can run on inputs of `frames` frames (in_mels mels):
  // in_frames itself, or any length for which a CNN stack has the same
  // features and parameters (one that ends in global or attentive pooling;
  // not LeakCNN or a flattening stack). Evaluation crops of another length
  // and whole utterances need it.
  bool takes_frames(std::int64_t frames) const;
  // Throws mf::Error naming the key when something does not fit.
  void validate() const;
  std::string str() const;
};

// A CNN stack's description as JSON, the input of bench/cnn_stack_torch.py's
// CnnStack: {"in_mels", "in_frames", "classes", "leak_head", "layers": [...]}.
std::string cnn_description_json(const ModelConfig& m);

enum class Precision : std::uint8_t { fp32, bf16, fp16 };
// The first name of each is the one melforge writes; the others are aliases.
inline constexpr NamedEnum<Precision> kPrecisionNames[] = {
    {Precision::fp32, "fp32"}, {Precision::bf16, "bf16"},     {Precision::fp16, "fp16"},
    {Precision::fp32, "f32"},  {Precision::fp32, "float32"},  {Precision::bf16, "bfloat16"},
    {Precision::fp16, "f16"},  {Precision::fp16, "float16"},  {Precision::fp16, "half"}};
// "fp32"/"f32", "bf16", "fp16"/"f16"; throws mf::Error listing the choices.
Precision parse_precision(std::string_view s);
std::string_view precision_name(Precision p);
// The activation and working-weight dtype of a precision.
DType activation_dtype(Precision p);

}  // namespace mf::model
