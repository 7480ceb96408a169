// The pieces of an exported graph (onnx/export_model.cpp assembles them):
// the log-mel model's layers (onnx/export_layers.cpp), the waveform
// front-end (onnx/export_frontend.cpp) and the waveform model's per-file
// outputs (onnx/export_file_outputs.cpp). Activations are NCHW, as the PyTorch
// reference modules (bench/leakcnn_torch.py, bench/cnn_stack_torch.py) hold
// them, and the weights are theirs (model::export_torch), so the graph
// mirrors those modules op for op. Batch norm is folded into the conv before
// it (see onnx/export_model.hpp for why).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "audio/frontend_params.hpp"
#include "model/model_config.hpp"
#include "model/torch_layout.hpp"
#include "onnx/graph_builder.hpp"

namespace mf::onnx_export {

// The value between two layers: [N, C, H, W] when spatial, else [N, C].
// w < 0: the frames axis is dynamic (models ending in global or attentive pooling).
struct Activation {
  std::string name;
  bool spatial = true;
  std::int64_t c = 1, h = 1, w = 1;
};

// The PyTorch-layout weights by state_dict name; get() checks the shape, so a
// description and weights that disagree are an error naming the tensor.
class TorchWeights {
 public:
  explicit TorchWeights(const std::vector<model::NamedArray>& arrays);
  const model::NamedArray& get(const std::string& name, const std::vector<std::int64_t>& shape) const;
  bool has(const std::string& name) const { return by_name_.count(name) > 0; }

 private:
  std::map<std::string, const model::NamedArray*> by_name_;
};

// model.input_norm: InstanceNormalization of each mel band over time, on
// x [N, mels, frames]; returns [N, 1, mels, frames].
Activation emit_input(GraphBuilder& g, const std::string& logmel, const model::ModelConfig& m, std::int64_t frames);
// LeakCNN's blocks, fc (+ ReLU) and dropout (identity): returns [N, dense].
Activation emit_leakcnn_trunk(GraphBuilder& g, const model::ModelConfig& m, const TorchWeights& w, Activation x);
// One layer of a CNN stack (layers.{i}); throws mf::Error naming the layer
// when it cannot be mapped.
Activation emit_stack_layer(GraphBuilder& g, const model::CnnLayer& l, int i, const TorchWeights& w, Activation x);
// A spatial activation flattened in (h, w, c) order (the stacks' dense and
// heads read that order); a flat one unchanged.
Activation flatten_nhwc(GraphBuilder& g, const Activation& x, const std::string& name);
// y = x W^T + b (PyTorch's Linear: W [out, in]) with an optional ReLU.
Activation emit_linear(GraphBuilder& g, const std::string& prefix, const TorchWeights& w, const Activation& x,
                       std::int64_t out, bool relu);

// The front-end: wave [N, samples] (at p.sample_rate) -> log-mel dB
// [N, n_mels, 1 + samples / hop_length], librosa's features as
// audio/frontend_params.hpp defines them (STFT of opset 17, the Slaney mel
// matrix of audio/mel_filterbank.hpp as a constant). Returns the name.
std::string emit_frontend(GraphBuilder& g, const audio::FrontendParams& p, const std::string& wave);

// The waveform model's per-file outputs, as `melforge predict --audio` and
// `embed --audio` compute them from a file's long * short segments: the heads'
// per-segment rows ([N * longs * shorts, ...]; "" where the model has no such
// head) in, file_probs [N, C] and file_class [N] (int64; kernels/file_vote.hpp's
// vote), file_leak_prob and file_leak [N] (int64; the leak vote at `threshold`),
// file_embedding [N, E] (train::file_embeddings: the L2-normalised mean of the
// segments' embeddings) out.
struct FileRows {
  std::string class_probs, leak_prob, embedding;
};
struct FileShape {
  std::int64_t longs = 1, shorts = 1, classes = 0, embedding = 0;
  float threshold = 0.5f;
};
struct GraphOutput {
  std::string name;
  std::vector<std::int64_t> dims;  // -1: the batch
  int elem_type = 0;               // onnx::TensorProto::DataType
};
std::vector<GraphOutput> emit_file_outputs(GraphBuilder& g, const FileRows& rows, const FileShape& f);

}  // namespace mf::onnx_export
