// margin_softmax: the cosine-margin softmax losses of speaker embedding
// training (AM-softmax, AAM-softmax / ArcFace), fused: normalisation, cosine
// logits, the margin, cross-entropy, gradients and metrics in one op.
//
// Semantics (voxceleb_trainer's loss/amsoftmax.py and loss/aamsoftmax.py,
// easy_margin false), with emb [B, D] and weight [C, D] in the working dtype T:
//   xn_b = emb_b / max(|emb_b|, 1e-12),  wn_c = w_c / max(|w_c|, 1e-12)
//   cos[b][c] = xn_b . wn_c
//   target logit (c = y_b):  am:  s * (cos - m)
//                            aam: s * phi, phi = cos cos(m) - sine sin(m),
//                                 sine = sqrt(clamp(1 - cos^2, 0, 1)),
//                                 phi = cos - sin(pi - m) m where cos - cos(pi - m) <= 0
//   other logits:            s * cos
//   loss = mean over the valid samples of CrossEntropy(logits_b, y_b)
// Derivatives: d sine / d cos = -cos / sine where sine > 0, and 0 where
// sine == 0 (|cos| >= 1 after rounding: beyond 1 autograd's clamp gives 0 too;
// at exactly |cos| = 1 autograd's sqrt would give inf/NaN, we give 0). A row
// whose norm is below 1e-12 is divided by the
// constant 1e-12 (no gradient through the norm). The constants cos(m), sin(m),
// cos(pi - m) and sin(pi - m) m are computed in double and rounded to f32, as
// voxceleb's Python floats are when they meet f32 tensors.
//
// Labels i32 [B]: a label outside [0, C) is ignored (class_leak_loss's rule,
// kernels/loss.hpp): no loss, zero gradient (its demb row is 0 and it adds
// nothing to dweight), left out of the mean's denominator N and of the class
// counts (correct, confusion); counts[0] (samples) still adds B. N = 0: loss 0,
// every gradient 0.
// Outputs:
//   demb [B, D] T (overwritten) = d loss / d emb * (*loss_scale) * grad_scale
//   dweight f32 [C, D] (overwritten) = d loss / d weight * the same factor (the
//     parameter gradients carry the loss scale as dense_backward's dw do; the
//     optimizer unscales, kernels/adamw.hpp)
//   sums f32 [kLossSums] += (loss, 0 (no leak loss), loss, 1 micro-batch)
//   counts i32 [kLossCounts] or [kLossCounts + C*C] += (B, correct, 0) and, when
//     the confusion matrix is present, [true y][argmax_c cos[b][c]] (first max
//     wins). correct: argmax of the plain cosine (no margin) equals the label.
//     (The short form [kLossCounts] exists because C*C is large for thousands
//     of speakers.)
//   step_loss f32 [1] or null: the loss (written).
// loss_scale: f32 [1] (a device pointer on the GPU) or null (= 1).
// Precision: T read, f32 compute and accumulation, one rounding on store.
// Deterministic: fixed-order f32 sums, no float atomics (the confusion matrix
// uses exact integer atomics on the GPU); the CPU twin's bits do not depend on
// the thread count (it splits over samples, then over classes for dweight).
// Scratch: the CUDA path keeps norms, cosines and d loss / d cos in a
// caller-owned f32 scratch of margin_softmax_scratch_elems(B, C, D) elements,
// laid out [nx B][nw C][per-sample (loss, pred, t) 3B][cos B*C][g B*C]; the CPU
// twin ignores it (may be null).
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>

#include "engine/dtype.hpp"
#include "engine/host_device.hpp"

namespace mf::kernels {

enum class MarginType : std::uint8_t { am, aam };

struct MarginSoftmaxArgs {
  std::int64_t batch = 1;  // B
  int dim = 1;             // D
  int classes = 2;         // C
  MarginType type = MarginType::aam;
  float scale = 30.f;      // s
  float margin = 0.2f;     // m
  float grad_scale = 1.f;  // 1/k for k accumulated micro-batches
};

// f32 elements of the CUDA path's scratch (layout above); D does not enter.
inline std::int64_t margin_softmax_scratch_elems(std::int64_t b, std::int64_t c, std::int64_t /*d*/) {
  return b + c + 3 * b + 2 * b * c;
}

// The margin's f32 constants, computed in double (shared by both twins).
struct MarginConsts {
  float cos_m = 1.f, sin_m = 0.f, th = -1.f, mm = 0.f;
};
MarginConsts margin_consts(float m);

// The target's margined cosine f(cos) (the logit is s * f) and f'(cos), the
// contract's rules (shared by the CPU twin and the CUDA kernels).
struct MarginTarget {
  float f, df;
};
MF_HOST_DEVICE_INLINE MarginTarget margin_target(MarginType type, float m, const MarginConsts& k, float cos) {
  if (type == MarginType::am) return {cos - m, 1.f};
  if (cos - k.th <= 0.f) return {cos - k.mm, 1.f};  // theta + m > pi: voxceleb's fallback
  float v = 1.f - cos * cos;
  v = v < 0.f ? 0.f : (v > 1.f ? 1.f : v);
  const float sine = sqrtf(v);
  const float dsine = sine > 0.f ? -cos / sine : 0.f;  // 0 at |cos| >= 1 (the contract)
  return {cos * k.cos_m - sine * k.sin_m, k.cos_m - dsine * k.sin_m};
}

// confusion: true when counts hold the C x C confusion matrix after kLossCounts.
void margin_softmax_loss_cpu(const MarginSoftmaxArgs& d, DType dtype, const void* emb, const void* weight,
                             const std::int32_t* labels, const float* loss_scale, void* demb, float* dweight,
                             float* sums, std::int32_t* counts, bool confusion, float* step_loss, float* scratch,
                             cudaStream_t stream);
void margin_softmax_loss_cuda(const MarginSoftmaxArgs& d, DType dtype, const void* emb, const void* weight,
                              const std::int32_t* labels, const float* loss_scale, void* demb, float* dweight,
                              float* sums, std::int32_t* counts, bool confusion, float* step_loss, float* scratch,
                              cudaStream_t stream);

}  // namespace mf::kernels
