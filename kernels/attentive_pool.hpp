// attentive_pool: self-attentive (statistics) pooling over time, the pooling of
// the ResNetSE34L / ResNetSE34V2 speaker models (voxceleb_trainer's SAP and
// ASP), forward and backward.
//
// Per sample n (H mel bands, W frames, C channels, A attention units):
//   xm[t, c] = (1/H) sum_h x[n, h, t, c]
//   h[t, a]  = tanh(b[a] + sum_c w[a, c] xm[t, c])
//   e[t]     = sum_a v[a] h[t, a]
//   alpha    = softmax_t(e)                      (stable: max subtracted)
//   mu[c]    = sum_t alpha[t] xm[t, c]
//   var[c]   = sum_t alpha[t] xm[t, c]^2 - mu[c]^2     (computed centred, below)
//   sigma[c] = sqrt(max(var[c], 1e-5))           (with stats; the clamp's
//              gradient is zero where var < 1e-5, as torch.clamp's)
//   y[n]     = mu, or (mu, sigma) concatenated   ([N, C] or [N, 2C])
//
// Layouts (row-major):
//   x   [N, H, W, C]   T (nhwc)      dx  x's shape, T, overwritten
//   w   [A, C]         T             dw  [A, C] f32, overwritten
//   b   [A]            T             db  [A]    f32, overwritten
//   v   [A]            T             dv  [A]    f32, overwritten
//   y   [N, C or 2C]   T             dy  y's shape, T (read only)
//   saved f32 [attentive_pool_saved_elems(N, W, C, A, stats)], regions as in
//   AttentivePoolSaved. The forward writes xm, h, alpha, mu and var (var only
//   with stats); the forward may get no saved buffer (inference). The backward
//   reads those and uses the rest (de .. dwp) as its scratch: the op runs
//   inside CUDA graph captures, so it allocates nothing.
// Precision: T operands (f32, bf16, f16) read as f32, everything computed and
// accumulated in f32, y and dx rounded once to T; the saved values and the
// parameter gradients are f32.
// Numerics: var is computed centred, sum_t alpha_t (xm[t,c] - mu[c])^2 (equal
// to the formula above; q - mu^2 loses most digits when the features have a
// large mean). Likewise in the backward: the softmax's backward,
// de_t = alpha_t (g_t - sum_s alpha_s g_s), is blind to a constant added to
// every g_t = dL/dalpha_t, so g_t is taken centred,
//   g_t = sum_c d[t,c] (gmu[c] + gvar[c] d[t,c]),  d = xm - mu
// (gmu, gvar: mu's and var's gradients), and dxm gets alpha_t (gmu + 2 gvar d).
// Determinism: every sum has a fixed order (no floating-point atomics). dw,
// db and dv are reductions over N and t: per-sample (or per-row-group)
// partials, then a fixed-order sum of the partials. The CPU twin gives the same
// bits for any thread count. NaN propagates (the clamp keeps a NaN variance).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/dtype.hpp"
#include "engine/host_device.hpp"

namespace mf::kernels {

inline constexpr float kAttentivePoolVarFloor = 1e-5f;  // the variance clamp of ASP

struct AttentivePoolDims {
  std::int64_t n = 1;  // samples
  int h = 1;           // mel bands (averaged)
  int w = 1;           // frames (the softmax's axis)
  int c = 1;           // channels
  int a = 1;           // attention units
  bool stats = false;  // y = (mu, sigma) instead of mu
  MF_HOST_DEVICE int out_c() const { return stats ? 2 * c : c; }
};

// The backward's dw is reduced over the N*W rows in `groups` contiguous row
// ranges (a partial [A, C] each, then summed over the groups in order): at
// most kAttentivePoolMaxGroups, about kAttentivePoolRowsPerGroup rows each.
inline constexpr std::int64_t kAttentivePoolRowsPerGroup = 256;
inline constexpr int kAttentivePoolMaxGroups = 64;
inline int attentive_pool_dw_groups(std::int64_t rows) {
  const std::int64_t g = (rows + kAttentivePoolRowsPerGroup - 1) / kAttentivePoolRowsPerGroup;
  return int(g < 1 ? 1 : (g > kAttentivePoolMaxGroups ? kAttentivePoolMaxGroups : g));
}

// Offsets (in floats) of the regions of `saved`, in this order:
//   xm    [N, W, C]   the time series pooled over H        (forward)
//   h     [N, W, A]   tanh(w xm + b)                         (forward)
//   alpha [N, W]      the softmax weights                    (forward)
//   mu    [N, C]                                             (forward)
//   var   [N, C]      the unclamped variance, stats only     (forward)
//   de    [N, W]      dL/de                                  (backward scratch)
//   dz    [N, W, A]   dL/d(w xm + b)                         (backward scratch)
//   dbv   [N, 2A]     per-sample partials of db, then of dv  (backward scratch)
//   dwp   [G, A, C]   per-row-group partials of dw, G = attentive_pool_dw_groups(N*W)
struct AttentivePoolSaved {
  std::int64_t xm = 0, h = 0, alpha = 0, mu = 0, var = 0, de = 0, dz = 0, dbv = 0, dwp = 0, total = 0;
  int groups = 1;
};

inline AttentivePoolSaved attentive_pool_saved_layout(std::int64_t n, int w, int c, int a, bool stats) {
  AttentivePoolSaved s;
  const std::int64_t rows = n * w;
  s.groups = attentive_pool_dw_groups(rows);
  s.xm = 0;
  s.h = s.xm + rows * c;
  s.alpha = s.h + rows * a;
  s.mu = s.alpha + rows;
  s.var = s.mu + n * c;
  s.de = s.var + (stats ? n * c : 0);
  s.dz = s.de + rows;
  s.dbv = s.dz + rows * a;
  s.dwp = s.dbv + n * 2 * a;
  s.total = s.dwp + std::int64_t(s.groups) * a * c;
  return s;
}

// The number of f32 elements `saved` must hold.
inline std::int64_t attentive_pool_saved_elems(std::int64_t n, int w, int c, int a, bool stats) {
  return attentive_pool_saved_layout(n, w, c, a, stats).total;
}

// saved: null (inference) or the buffer above. CUDA: one block per sample
// needs (3C + A) floats of shared memory in the forward and 2C in the
// backward (at most 48 KiB; else mf::Error).
void attentive_pool_forward_cpu(const AttentivePoolDims& d, DType dtype, const void* x, const void* w,
                                const void* b, const void* v, void* y, float* saved, cudaStream_t stream);
void attentive_pool_backward_cpu(const AttentivePoolDims& d, DType dtype, const void* w, const void* v,
                                 float* saved, const void* dy, void* dx, float* dw, float* db, float* dv,
                                 cudaStream_t stream);

void attentive_pool_forward_cuda(const AttentivePoolDims& d, DType dtype, const void* x, const void* w,
                                 const void* b, const void* v, void* y, float* saved, cudaStream_t stream);
void attentive_pool_backward_cuda(const AttentivePoolDims& d, DType dtype, const void* w, const void* v,
                                  float* saved, const void* dy, void* dx, float* dw, float* db, float* dv,
                                  cudaStream_t stream);

}  // namespace mf::kernels
