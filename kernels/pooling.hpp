// The CNN stack's pooling and elementwise ops (dispatch: kernels/ops.hpp):
// max pool, global average pool, squeeze-excitation's channel gate and an
// in-place add. Activations are nhwc [N, H, W, C] in T (f32, bf16 or f16);
// every value is read as f32, computed in f32 and rounded to T once on store.
//
// max_pool (p x p windows, stride p, floor: PH = H / p, PW = W / p; the rows
//   and columns past PH*p, PW*p belong to no window):
//   x    [N, H, W, C]   T
//   y    [N, PH, PW, C] T, the window's maximum. Ties go to the first element
//        in row-major order; NaN wins over any number and a later NaN over an
//        earlier one (PyTorch's max_pool2d: `v > best || isnan(v)`).
//   code [N, PH, PW, C] u8, the winner's position dy*p + dx in its window (so
//        p <= 15), or null (no backward follows).
//   backward: dx [N, H, W, C] T fully overwritten: dy at each window's
//   winner, 0 elsewhere (also in the floor's dropped rows and columns).
//
// global_avg_pool: y [N, C] = the mean of x over H and W: the f32 sum over the
//   H*W positions in the fixed order below, divided by H*W, rounded to T.
//   backward: dx [N, H, W, C] = dy[n, c] / (H*W), broadcast (T).
//
// channel_gate (squeeze-excitation's scale with the residual block's epilogue):
//   y = act(x * s + residual), s = sigmoid(g), g [N, C] logits in T,
//   residual [N, H, W, C] T or null, act = ReLU or identity. ReLU keeps NaN.
//   backward: with relu, dy is first overwritten in place by dy where y > 0
//   and 0 elsewhere (also where y is NaN); then dx = dy * s (T) and
//   dg[n, c] = (sum over H, W of dy * x) * s * (1 - s), rounded to g's dtype.
//   1 - s is computed as sigmoid(-g): no cancellation for large g.
//   The residual's gradient is dy itself (after the mask).
//   y (the forward's output) is read only with relu; without it the dispatch
//   accepts an undefined y.
//
// add_inplace (ops::accumulate): dst[i] = dst[i] + src[i] in f32, rounded once to T.
//
// The fixed reduction order (global_avg_pool's sum and channel_gate's dg):
//   position i of the H*W positions goes to partial sum i % kPoolLanes, each
//   partial accumulates its positions in increasing order, and the partials
//   are added in order 0, 1, ..., kPoolLanes-1. The CPU twin and the CUDA
//   kernel (one block per (sample, tile of kPoolChannelTile channels), one
//   thread per (channel, lane)) share it, so the sums do not depend on the
//   thread count (and the average pool's bits agree between CPU and GPU).
//
// Sigmoid is evaluated without overflow for any |g|: 1 / (1 + exp(-g)) for
// g >= 0, exp(g) / (1 + exp(g)) otherwise; NaN gives NaN.
// Deterministic: no atomics; the same inputs give the same bits every run.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>

#include "engine/dtype.hpp"
#include "engine/host_device.hpp"

namespace mf::kernels {

inline constexpr int kPoolLanes = 8;
inline constexpr int kPoolChannelTile = 32;
inline constexpr int kMaxPoolMaxWindow = 15;  // p * p - 1 must fit in the u8 code

struct PoolingDims {
  std::int64_t n = 1;
  int h = 1, w = 1, c = 1;
  constexpr std::int64_t hw() const { return std::int64_t(h) * w; }
  constexpr std::int64_t numel() const { return n * hw() * c; }
};

MF_HOST_DEVICE inline float pool_exp_f(float v) {
#ifdef __CUDA_ARCH__
  return expf(v);
#else
  return std::exp(v);
#endif
}

MF_HOST_DEVICE inline float stable_sigmoid(float g) {
  if (g >= 0.f) return 1.f / (1.f + pool_exp_f(-g));
  const float e = pool_exp_f(g);  // NaN lands here too and stays NaN
  return e / (1.f + e);
}

// dg from the reduced sum over H, W of dy * x: sum * sigmoid'(g), with
// sigmoid'(g) = s * (1 - s) evaluated as sigmoid(g) * sigmoid(-g).
MF_HOST_DEVICE inline float channel_gate_dg(float sum, float g) {
  return sum * (stable_sigmoid(g) * stable_sigmoid(-g));
}

void max_pool_forward_cpu(const PoolingDims& d, int pool, DType dtype, const void* x, void* y,
                          std::uint8_t* code, cudaStream_t stream);
void max_pool_backward_cpu(const PoolingDims& d, int pool, DType dtype, const void* dy,
                           const std::uint8_t* code, void* dx, cudaStream_t stream);
void global_avg_pool_forward_cpu(const PoolingDims& d, DType dtype, const void* x, void* y, cudaStream_t stream);
void global_avg_pool_backward_cpu(const PoolingDims& d, DType dtype, const void* dy, void* dx, cudaStream_t stream);
void channel_gate_forward_cpu(const PoolingDims& d, bool relu, DType dtype, const void* x, const void* g,
                              const void* residual, void* y, cudaStream_t stream);
void channel_gate_backward_cpu(const PoolingDims& d, bool relu, DType dtype, const void* x, const void* g,
                               const void* y, void* dy, void* dx, void* dg, cudaStream_t stream);
void add_inplace_cpu(std::int64_t n, DType dtype, const void* src, void* dst, cudaStream_t stream);

void max_pool_forward_cuda(const PoolingDims& d, int pool, DType dtype, const void* x, void* y,
                           std::uint8_t* code, cudaStream_t stream);
void max_pool_backward_cuda(const PoolingDims& d, int pool, DType dtype, const void* dy,
                            const std::uint8_t* code, void* dx, cudaStream_t stream);
void global_avg_pool_forward_cuda(const PoolingDims& d, DType dtype, const void* x, void* y, cudaStream_t stream);
void global_avg_pool_backward_cuda(const PoolingDims& d, DType dtype, const void* dy, void* dx, cudaStream_t stream);
void channel_gate_forward_cuda(const PoolingDims& d, bool relu, DType dtype, const void* x, const void* g,
                               const void* residual, void* y, cudaStream_t stream);
void channel_gate_backward_cuda(const PoolingDims& d, bool relu, DType dtype, const void* x, const void* g,
                                const void* y, void* dy, void* dx, void* dg, cudaStream_t stream);
void add_inplace_cuda(std::int64_t n, DType dtype, const void* src, void* dst, cudaStream_t stream);

}  // namespace mf::kernels
