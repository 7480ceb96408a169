// batch_norm: batch normalisation over all rows of an nhwc activation, per
// channel, with the residual block's epilogue (optional residual add, ReLU):
//   y = act(gamma * (x - mean) * invstd + beta + residual)
//
// Layouts (row-major; the dispatch in kernels/ops.hpp flattens x [..., C]):
//   x, y, residual  [M, C]  T   (M = N*H*W rows of C contiguous channels)
//   gamma, beta     [C]     T   (the working copy of the parameters)
//   running_mean/var, save_mean, save_invstd, dgamma, dbeta  [C]  f32
//   dy, dx          [M, C]  T
// Training forward: mean and the biased variance of the M rows (f32, fixed
// order), invstd = 1 / sqrt(var + eps), kept in save_mean / save_invstd for
// the backward; running_mean/var updated in place as PyTorch's BatchNorm2d
// does: r = (1 - momentum) r + momentum s, with the unbiased variance
// var * M / (M - 1) for running_var (so M >= 2). Eval forward: the same
// epilogue with running_mean and running_var in place of the batch's.
// Backward (of the training forward): with relu, dy is first overwritten by
// dy * (y > 0) (0 where y is not > 0, NaN in y included, like PyTorch's ReLU
// gradient; exact in T); then, with xhat = (x - save_mean) * save_invstd,
//   dbeta = sum_rows dy, dgamma = sum_rows dy * xhat  (f32, overwritten)
//   dx = gamma * invstd * (dy - dbeta / M - xhat * dgamma / M)
// The masked dy is also the residual's gradient.
// y may be x itself or the residual itself (in place), and dx may be dy
// itself: every element is read before the same thread writes it.
//
// Accuracy: the variance is never E[x^2] - E[x]^2 (which cancels): the CPU
// takes two passes over blocks of 64 rows held in cache and merges blocks with
// Chan's formula; the GPU runs Welford per thread and merges with Chan's
// formula; both on x minus row 0 of x (a shift of the order of the spread),
// so they stay accurate for data with a large mean (log-mel values around
// -40 dB with a std of 5). What remains is the f32 rounding of save_mean
// itself: ulp(mean) / std bounds xhat's error (3e-5 at 1000 +- 1).
// Determinism: the rows are cut into fixed chunks that depend only on M (never
// on the thread count or the GPU), each chunk's per-channel partials are
// written to scratch, and the partials are merged in chunk order; no atomics.
// The GPU's partials live in a caller-owned f32 scratch of
// batch_norm_scratch_elems(M, C) elements (so the op allocates nothing inside
// a CUDA graph capture); the CPU twin ignores `scratch` (may be null).
// T is f32, bf16 or f16; f32 accumulation; each output rounded once.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/dtype.hpp"

namespace mf::kernels {

struct BatchNormArgs {
  std::int64_t m = 0;    // rows (N*H*W)
  int c = 1;             // channels
  float eps = 1e-5f;
  float momentum = 0.1f; // training forward only
  bool relu = false;
};

// The GPU's row chunks: at least kBatchNormMinChunkRows rows each, at most
// kBatchNormMaxChunks chunks (one block of partials per chunk and 32 channels).
inline constexpr std::int64_t kBatchNormMinChunkRows = 64;
inline constexpr std::int64_t kBatchNormMaxChunks = 1024;
inline std::int64_t batch_norm_chunk_rows(std::int64_t m) {
  const std::int64_t r = (m + kBatchNormMaxChunks - 1) / kBatchNormMaxChunks;
  return r > kBatchNormMinChunkRows ? r : kBatchNormMinChunkRows;
}
inline std::int64_t batch_norm_chunks(std::int64_t m) {
  const std::int64_t r = batch_norm_chunk_rows(m);
  return m > 0 ? (m + r - 1) / r : 1;
}
// f32 elements of scratch the CUDA training forward and backward need (two
// partials per chunk and channel); one buffer serves every call of that size.
inline std::int64_t batch_norm_scratch_elems(std::int64_t m, std::int64_t c) {
  return 2 * batch_norm_chunks(m) * c;
}

void batch_norm_train_forward_cpu(const BatchNormArgs& d, DType dtype, const void* x, const void* gamma,
                                  const void* beta, const void* residual, float* running_mean, float* running_var,
                                  float* save_mean, float* save_invstd, void* y, float* scratch,
                                  cudaStream_t stream);
void batch_norm_eval_forward_cpu(const BatchNormArgs& d, DType dtype, const void* x, const void* gamma,
                                 const void* beta, const void* residual, const float* running_mean,
                                 const float* running_var, void* y, cudaStream_t stream);
void batch_norm_backward_cpu(const BatchNormArgs& d, DType dtype, const void* x, const void* gamma,
                             const float* save_mean, const float* save_invstd, const void* y, void* dy, void* dx,
                             float* dgamma, float* dbeta, float* scratch, cudaStream_t stream);

void batch_norm_train_forward_cuda(const BatchNormArgs& d, DType dtype, const void* x, const void* gamma,
                                   const void* beta, const void* residual, float* running_mean, float* running_var,
                                   float* save_mean, float* save_invstd, void* y, float* scratch,
                                   cudaStream_t stream);
void batch_norm_eval_forward_cuda(const BatchNormArgs& d, DType dtype, const void* x, const void* gamma,
                                  const void* beta, const void* residual, const float* running_mean,
                                  const float* running_var, void* y, cudaStream_t stream);
void batch_norm_backward_cuda(const BatchNormArgs& d, DType dtype, const void* x, const void* gamma,
                              const float* save_mean, const float* save_invstd, const void* y, void* dy, void* dx,
                              float* dgamma, float* dbeta, float* scratch, cudaStream_t stream);

}  // namespace mf::kernels
