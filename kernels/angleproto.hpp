// angleproto: the angular prototypical loss of speaker embedding training
// (voxceleb_trainer's loss/angleproto.py), fused: prototypes, cosines, the
// scaled logits, cross-entropy, gradients and metrics in one op.
//
// Semantics, with emb [N*M, D] in the working dtype T holding M >= 2
// consecutive segments of each of N >= 2 classes (row i*M + k is segment k of
// class i):
//   q_i = emb[i*M]                               (the query: first segment)
//   p_j = sum_{k=1..M-1} emb[j*M + k] / (M - 1)  (the prototype; f32 sum in k order)
//   cos_ij = q_i . p_j / (max(|q_i|, 1e-8) * max(|p_j|, 1e-8))
//   w_eff = max(w, 1e-6)  (torch.clamp(w, 1e-6): NaN stays NaN)
//   z_ij = w_eff * cos_ij + b
//   loss = mean_i CrossEntropy(z_i, target i)
// The cosine's eps: torch 1.13's F.cosine_similarity (measured on 1.13.0a0)
// and the current one both clamp each norm separately, x.y / (max(|x|, eps)
// max(|y|, eps)), eps 1e-8 (1.13's docstring still shows max(|x| |y|, eps);
// the implementation does not). We follow the implementation. The two differ
// only for norms below 1e-8; there a clamped norm is a constant here (no
// gradient through it), while torch's autograd still differentiates the
// unclamped norm: gradients of such degenerate rows differ from torch's.
// dw passes the clamp's gradient only where w >= 1e-6 (torch.clamp's rule);
// db = sum_ij dz_ij (0 up to rounding: softmax rows sum to 1).
// Outputs (gradients carry S = (*loss_scale) * grad_scale, as class_leak_loss's):
//   demb [N*M, D] T (overwritten) = d loss / d emb * S; rows k >= 1 of class j
//     all get d loss / d p_j / (M - 1) * S
//   dwb f32 [2] (overwritten) = (d loss / d w, d loss / d b) * S
//   sums f32 [kLossSums] += (loss, 0 (no leak loss), loss, 1 micro-batch)
//   counts i32 [>= kLossCounts] += (N, #{i : argmax_j z_ij == i}, 0) in its
//     first kLossCounts elements (first max wins); any further elements (a
//     confusion matrix kept for other losses) are not touched
//   step_loss f32 [1] or null: the loss (written).
// loss_scale: f32 [1] (a device pointer on the GPU) or null (= 1); wb f32 [2]
// on the tensors' device (read there, no host synchronisation).
// Precision: T read, f32 compute and accumulation, one rounding on store.
// Deterministic: fixed-order f32 sums, no atomics; the CPU twin's bits do not
// depend on the thread count (it splits over classes, each sum in index order).
// Scratch: the CUDA path keeps the normalised queries and prototypes, the
// cosines and d loss / d cos in a caller-owned f32 scratch of
// angleproto_scratch_elems(N, D) elements, laid out
// [qn N*D][pn N*D][nq N][np N][cos N*N][g N*N][per-row (loss, pred, t, dw, db) 5N];
// the CPU twin ignores it (may be null).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/dtype.hpp"
#include "engine/host_device.hpp"

namespace mf::kernels {

struct AngleProtoArgs {
  int classes = 2;         // N (classes in the micro-batch)
  int per_class = 2;       // M (consecutive segments per class, >= 2)
  int dim = 1;             // D
  float grad_scale = 1.f;  // 1/k for k accumulated micro-batches
};

inline constexpr float kAngleProtoNormEps = 1e-8f;  // F.cosine_similarity's eps
inline constexpr float kAngleProtoMinW = 1e-6f;     // torch.clamp(self.w, 1e-6)

// w_eff = max(w, 1e-6) with NaN kept (torch.clamp's rule).
MF_HOST_DEVICE_INLINE float angleproto_w_eff(float w) { return w < kAngleProtoMinW ? kAngleProtoMinW : w; }

// f32 elements of the CUDA path's scratch (layout above); M does not enter.
inline std::int64_t angleproto_scratch_elems(std::int64_t n, std::int64_t d) {
  return 2 * n * d + 2 * n + 2 * n * n + 5 * n;
}

void angleproto_loss_cpu(const AngleProtoArgs& d, DType dtype, const void* emb, const float* wb,
                         const float* loss_scale, void* demb, float* dwb, float* sums, std::int32_t* counts,
                         float* step_loss, float* scratch, cudaStream_t stream);
void angleproto_loss_cuda(const AngleProtoArgs& d, DType dtype, const void* emb, const float* wb,
                          const float* loss_scale, void* demb, float* dwb, float* sums, std::int32_t* counts,
                          float* step_loss, float* scratch, cudaStream_t stream);

}  // namespace mf::kernels
