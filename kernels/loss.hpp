// class_leak_loss: the fused training loss of LeakCNN's two heads (the class
// cross-entropy and the leak BCE), its logits' gradient and the step's
// metrics, in one pass.
//
// logits [B, C+1] T: columns 0..C-1 are the class head, column C the leak head
// (the two heads are one dense layer in melforge, see model/param_buffer.hpp).
// Without the leak head (args.leak_head false, model.heads = class) the logits
// are [B, C], `leak` is not read (may be null) and every leak term below is 0:
// no leak loss, no leak gradient column, leak correct count 0.
//   class loss  = CrossEntropy(logits[:, :C], label; weight=class_weight,
//                 label_smoothing=eps), PyTorch's semantics incl. the weighted
//                 mean: sum_i [(1-eps) w_yi (-log p_i,yi) + eps/C sum_c w_c (-log p_i,c)]
//                 / sum_i w_yi   (w = 1 when class_weight is null)
//   leak loss   = BCEWithLogits(logits[:, C], leak), mean over B
//   loss        = class_loss_weight * class loss + leak_loss_weight * leak loss
// dlogits [B, C+1] T (overwritten) = d(loss)/d(logits) * (*loss_scale) * grad_scale
//   (grad_scale is 1/k for k accumulated micro-batches; loss_scale is the
//   device-held AMP loss scale, 1 when not scaling).
// Metrics, accumulated (+=) on the device, no host synchronization:
//   sums  f32 [kLossSums]: class loss, leak loss, total loss, micro-batches
//   counts i32 [kLossCounts + C*C] (args.confusion true): samples, class
//          correct, leak correct, then the confusion matrix [true C][predicted C]
//          (argmax, first max wins: a NaN logit in column 0 wins, one elsewhere
//          never does; leak predicted positive when its logit > 0, true when
//          leak > 0.5);
//          or i32 [kLossCounts] (args.confusion false; speaker sets with
//          thousands of classes): the same three counts and no matrix, which is
//          neither counted nor touched. The loss, dlogits, sums and the three
//          counts are then the same as with the matrix (the CPU twin: the same
//          bits; the GPU: the same within f32 rounding, see below).
// labels i32 [B]: a label outside [0, C) is ignored by the class loss (as
// PyTorch's ignore_index: no loss, zero class gradient, left out of the weighted
// mean's denominator and of the class counts); leak f32 [B] targets in [0, 1].
// Soft class targets (mixup, kernels/mixup.hpp): labels_b i32 [B] and lam f32
// [B], both given or both null (null: everything above, bit for bit). Sample i
// then has targets (y_a = labels[i], y_b = labels_b[i], lam_i), o_i = 1.f - lam_i
// (f32), and with n_i(y) = (1-eps) w_y (-log p_i,y) + eps/C sum_c w_c (-log p_i,c)
// (0 for a label outside [0, C), whose w_y counts as 0):
//   class loss = sum_i [lam_i n_i(y_a) + o_i n_i(y_b)] / sum_i [lam_i w_ya + o_i w_yb]
// i.e. one weighted mean whose per-sample weight is split between the two
// labels. Without class weights (and all labels valid) the denominator is
// sum_i (lam_i + o_i) = B and this is exactly PyTorch's mixup recipe
// lam * criterion(pred, y_a) + (1 - lam) * criterion(pred, y_b) generalized to
// a per-sample lam (for one lam per batch it is that recipe); with class
// weights PyTorch's two separately normalized means differ from this one
// (their denominators sum w_ya and sum w_yb are combined here as above). The
// gradient is lam_i * (the gradient of y_a's term) + o_i * (that of y_b's),
// divided by the combined denominator. The leak BCE takes the (mixed) float
// targets as always. Metrics count the dominant label (y_a when lam_i >= 0.5,
// else y_b) as the true one: class correct and the confusion matrix's row.
// Deterministic: fixed-order f32 sums, no float atomics; the f32 sums add the
// micro-batch's means in step order. GPU, with the confusion matrix and C <=
// 100: one block that keeps the C x C matrix in shared memory. Otherwise (any
// C): a warp per row (fixed-order butterfly sums) in one 1024-thread block for
// the metrics (a confusion matrix counted in `counts` with integer atomics) and
// in a grid of blocks for dlogits, nothing in shared memory that grows with C
// (kernels/loss.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/dtype.hpp"

namespace mf::kernels {

inline constexpr int kLossSums = 4;    // class, leak, total, micro-batches
inline constexpr int kLossCounts = 3;  // samples, class correct, leak correct

struct ClassLeakLossArgs {
  std::int64_t batch = 1;
  int classes = 2;
  float label_smoothing = 0.f;
  float class_loss_weight = 1.f;
  float leak_loss_weight = 1.f;
  float grad_scale = 1.f;
  bool leak_head = true;  // logits carry the leak column C
  // counts carry the C x C confusion matrix ([kLossCounts + C*C]); false:
  // counts [kLossCounts]. ops::class_leak_loss sets it from counts' size.
  bool confusion = true;
};

// class_weight f32 [C] or null; loss_scale f32 [1] (device pointer on GPU) or
// null (= 1); step_loss f32 [1] or null: this micro-batch's total loss (written).
// labels_b and lam: the soft targets above, or both null.
void class_leak_loss_cpu(const ClassLeakLossArgs& d, DType dtype, const void* logits, const std::int32_t* labels,
                   const std::int32_t* labels_b, const float* lam, const float* leak, const float* class_weight,
                   const float* loss_scale, void* dlogits, float* sums, std::int32_t* counts, float* step_loss,
                   cudaStream_t stream);
void class_leak_loss_cuda(const ClassLeakLossArgs& d, DType dtype, const void* logits, const std::int32_t* labels,
                    const std::int32_t* labels_b, const float* lam, const float* leak, const float* class_weight,
                    const float* loss_scale, void* dlogits, float* sums, std::int32_t* counts, float* step_loss,
                    cudaStream_t stream);

// head_probs: evaluation outputs. probs f32 [B, C] = softmax(logits[:, :C]),
// leak_prob f32 [B] = sigmoid(logits[:, C]). leak_prob null: the model has no
// leak head and the logits are [B, C].
void head_probs_cpu(std::int64_t batch, int classes, DType dtype, const void* logits, float* probs,
                    float* leak_prob, cudaStream_t stream);
void head_probs_cuda(std::int64_t batch, int classes, DType dtype, const void* logits, float* probs,
                     float* leak_prob, cudaStream_t stream);

}  // namespace mf::kernels
