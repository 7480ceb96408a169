// attentive_pool on the GPU (kernels/attentive_pool.hpp), variant 1: simple
// kernels, f32 accumulation, every reduction in a fixed order (no atomics).
//   forward: one block per sample walks the frames t in order. For each t it
//     pools x over H into shared memory (threads over c), computes
//     h = tanh(w xm_t + b) (a warp per unit a, lanes over c, butterfly
//     shuffle sum), e_t = v . h_t (block tree sum), and folds the frame into
//     an online softmax: running max m, running weight sum S, and per channel
//     the weighted mean and sum of squared deviations (West's weighted
//     update), the weights rescaled by exp(m_old - m_new) when the max grows.
//     So nothing of size W is kept on chip and the inference forward (no
//     saved buffer) needs no workspace; with saved, alpha = exp(e - m) / S is
//     written at the end.
//   backward: (1) one block per sample: mu's and var's gradients, dL/dalpha
//     up to a constant (a warp per frame; centred, as attentive_pool.hpp says), the softmax's backward, dz = de v (1 - h^2), the
//     sample's db and dv partials, and dx (threads over (t, c), looping over
//     a, broadcast over H); (2) dw partials, one 32x32 tile of [A, C] per
//     block and row group (rows = (n, t), staged through shared memory);
//     (3) dw = the sum of the group partials in group order; db and dv = the
//     sum over samples of the partials, one block per output (tree sum).
// Shared memory: forward (3C + A) floats, backward 2C floats (dynamic).
#include <cmath>
#include <string>

#include "engine/error.hpp"
#include "kernels/attentive_pool.hpp"
#include "kernels/block_reduce.cuh"
#include "kernels/cuda_types.cuh"
#include "kernels/launch.cuh"

namespace mf::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 32;  // the dw tile: kTile x kTile outputs, kTile rows per stage
constexpr std::size_t kMaxDynamicSmem = 48 * 1024;

using cuda::Add;
using cuda::block_reduce;
using cuda::load_f32;
using cuda::store_f32;
using cuda::warp_sum;

template <class T>
__global__ void __launch_bounds__(kThreads)
    attentive_pool_forward_kernel(AttentivePoolDims d, AttentivePoolSaved L, const T* __restrict__ x,
                                  const T* __restrict__ w, const T* __restrict__ b, const T* __restrict__ v,
                                  T* __restrict__ y, float* __restrict__ saved) {
  extern __shared__ float smem[];
  __shared__ float red[kThreads];
  const int H = d.h, W = d.w, C = d.c, A = d.a;
  float* xs = smem;          // [C] the frame pooled over H
  float* hs = xs + C;        // [A] its tanh activations
  float* mean = hs + A;      // [C] the running weighted mean of xm (the mu so far)
  float* m2 = mean + C;      // [C] sum_t p_t (xm_t - mean)^2, scaled to the running max
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const std::int64_t n = blockIdx.x;
  for (int c = tid; c < C; c += kThreads) mean[c] = m2[c] = 0.f;
  float m = -INFINITY, s = 0.f;
  for (int t = 0; t < W; ++t) {
    for (int c = tid; c < C; c += kThreads) {
      float sum = 0.f;
      for (int hb = 0; hb < H; ++hb) sum += load_f32(x[((n * H + hb) * W + t) * C + c]);
      const float xv = sum / float(H);
      xs[c] = xv;
      if (saved) saved[L.xm + (n * W + t) * C + c] = xv;
    }
    __syncthreads();
    for (int a = warp; a < A; a += kWarps) {
      float z = 0.f;
      for (int c = lane; c < C; c += 32) z += load_f32(w[std::int64_t(a) * C + c]) * xs[c];
      z = warp_sum(z);
      if (lane == 0) {
        const float hv = tanhf(z + load_f32(b[a]));
        hs[a] = hv;
        if (saved) saved[L.h + (n * W + t) * A + a] = hv;
      }
    }
    __syncthreads();
    float part = 0.f;
    for (int a = tid; a < A; a += kThreads) part += load_f32(v[a]) * hs[a];
    const float e = block_reduce<kThreads>(part, red, Add{});
    const float m_new = e > m ? e : m;
    const float scale = expf(m - m_new), p = expf(e - m_new);
    s = s * scale + p;
    m = m_new;
    const float frac = p / s;  // the new frame's share of the weight so far
    for (int c = tid; c < C; c += kThreads) {  // xs[c] was written by this thread
      const float delta = xs[c] - mean[c];
      mean[c] += delta * frac;
      m2[c] = m2[c] * scale + p * delta * (xs[c] - mean[c]);
    }
    if (saved && tid == 0) saved[L.alpha + n * W + t] = e;  // the score; alpha below
  }
  __syncthreads();
  if (saved)
    for (int t = tid; t < W; t += kThreads) {
      float* al = saved + L.alpha + n * W + t;
      *al = expf(*al - m) / s;
    }
  const int OC = d.out_c();
  for (int c = tid; c < C; c += kThreads) {
    const float mu = mean[c];
    y[n * OC + c] = store_f32<T>(mu);
    if (saved) saved[L.mu + n * C + c] = mu;
    if (d.stats) {
      const float var = m2[c] / s;
      if (saved) saved[L.var + n * C + c] = var;
      y[n * OC + C + c] = store_f32<T>(sqrtf(var < kAttentivePoolVarFloor ? kAttentivePoolVarFloor : var));
    }
  }
}

// One block per sample: everything of the backward that stays in the sample.
template <class T>
__global__ void __launch_bounds__(kThreads)
    attentive_pool_backward_sample_kernel(AttentivePoolDims d, AttentivePoolSaved L, const T* __restrict__ w,
                                          const T* __restrict__ v, float* __restrict__ saved,
                                          const T* __restrict__ dy, T* __restrict__ dx) {
  extern __shared__ float smem[];
  __shared__ float red[kThreads];
  const int H = d.h, W = d.w, C = d.c, A = d.a, OC = d.out_c();
  float* gm = smem;      // [C] mu's gradient
  float* dvar = gm + C;  // [C] var's gradient (0 where clamped)
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const std::int64_t n = blockIdx.x;
  const float* xm = saved + L.xm + n * W * C;
  const float* hh = saved + L.h + n * W * A;
  const float* alpha = saved + L.alpha + n * W;
  float* de = saved + L.de + n * W;
  float* dz = saved + L.dz + n * W * A;
  for (int c = tid; c < C; c += kThreads) {
    const float gmu = load_f32(dy[n * OC + c]);
    float dv = 0.f;
    if (d.stats) {
      const float vr = saved[L.var + n * C + c];
      const float sg = sqrtf(vr < kAttentivePoolVarFloor ? kAttentivePoolVarFloor : vr);
      dv = vr < kAttentivePoolVarFloor ? 0.f : load_f32(dy[n * OC + C + c]) / (2.f * sg);
    }
    dvar[c] = dv;
    gm[c] = gmu;
  }
  __syncthreads();
  const float* mu = saved + L.mu + n * C;
  for (int t = warp; t < W; t += kWarps) {  // dL/dalpha_t up to a constant (centred on mu)
    float p = 0.f;
    for (int c = lane; c < C; c += 32) {
      const float xv = xm[std::int64_t(t) * C + c];
      const float dc = xv - mu[c];
      p += dc * (gm[c] + dvar[c] * dc);
    }
    p = warp_sum(p);
    if (lane == 0) de[t] = p;
  }
  __syncthreads();
  float part = 0.f;
  for (int t = tid; t < W; t += kThreads) part += alpha[t] * de[t];
  const float dot = block_reduce<kThreads>(part, red, Add{});
  for (int t = tid; t < W; t += kThreads) de[t] = alpha[t] * (de[t] - dot);
  __syncthreads();
  for (std::int64_t i = tid; i < std::int64_t(W) * A; i += kThreads) {
    const float hv = hh[i];
    dz[i] = de[i / A] * load_f32(v[i % A]) * (1.f - hv * hv);
  }
  __syncthreads();
  for (int a = tid; a < A; a += kThreads) {
    float sb = 0.f, sv = 0.f;
    for (int t = 0; t < W; ++t) {
      sb += dz[std::int64_t(t) * A + a];
      sv += de[t] * hh[std::int64_t(t) * A + a];
    }
    saved[L.dbv + n * 2 * A + a] = sb;
    saved[L.dbv + n * 2 * A + A + a] = sv;
  }
  for (std::int64_t i = tid; i < std::int64_t(W) * C; i += kThreads) {
    const std::int64_t t = i / C;
    const int c = int(i % C);
    float g = 0.f;
    for (int a = 0; a < A; ++a) g += dz[t * A + a] * load_f32(w[std::int64_t(a) * C + c]);
    g += alpha[t] * (gm[c] + 2.f * (xm[i] - mu[c]) * dvar[c]);
    const T gv = store_f32<T>(g / float(H));
    for (int hb = 0; hb < H; ++hb) dx[((n * H + hb) * W + t) * C + c] = gv;
  }
}

// dwp[g, a, c] = sum over the rows r of group g (in order, kTile at a time) of
// dz[r, a] xm[r, c]; a block per (c tile, a tile, group), 2 x 2 outputs per thread.
__global__ void __launch_bounds__(kThreads)
    attentive_pool_dw_partial_kernel(std::int64_t rows, int A, int C, int groups, const float* __restrict__ dz,
                                     const float* __restrict__ xm, float* __restrict__ dwp) {
  __shared__ float sdz[kTile][kTile + 1], sxm[kTile][kTile + 1];
  const int tid = int(threadIdx.x), tx = tid % 16, ty = tid / 16;
  const int a0 = int(blockIdx.y) * kTile, c0 = int(blockIdx.x) * kTile, g = int(blockIdx.z);
  const std::int64_t r0 = rows * g / groups, r1 = rows * (g + 1) / groups;
  float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
  for (std::int64_t r = r0; r < r1; r += kTile) {
    for (int k = 0; k < kTile * kTile / kThreads; ++k) {
      const int e = tid + k * kThreads, rr = e / kTile, cc = e % kTile;
      const std::int64_t row = r + rr;
      sdz[rr][cc] = row < r1 && a0 + cc < A ? dz[row * A + a0 + cc] : 0.f;
      sxm[rr][cc] = row < r1 && c0 + cc < C ? xm[row * C + c0 + cc] : 0.f;
    }
    __syncthreads();
    for (int k = 0; k < kTile; ++k)
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) acc[i][j] += sdz[k][ty + 16 * i] * sxm[k][tx + 16 * j];
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      const int a = a0 + ty + 16 * i, c = c0 + tx + 16 * j;
      if (a < A && c < C) dwp[(std::int64_t(g) * A + a) * C + c] = acc[i][j];
    }
}

__global__ void attentive_pool_dw_sum_kernel(std::int64_t elems, int groups, const float* __restrict__ dwp,
                                             float* __restrict__ dw) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < elems;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    float s = 0.f;
    for (int g = 0; g < groups; ++g) s += dwp[std::int64_t(g) * elems + i];
    dw[i] = s;
  }
}

// Block j < A: db[j]; block A + j: dv[j]; each the sum over samples of dbv[n, j].
__global__ void __launch_bounds__(kThreads)
    attentive_pool_dbv_sum_kernel(std::int64_t n_samples, int A, const float* __restrict__ dbv,
                                  float* __restrict__ db, float* __restrict__ dv) {
  __shared__ float red[kThreads];
  const int j = int(blockIdx.x);
  float part = 0.f;
  for (std::int64_t n = threadIdx.x; n < n_samples; n += kThreads) part += dbv[n * 2 * A + j];
  const float s = block_reduce<kThreads>(part, red, Add{});
  if (threadIdx.x == 0) (j < A ? db[j] : dv[j - A]) = s;
}

template <class T>
void forward_typed(const AttentivePoolDims& d, const void* x, const void* w, const void* b, const void* v, void* y,
                   float* saved, cudaStream_t stream) {
  const std::size_t smem = std::size_t(3 * std::int64_t(d.c) + d.a) * sizeof(float);
  const AttentivePoolSaved L = attentive_pool_saved_layout(d.n, d.w, d.c, d.a, d.stats);
  attentive_pool_forward_kernel<T><<<unsigned(d.n), kThreads, smem, stream>>>(
      d, L, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b), static_cast<const T*>(v),
      static_cast<T*>(y), saved);
  MF_CUDA_CHECK_LAUNCH();
}

template <class T>
void backward_typed(const AttentivePoolDims& d, const void* w, const void* v, float* saved, const void* dy, void* dx,
                    float* dw, float* db, float* dv, cudaStream_t stream) {
  const AttentivePoolSaved L = attentive_pool_saved_layout(d.n, d.w, d.c, d.a, d.stats);
  if (d.n > 0) {
    const std::size_t smem = std::size_t(2 * std::int64_t(d.c)) * sizeof(float);
    attentive_pool_backward_sample_kernel<T><<<unsigned(d.n), kThreads, smem, stream>>>(
        d, L, static_cast<const T*>(w), static_cast<const T*>(v), saved, static_cast<const T*>(dy), static_cast<T*>(dx));
    MF_CUDA_CHECK_LAUNCH();
  }
  const dim3 tiles(cuda::blocks_for(d.c, kTile), cuda::blocks_for(d.a, kTile), unsigned(L.groups));
  attentive_pool_dw_partial_kernel<<<tiles, kThreads, 0, stream>>>(d.n * d.w, d.a, d.c, L.groups, saved + L.dz,
                                                                   saved + L.xm, saved + L.dwp);
  MF_CUDA_CHECK_LAUNCH();
  const std::int64_t elems = std::int64_t(d.a) * d.c;
  attentive_pool_dw_sum_kernel<<<cuda::grid_for(elems, kThreads), kThreads, 0, stream>>>(elems, L.groups,
                                                                                         saved + L.dwp, dw);
  MF_CUDA_CHECK_LAUNCH();
  attentive_pool_dbv_sum_kernel<<<unsigned(2 * d.a), kThreads, 0, stream>>>(d.n, d.a, saved + L.dbv, db, dv);
  MF_CUDA_CHECK_LAUNCH();
}

// fmt is not available to nvcc: messages are built with std::to_string.
void check_limits(const AttentivePoolDims& d) {
  const std::int64_t floats = 3 * std::int64_t(d.c) + d.a;
  if (std::size_t(floats) * sizeof(float) > kMaxDynamicSmem)
    detail::throw_error(__FILE__, __LINE__,
                        "attentive_pool (CUDA): expected 3C + A <= " + std::to_string(kMaxDynamicSmem / sizeof(float)) +
                            " (floats of shared memory per block), found C=" + std::to_string(d.c) +
                            " A=" + std::to_string(d.a));
  if (d.n > 0x7fffffff)
    detail::throw_error(__FILE__, __LINE__,
                        "attentive_pool (CUDA): expected at most 2^31 - 1 samples (one block each), found " +
                            std::to_string(d.n));
}

[[noreturn]] void bad_dtype(DType t) {
  detail::throw_error(__FILE__, __LINE__, "attentive_pool: unsupported dtype " + std::string(dtype_name(t)));
}

}  // namespace

void attentive_pool_forward_cuda(const AttentivePoolDims& d, DType dtype, const void* x, const void* w,
                                 const void* b, const void* v, void* y, float* saved, cudaStream_t stream) {
  check_limits(d);
  if (d.n == 0) return;
  switch (dtype) {
    case DType::f32: return forward_typed<float>(d, x, w, b, v, y, saved, stream);
    case DType::f16: return forward_typed<__half>(d, x, w, b, v, y, saved, stream);
    case DType::bf16: return forward_typed<__nv_bfloat16>(d, x, w, b, v, y, saved, stream);
    default: break;
  }
  bad_dtype(dtype);
}

void attentive_pool_backward_cuda(const AttentivePoolDims& d, DType dtype, const void* w, const void* v,
                                  float* saved, const void* dy, void* dx, float* dw, float* db, float* dv,
                                  cudaStream_t stream) {
  check_limits(d);
  switch (dtype) {
    case DType::f32: return backward_typed<float>(d, w, v, saved, dy, dx, dw, db, dv, stream);
    case DType::f16: return backward_typed<__half>(d, w, v, saved, dy, dx, dw, db, dv, stream);
    case DType::bf16: return backward_typed<__nv_bfloat16>(d, w, v, saved, dy, dx, dw, db, dv, stream);
    default: break;
  }
  bad_dtype(dtype);
}

}  // namespace mf::kernels
