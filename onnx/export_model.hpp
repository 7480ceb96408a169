// ONNX export of a trained model (`melforge export --format onnx`): the graph
// ONNX Runtime (or any runtime of opset 17) runs to get the outputs `melforge
// predict` / `embed` compute, from log-mels or, with the front-end, from 16 kHz
// waveforms. docs/onnx.md is the user's guide; the contract:
//
// Input (log-mels)   "logmel" [batch, n_mels, frames] f32, dB as the training
//                    data holds them; frames fixed (model.in_frames), or
//                    dynamic for stacks ending in global or attentive pooling.
// Input (front-end)  "waveform" [batch, samples] f32 at frontend.sample_rate,
//                    samples >= FrontendParams::min_samples() (as `predict
//                    --audio`; pad with zeros as its --pad does): the first
//                    long*short segments of frames frames each are scored,
//                    which depend on the first window_samples() samples.
// Outputs            "class_probs" [batch, C] (softmax of the class head),
//                    "leak_prob" [batch] (sigmoid of the leak head) when the
//                    model has them; "embedding" [batch, E] (not normalised)
//                    for metric-loss models and models with an embedding
//                    layer. With the front-end each gains a segments axis
//                    after batch: [batch, segments, ...], and the file-level
//                    outputs of `predict --audio` / `embed --audio` follow:
//                    file_probs [batch, C], file_class [batch] int64,
//                    file_leak_prob [batch], file_leak [batch] int64,
//                    file_embedding [batch, E] (L2-normalised). "embedding"
//                    also for softmaxproto (class head and embedding).
// Batch norm is folded into the conv before it (in float64, rounded once):
// the graph computes what melforge's own inference does (model/cnn_stack.hpp
// folds too, in f32), smaller, and needs no BatchNormalization in the runtime.
// The model is checked before it is returned (ONNX's checker and strict shape
// inference); a layer with no mapping or weights that do not fit the
// description throw mf::Error naming the layer or tensor, so no broken file is
// ever written.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "audio/frontend_params.hpp"
#include "model/model_config.hpp"
#include "model/torch_layout.hpp"

namespace mf::onnx_export {

inline constexpr int kOpset = 17;       // STFT and MelWeightMatrix's opset; ONNX 1.12's newest
inline constexpr int kIrVersion = 8;    // ONNX 1.12's IR

struct ExportRequest {
  model::ModelConfig model;
  std::vector<model::NamedArray> weights;  // model::export_torch's PyTorch names and layouts
  std::vector<std::string> class_names;
  // The features the model was trained on (the checkpoint's [frontend]), for
  // the metadata; required with with_frontend.
  std::optional<audio::FrontendParams> frontend;
  bool with_frontend = false;
  float threshold = 0.5f;  // with_frontend: the file leak vote's threshold (eval.threshold)
  std::string version;  // melforge's
  std::string source;   // the checkpoint
  std::int64_t step = 0;
};

struct ExportedModel {
  std::string bytes;  // the serialised ModelProto
  std::vector<std::string> inputs, outputs;  // "name [dims]"
  std::int64_t nodes = 0, initializers = 0;
};

ExportedModel export_onnx(const ExportRequest& r);

}  // namespace mf::onnx_export
