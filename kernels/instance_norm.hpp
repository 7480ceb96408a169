// instance_norm: PyTorch's InstanceNorm1d(n_mels) (affine False,
// track_running_stats False, eps 1e-5) applied to the input features
// x [B, mels, frames] (melforge's [B, mels, frames, 1] nhwc is the same
// memory): every (b, mel) row of `frames` contiguous values is normalised on
// its own,
//   mean = sum_t x_t / frames,  var = sum_t (x_t - mean)^2 / frames  (biased)
//   y_t  = (x_t - mean) / sqrt(var + 1e-5)
// Forward only (the input needs no gradient); inference and training alike.
// frames = 1 gives y = 0 (PyTorch's module refuses a single frame when
// training; the formula is still defined).
// Precision: T in/out (f32, bf16, f16), f32 statistics with the accurate
// two-pass form (the mean first, then the squared deviations), both in
// coordinates shifted by the row's first value x_0 (mean - x_0 = mean(x_t - x_0),
// deviations (x_t - x_0) - (mean - x_0)) so a large row offset costs no
// digits; one rounding on store. y may be x (in place): each row is read completely before it is
// written. NaN in a row makes that row NaN. Deterministic: fixed-order sums
// (CPU: in frame order, rows split over threads; GPU: one warp per row, lanes
// striding over frames, a fixed shuffle tree).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/dtype.hpp"

namespace mf::kernels {

inline constexpr float kInstanceNormEps = 1e-5f;

struct InstanceNormDims {
  std::int64_t rows = 1;  // B * mels
  int frames = 1;         // the normalised (contiguous) axis
};

void instance_norm_cpu(const InstanceNormDims& d, DType dtype, const void* x, void* y, cudaStream_t stream);
void instance_norm_cuda(const InstanceNormDims& d, DType dtype, const void* x, void* y, cudaStream_t stream);

}  // namespace mf::kernels
