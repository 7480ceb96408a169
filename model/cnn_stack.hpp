// CnnStack: the forward and backward of a CNN stack's layers
// (model/cnn_layers.hpp) on one device, from the input segments to the
// features the heads read. TrainStep owns one for a model.arch = cnn run and
// puts the heads, the loss and the optimizer around it.
//
//   CnnStack stack(cfg, B, dtype, device, stream);         // buffers for micro-batches of B
//   const Tensor& f = stack.forward(pb, x, ctx, stream);   // x [B, mels, frames, 1] nhwc -> f [B, D]
//   ... the heads write stack.dfeatures() [B, D] ...
//   stack.backward(pb, x, g, ctx, stream);                 // parameter gradients into g (pb's layout)
//   Tensor f = stack.forward_eval(pb, x, stream);          // any batch: running statistics, no dropout
//
// Each layer is a sequence of ops (kernels/ops.hpp); the buffers are made once
// in the constructor, so a training step allocates nothing and can be
// captured as a CUDA graph. Batch norm reads its parameters from the working
// copy and updates its running statistics in the f32 master copy
// (model/cnn_params.hpp). A conv layer of LeakCNN's kind (stride 1, bias,
// ReLU, no batch norm, pool 1 or 2) runs the fused conv_relu_pool op.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "engine/tensor.hpp"
#include "model/model_config.hpp"
#include "model/param_buffer.hpp"

namespace mf::model {

// Batch norm's running-statistics momentum (PyTorch's default): r = m s + (1 - m) r.
inline constexpr float kBatchNormMomentum = 0.1f;
// Batch norm's epsilon (PyTorch's BatchNorm2d default): (x - mean) / sqrt(var + eps).
inline constexpr float kBatchNormEps = 1e-5f;

// What the training forward's dropout layers draw from (kernels/dropout.hpp):
// the run's seed, the micro-batch (stream) and the optimizer iteration counter
// in the tensors' memory.
struct DropoutContext {
  std::uint64_t seed = 0;
  std::uint32_t stream = 0;
  const std::int32_t* counter = nullptr;
};

class CnnStack {
 public:
  CnnStack(const ModelConfig& cfg, std::int64_t batch, DType dtype, Device device, cudaStream_t stream = nullptr);
  ~CnnStack();
  CnnStack(const CnnStack&) = delete;
  CnnStack& operator=(const CnnStack&) = delete;

  // Training forward (batch statistics, running statistics updated, dropout
  // drawn) of x [B, mels, frames, 1]; returns the features [B, D].
  const Tensor& forward(ParamBuffer& pb, const Tensor& x, const DropoutContext& drop, cudaStream_t stream);
  // The features' gradient [B, D], written by the caller before backward().
  Tensor& dfeatures();
  // Backward of the last forward (same x): parameter gradients into `g`, a
  // flat f32 buffer of pb's layout (overwritten per parameter, not added).
  // `layer_done` (when set) is told each layer's parameter prefix
  // ("layers.<i>") once its gradients are written, last layer first.
  void backward(ParamBuffer& pb, const Tensor& x, Tensor& g, const DropoutContext& drop, cudaStream_t stream,
                const std::function<void(std::string_view layer)>& layer_done = {});
  // Inference on any batch: batch norm with the running statistics, no
  // dropout; allocates its activations. Returns the features [N, D].
  Tensor forward_eval(const ParamBuffer& pb, const Tensor& x, cudaStream_t stream) const;
  // forward_eval folds each batch norm that follows a conv into that conv
  // (kernels/fold_batch_norm.hpp; the non-SE bn2, which adds the shortcut,
  // stays a batch norm); false runs the unfolded ops, as training does (the
  // tests compare the two).
  void set_fold_batch_norm(bool on) { fold_bn_ = on; }

  struct Node;  // one layer's buffers (cnn_stack.cpp)

 private:
  ModelConfig cfg_;
  std::int64_t batch_;
  DType dtype_;
  Device device_;
  std::vector<std::unique_ptr<Node>> nodes_;
  Tensor features_, dfeatures_;
  Tensor bn_scratch_;    // batch norm's per-chunk partials (GPU), shared by every batch norm
  Tensor conv_scratch_;  // conv2d backward's dw/db partials (GPU), shared by every conv
  bool fold_bn_ = true;  // forward_eval: batch norm folded into the convs
};

}  // namespace mf::model
