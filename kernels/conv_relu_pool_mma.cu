// conv_relu_pool variant 3, "mma": BF16/FP16 implicit GEMM on tensor cores
// (mma.sync.m16n8k16, f32 accumulation; sm_80 and newer). Products of bf16/f16
// operands are exact in f32; sums are f32; outputs rounded once.
// Router: `automatic`'s choice for bf16/f16 after resident and cin1; runs when T is
// bf16/f16, k in {1, 3}, pool in {1, 2}, Cin and Cout multiples of 16,
// 16-byte aligned tensors and an sm_80+ GPU; anything else falls back to the
// tiled variant (Cin = 1, the input layer, always does).
//   mma_conv_kernel  forward (dx as the correlation of g with the flipped
//            weights): M = an 8 x 8 tile of conv pixels, N = 64 output
//            channels, K = k*k*Cin in 16-channel slices; 128 threads, warp w
//            owns tile rows 2w, 2w+1. Epilogue: + bias, ReLU, 2 x 2 max with
//            PyTorch's first-wins/NaN rule, y and the 1-byte code.
//   mma_dw_kernel    dw, db: M = 64 Cout, N = 64 Cin, K = the conv pixels of one
//            chunk (fixed rows, a function of the shape only), per (r, s); one
//            f32 partial per (chunk, co, r, s, ci) and db partials, summed by
//            launch_reduce_partials in chunk order. No atomics.
// Shared memory and bytes read per output: bench/NOTES.md, "Kernel lab notes".
#include <cuda_runtime.h>

#include <type_traits>

#include "engine/error.hpp"
#include "kernels/conv_relu_pool_cuda.cuh"
#include "kernels/cuda_types.cuh"
#include "kernels/mma.cuh"

namespace mf::kernels {

namespace {

constexpr int kT = 8;           // conv tile side
constexpr int kN = 64;          // output channels per block
constexpr int kKC = 16;         // reduction channels per slice
constexpr int kRow = kKC + 8;   // padded smem row (halves)
constexpr int kMaxK = 3;
constexpr int kHalo = kT + kMaxK - 1;

constexpr int kThreads = 128;  // 4 warps (the layout above)

enum class Mode { forward, dx };

using mma::load_b16x2;
using mma::mma_16816;

template <class D>
__device__ __forceinline__ float routed_grad(const ConvReluPoolDims& d, const D* __restrict__ dy,
                                             const std::uint8_t* __restrict__ code, std::int64_t n, int oh,
                                             int ow, int co) {
  const int p = d.pool, ph_n = d.ph(), pw_n = d.pw();
  if (oh < 0 || ow < 0 || oh >= ph_n * p || ow >= pw_n * p) return 0.f;
  const std::int64_t o = ((n * ph_n + oh / p) * pw_n + ow / p) * d.cout + co;
  return code[o] == std::uint8_t((oh % p) * p + ow % p) ? cuda::load_f32(dy[o]) : 0.f;
}

template <class D> struct Pair;
template <> struct Pair<__half> { using type = __half2; };
template <> struct Pair<__nv_bfloat16> { using type = __nv_bfloat162; };

template <class D>
__device__ __forceinline__ void store2(D* p, float a, float b) {
  typename Pair<D>::type v;
  v.x = cuda::store_f32<D>(a);
  v.y = cuda::store_f32<D>(b);
  *reinterpret_cast<typename Pair<D>::type*>(p) = v;
}

template <class D, int P, Mode M>
__global__ void __launch_bounds__(kThreads) mma_conv_kernel(ConvReluPoolDims d, const D* __restrict__ x,
                                                       const D* __restrict__ w, const D* __restrict__ b,
                                                       const D* __restrict__ dy,
                                                       const std::uint8_t* __restrict__ code_in,
                                                       D* __restrict__ out, std::uint8_t* __restrict__ code_out) {
  __shared__ __align__(16) D s_a[kHalo * kHalo][kRow];
  __shared__ __align__(16) D s_b[kMaxK * kMaxK][kN][kRow];

  const int k = d.k, pad = k / 2, halo = kT + k - 1;
  const int in_c = M == Mode::forward ? d.cin : d.cout;
  const int out_c = M == Mode::forward ? d.cout : d.cin;
  const int oh_n = M == Mode::forward ? d.ph() * P : d.h;
  const int ow_n = M == Mode::forward ? d.pw() * P : d.w;
  const int tiles_x = (ow_n + kT - 1) / kT, tiles_y = (oh_n + kT - 1) / kT;
  const std::int64_t n = blockIdx.x / (tiles_x * tiles_y);
  const int tile = int(blockIdx.x % (tiles_x * tiles_y));
  const int oh0 = (tile / tiles_x) * kT, ow0 = (tile % tiles_x) * kT;
  const int n0 = blockIdx.y * kN;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;

  float acc[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.f;

  for (int c0 = 0; c0 < in_c; c0 += kKC) {
    if constexpr (M == Mode::forward) {
      // Halo: 16 channels = two 16-byte vectors per pixel.
      for (int e = tid; e < halo * halo * 2; e += kThreads) {
        const int pix = e / 2, part = e % 2;
        const int ih = oh0 - pad + pix / halo, iw = ow0 - pad + pix % halo;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (ih >= 0 && ih < d.h && iw >= 0 && iw < d.w)
          v = *reinterpret_cast<const uint4*>(x + ((n * d.h + ih) * d.w + iw) * d.cin + c0 + part * 8);
        *reinterpret_cast<uint4*>(&s_a[pix][part * 8]) = v;
      }
      for (int e = tid; e < k * k * kN * 2; e += kThreads) {
        const int part = e % 2, o = (e / 2) % kN, rs = e / (2 * kN);
        uint4 v = make_uint4(0, 0, 0, 0);
        if (n0 + o < out_c)
          v = *reinterpret_cast<const uint4*>(w + (std::int64_t(n0 + o) * k * k + rs) * d.cin + c0 + part * 8);
        *reinterpret_cast<uint4*>(&s_b[rs][o][part * 8]) = v;
      }
    } else {
      for (int e = tid; e < halo * halo * kKC; e += kThreads) {
        const int c = e % kKC, pix = e / kKC;
        const int oh = oh0 - pad + pix / halo, ow = ow0 - pad + pix % halo;
        s_a[pix][c] = cuda::store_f32<D>(routed_grad(d, dy, code_in, n, oh, ow, c0 + c));
      }
      // B[r][s][co][ci] = w[co][k-1-r][k-1-s][ci]; o indexes ci (fastest, coalesced), c indexes co.
      for (int e = tid; e < k * k * kN * kKC; e += kThreads) {
        const int o = e % kN, c = (e / kN) % kKC, rs = e / (kN * kKC);
        const int r = rs / k, s = rs % k;
        D v = cuda::store_f32<D>(0.f);
        if (n0 + o < out_c) v = w[((std::int64_t(c0 + c) * k + (k - 1 - r)) * k + (k - 1 - s)) * d.cin + n0 + o];
        s_b[rs][o][c] = v;
      }
    }
    __syncthreads();
    for (int r = 0; r < k; ++r) {
      for (int s = 0; s < k; ++s) {
        const int p0 = (2 * warp + r) * halo + g + s, p1 = p0 + halo;  // tile rows 2w, 2w+1
        const std::uint32_t a[4] = {load_b16x2(&s_a[p0][2 * t]), load_b16x2(&s_a[p1][2 * t]),
                                    load_b16x2(&s_a[p0][2 * t + 8]), load_b16x2(&s_a[p1][2 * t + 8])};
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const D* bp = &s_b[r * k + s][j * 8 + g][2 * t];
          mma_16816<D>(acc[j], a, load_b16x2(bp), load_b16x2(bp + 8));
        }
      }
    }
    __syncthreads();
  }

  // acc[j][0..1]: tile pixel (row 2w, col g), channels n0 + 8j + 2t + {0,1};
  // acc[j][2..3]: tile pixel (row 2w + 1, col g), same channels.
  const int oh = oh0 + 2 * warp, ow = ow0 + g;
  if constexpr (M == Mode::forward) {
    const int ph_n = d.ph(), pw_n = d.pw();
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int co = n0 + j * 8 + 2 * t;
      const bool ch_ok = co < d.cout;  // cout % 16 == 0: co and co + 1 together
      const float b0 = ch_ok ? cuda::load_f32(b[co]) : 0.f, b1 = ch_ok ? cuda::load_f32(b[co + 1]) : 0.f;
      const float v[2][2] = {{acc[j][0] + b0, acc[j][1] + b1}, {acc[j][2] + b0, acc[j][3] + b1}};
      if constexpr (P == 2) {
        // Window (oh, ow) .. (oh+1, ow+1); even-g lanes own it, the odd column is lane ^ 4's.
        float other[2][2];
#pragma unroll
        for (int rr = 0; rr < 2; ++rr)
#pragma unroll
          for (int cc = 0; cc < 2; ++cc) other[rr][cc] = __shfl_xor_sync(0xffffffffu, v[rr][cc], 4);
        const int ph = oh / 2, pw = ow / 2;
        if ((g & 1) == 0 && ch_ok && ph < ph_n && pw < pw_n) {
          float res[2];
          std::uint8_t cd[2];
#pragma unroll
          for (int cc = 0; cc < 2; ++cc) {
            const float win[4] = {v[0][cc], other[0][cc], v[1][cc], other[1][cc]};
            float best = win[0];
            int bpos = 0;
#pragma unroll
            for (int i = 1; i < 4; ++i)
              if (win[i] > best || isnan(win[i])) {
                best = win[i];
                bpos = i;
              }
            const bool pass = best > 0.f || isnan(best);
            res[cc] = pass ? best : 0.f;
            cd[cc] = pass ? std::uint8_t(bpos) : kNoGrad;
          }
          const std::int64_t o = ((n * ph_n + ph) * pw_n + pw) * d.cout + co;
          store2(out + o, res[0], res[1]);
          if (code_out) *reinterpret_cast<std::uint16_t*>(code_out + o) = std::uint16_t(cd[0] | (cd[1] << 8));
        }
      } else {
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          if (!ch_ok || oh + rr >= ph_n || ow >= pw_n) continue;
          float res[2];
          std::uint8_t cd[2];
#pragma unroll
          for (int cc = 0; cc < 2; ++cc) {
            const bool pass = v[rr][cc] > 0.f || isnan(v[rr][cc]);
            res[cc] = pass ? v[rr][cc] : 0.f;
            cd[cc] = pass ? std::uint8_t(0) : kNoGrad;
          }
          const std::int64_t o = ((n * ph_n + oh + rr) * pw_n + ow) * d.cout + co;
          store2(out + o, res[0], res[1]);
          if (code_out) *reinterpret_cast<std::uint16_t*>(code_out + o) = std::uint16_t(cd[0] | (cd[1] << 8));
        }
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int ci = n0 + j * 8 + 2 * t;
      if (ci >= d.cin) continue;
#pragma unroll
      for (int rr = 0; rr < 2; ++rr)
        if (oh + rr < d.h && ow < d.w)
          store2(out + ((n * d.h + oh + rr) * d.w + ow) * d.cin + ci, acc[j][2 * rr], acc[j][2 * rr + 1]);
    }
  }
}

constexpr int kDwPix = 32;         // conv pixels per smem step (two k16 steps)
constexpr int kDwRow = kDwPix + 8; // padded smem row (halves)

template <class D>
__global__ void __launch_bounds__(kThreads) mma_dw_kernel(ConvReluPoolDims d, const D* __restrict__ x,
                                                     const D* __restrict__ dy,
                                                     const std::uint8_t* __restrict__ code, int chunks,
                                                     int ci_tiles, float* __restrict__ part) {
  __shared__ __align__(16) D s_g[kN][kDwRow];  // [co][pixel]
  __shared__ __align__(16) D s_x[kN][kDwRow];  // [ci][pixel]
  const int k = d.k, pad = k / 2, p = d.pool;
  const int hc = d.ph() * p, wc = d.pw() * p, kkc = k * k * d.cin;
  const int chunk = blockIdx.x;
  const int co0 = (blockIdx.y / ci_tiles) * kN, ci0 = (blockIdx.y % ci_tiles) * kN;
  const int rs = blockIdx.z, r = rs / k, s = rs % k;
  const std::int64_t units = d.n * hc;
  const std::int64_t q0 = units * chunk / chunks * wc, q1 = units * (chunk + 1) / chunks * wc;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const bool do_db = rs == 0 && ci0 == 0;

  float acc[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.f;
  float dbacc = 0.f;

  for (std::int64_t qb = q0; qb < q1; qb += kDwPix) {
    for (int e = tid; e < kDwPix * kN; e += kThreads) {
      const int c = e % kN, i = e / kN;
      const std::int64_t q = qb + i;
      float gv = 0.f;
      D xv = cuda::store_f32<D>(0.f);
      if (q < q1) {
        const std::int64_t row = q / wc;
        const int ow = int(q % wc), oh = int(row % hc);
        const std::int64_t n = row / hc;
        if (co0 + c < d.cout) gv = routed_grad(d, dy, code, n, oh, ow, co0 + c);
        const int ih = oh + r - pad, iw = ow + s - pad;
        if (ci0 + c < d.cin && ih >= 0 && ih < d.h && iw >= 0 && iw < d.w)
          xv = x[((n * d.h + ih) * d.w + iw) * d.cin + ci0 + c];
      }
      s_g[c][i] = cuda::store_f32<D>(gv);
      s_x[c][i] = xv;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kDwPix; kk += 16) {
      const int m0 = warp * 16 + g;
      const std::uint32_t a[4] = {load_b16x2(&s_g[m0][kk + 2 * t]), load_b16x2(&s_g[m0 + 8][kk + 2 * t]),
                                  load_b16x2(&s_g[m0][kk + 2 * t + 8]),
                                  load_b16x2(&s_g[m0 + 8][kk + 2 * t + 8])};
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const D* bp = &s_x[j * 8 + g][kk + 2 * t];
        mma_16816<D>(acc[j], a, load_b16x2(bp), load_b16x2(bp + 8));
      }
    }
    if (do_db && tid < kN)
      for (int i = 0; i < kDwPix; ++i) dbacc += cuda::load_f32(s_g[tid][i]);
    __syncthreads();
  }
  // acc[j][0..1]: co = co0 + 16w + g, ci = ci0 + 8j + 2t + {0,1}; acc[j][2..3]: co + 8.
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int co = co0 + warp * 16 + g + (i / 2) * 8, ci = ci0 + j * 8 + 2 * t + i % 2;
      if (co < d.cout && ci < d.cin)
        part[(std::int64_t(chunk) * d.cout + co) * (kkc + 1) + rs * d.cin + ci] = acc[j][i];
    }
  if (do_db && tid < kN && co0 + tid < d.cout)
    part[(std::int64_t(chunk) * d.cout + co0 + tid) * (kkc + 1) + kkc] = dbacc;
}


template <class T>
bool mma_supported(const ConvReluPoolDims& d) {
  if constexpr (std::is_same_v<T, float>) {
    return false;  // FP32 stays on CUDA cores (no TF32)
  } else {
    return (d.k == 1 || d.k == 3) && (d.pool == 1 || d.pool == 2) && d.cin % 16 == 0 && d.cout % 16 == 0 &&
           gpu_is_sm80_or_newer();
  }
}

template <class D, int P, Mode M>
void launch_conv(const ConvReluPoolDims& d, const D* x, const D* w, const D* b, const D* dy,
                 const std::uint8_t* code_in, D* out, std::uint8_t* code_out, cudaStream_t stream) {
  const int oh_n = M == Mode::forward ? d.ph() * P : d.h, ow_n = M == Mode::forward ? d.pw() * P : d.w;
  const int out_c = M == Mode::forward ? d.cout : d.cin;
  const std::int64_t tiles = std::int64_t((oh_n + kT - 1) / kT) * ((ow_n + kT - 1) / kT);
  const dim3 grid(unsigned(d.n * tiles), unsigned((out_c + kN - 1) / kN));
  mma_conv_kernel<D, P, M><<<grid, kThreads, 0, stream>>>(d, x, w, b, dy, code_in, out, code_out);
  MF_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool mma_can_run(const ConvReluPoolDims& d, DType dtype) {
  if (dtype == DType::bf16) return mma_supported<bf16>(d);
  if (dtype == DType::f16) return mma_supported<f16>(d);
  return false;
}

template <class T>
bool mma_forward(const ConvReluPoolDims& d, const void* x, const void* w, const void* b, void* y,
                 std::uint8_t* code, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    return false;
  } else {
    if (!mma_supported<T>(d) || !aligned_to(x, 16) || !aligned_to(w, 16) || !aligned_to(y, 16) ||
        !aligned_to(code, 16))
      return false;
    using D = cuda::device_t<T>;
    const auto* xd = static_cast<const D*>(x);
    const auto* wd = static_cast<const D*>(w);
    const auto* bd = static_cast<const D*>(b);
    auto* yd = static_cast<D*>(y);
    if (d.pool == 2) launch_conv<D, 2, Mode::forward>(d, xd, wd, bd, nullptr, nullptr, yd, code, stream);
    else launch_conv<D, 1, Mode::forward>(d, xd, wd, bd, nullptr, nullptr, yd, code, stream);
    return true;
  }
}

template <class T>
bool mma_backward(const ConvReluPoolDims& d, const void* x, const void* w, const void* dy,
                  const std::uint8_t* code, void* dx, float* dw, float* db, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    return false;
  } else {
    if (!mma_supported<T>(d) || !aligned_to(dx, 16)) return false;
    using D = cuda::device_t<T>;
    if (dx)
      launch_conv<D, 1, Mode::dx>(d, nullptr, static_cast<const D*>(w), nullptr, static_cast<const D*>(dy), code,
                                  static_cast<D*>(dx), nullptr, stream);
    if (!dw) return true;  // dx alone (another variant computed dw and db)
    dw_db_by_partials(d, pooled_conv_rows(d), kMaxPartialChunks, dw, db, stream, [&](int chunks, float* part) {
      const int ci_tiles = (d.cin + kN - 1) / kN, co_tiles = (d.cout + kN - 1) / kN;
      const dim3 grid(unsigned(chunks), unsigned(co_tiles * ci_tiles), unsigned(d.k * d.k));
      mma_dw_kernel<D><<<grid, kThreads, 0, stream>>>(d, static_cast<const D*>(x), static_cast<const D*>(dy), code,
                                                 chunks, ci_tiles, part);
      MF_CUDA_CHECK_LAUNCH();
    });
    return true;
  }
}

#define MF_INSTANTIATE(T)                                                                            \
  template bool mma_forward<T>(const ConvReluPoolDims&, const void*, const void*, const void*, void*,  \
                               std::uint8_t*, cudaStream_t);                                          \
  template bool mma_backward<T>(const ConvReluPoolDims&, const void*, const void*, const void*,        \
                                const std::uint8_t*, void*, float*, float*, cudaStream_t);
MF_INSTANTIATE(float)
MF_INSTANTIATE(f16)
MF_INSTANTIATE(bf16)
#undef MF_INSTANTIATE

}  // namespace mf::kernels
