// conv_relu_pool variant 4, "cin1": the single-channel input layer (LeakCNN's
// 1 -> 32 at 64 x 64), on CUDA cores, any T (f32, bf16, f16), f32 accumulation
// (FMA-contracted, like the other CUDA variants; no TF32).
// Router: `automatic` and cin1 (and resident when resident refuses: f32, or
// a Cin = 1 layer that wants dx). Runs when Cin == 1, k == 3, pool in {1, 2}, Cout a power
// of two in [16, 256], y/code (forward) and dy/code (backward) 16-byte aligned
// and N * tiles < 2^31; anything else falls back to mma / tiled (then direct).
//   cin1_forward_kernel  x [N,H,W,1] -> y, code [N,PH,PW,Cout]: a block per
//            8 x 32 pooled outputs of one image, all Cout; per conv value bias
//            + 9 FMAs per channel in r, s order; PyTorch's pooling rule
//            (strictly greater wins, ties keep the first, NaN wins), ReLU.
//   cin1_dw_kernel  dw [Cout,3,3,1], db [Cout] (f32): fixed chunks (min(N*PH,
//            1024), a function of the shape only), a fixed-order reduction over
//            the block's slots, one partial per (chunk, co, tap | db), summed
//            by launch_reduce_partials in chunk order: no atomics.
//   cin1_dx_kernel  (only when dx is requested; the first layer passes null)
//            one thread per dx element, gathering over taps and Cout.
// Thread layout, bytes per output, register counts, expected share of HBM
// bandwidth: bench/NOTES.md, "Kernel lab notes".
#include <cuda_runtime.h>

#include <climits>
#include <type_traits>

#include "engine/error.hpp"
#include "kernels/conv_relu_pool_cuda.cuh"
#include "kernels/cuda_types.cuh"
#include "kernels/launch.cuh"

namespace mf::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kTPH = 8;   // pooled rows per forward tile
constexpr int kTPW = 32;  // pooled columns per forward tile
constexpr int kCpt = 8;   // output channels per thread
constexpr int kMinCout = 16;
constexpr int kMaxCout = 256;
constexpr int kTaps = 9;  // k * k, k = 3

template <class D>
__device__ __forceinline__ std::uint32_t bits16(D v) {
  if constexpr (std::is_same_v<D, __half>) return __half_as_ushort(v);
  else return __bfloat16_as_ushort(v);
}

template <class D>
__device__ __forceinline__ D from_bits16(std::uint32_t u) {
  if constexpr (std::is_same_v<D, __half>) return __ushort_as_half(static_cast<unsigned short>(u & 0xffffu));
  else return __ushort_as_bfloat16(static_cast<unsigned short>(u & 0xffffu));
}

// 8 consecutive values, dst 16-byte aligned: one 16-byte store (2-byte T) or two (f32).
template <class D>
__device__ __forceinline__ void store8(D* dst, const float (&v)[kCpt]) {
  if constexpr (std::is_same_v<D, float>) {
    reinterpret_cast<float4*>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    std::uint32_t u[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      u[i] = bits16(cuda::store_f32<D>(v[2 * i])) | (bits16(cuda::store_f32<D>(v[2 * i + 1])) << 16);
    *reinterpret_cast<uint4*>(dst) = make_uint4(u[0], u[1], u[2], u[3]);
  }
}

// 8 consecutive values, src 16-byte aligned.
template <class D>
__device__ __forceinline__ void load8(const D* __restrict__ src, float (&v)[kCpt]) {
  if constexpr (std::is_same_v<D, float>) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(src));
    const float4 b = __ldg(reinterpret_cast<const float4*>(src) + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(src));
    const std::uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = cuda::load_f32(from_bits16<D>(w[i]));
      v[2 * i + 1] = cuda::load_f32(from_bits16<D>(w[i] >> 16));
    }
  }
}

template <class D, int P>
__global__ void __launch_bounds__(kThreads, 2)
    cin1_forward_kernel(ConvReluPoolDims d, int tiles_w, int tiles_per_image, const D* __restrict__ x,
                        const D* __restrict__ w, const D* __restrict__ b, D* __restrict__ y,
                        std::uint8_t* __restrict__ code) {
  constexpr int HR = kTPH * P + 2, HC = kTPW * P + 2;  // input halo (pad 1 each side)
  __shared__ float s_x[HR * HC];
  __shared__ __align__(16) float s_w[kTaps * kMaxCout];  // [rs][co]
  __shared__ __align__(16) float s_b[kMaxCout];

  const int tid = threadIdx.x, cout = d.cout, ph_n = d.h / P, pw_n = d.w / P;  // d.ph(), d.pw() (host constexpr)
  const std::int64_t n = blockIdx.x / unsigned(tiles_per_image);
  const int tile = int(blockIdx.x % unsigned(tiles_per_image));
  const int ph0 = (tile / tiles_w) * kTPH, pw0 = (tile % tiles_w) * kTPW;
  const int ih0 = ph0 * P - 1, iw0 = pw0 * P - 1;
  const D* __restrict__ xn = x + n * d.h * d.w;

  // s_x[hy * HC + hx] = x[n][ih0 + hy][iw0 + hx] (0 outside the image). Rows
  // beyond PH*P + 1 are never read by a valid output but are loaded (zero or
  // in-image data) so every patch read is defined.
  for (int e = tid; e < HR * HC; e += kThreads) {
    const int ih = ih0 + e / HC, iw = iw0 + e % HC;
    float v = 0.f;
    if (ih >= 0 && ih < d.h && iw >= 0 && iw < d.w) v = cuda::load_f32(xn[std::int64_t(ih) * d.w + iw]);
    s_x[e] = v;
  }
  for (int e = tid; e < kTaps * cout; e += kThreads) {  // w[co][r][s][0]: e = co * 9 + rs
    const int co = e / kTaps, rs = e % kTaps;
    s_w[rs * kMaxCout + co] = cuda::load_f32(w[e]);
  }
  for (int e = tid; e < cout; e += kThreads) s_b[e] = cuda::load_f32(b[e]);
  __syncthreads();

  const int cg_n = cout / kCpt;  // even, power of two, <= 32: 256 % cg_n == 0
  const int cg = tid % cg_n, slot = tid / cg_n, slots = kThreads / cg_n;
  float wr[kTaps][kCpt];
#pragma unroll
  for (int rs = 0; rs < kTaps; ++rs) {
    const float4 a = *reinterpret_cast<const float4*>(&s_w[rs * kMaxCout + cg * kCpt]);
    const float4 c = *reinterpret_cast<const float4*>(&s_w[rs * kMaxCout + cg * kCpt + 4]);
    wr[rs][0] = a.x, wr[rs][1] = a.y, wr[rs][2] = a.z, wr[rs][3] = a.w;
    wr[rs][4] = c.x, wr[rs][5] = c.y, wr[rs][6] = c.z, wr[rs][7] = c.w;
  }

  // One pooled pixel (tile index i): computes, stores y when the pixel exists,
  // returns its 8 codes packed little-endian (channel cg*8 + j in byte j).
  // Where tile pixel i's 8 channels live in y and code; false when the pixel
  // lies beyond the image (partial tiles).
  auto place = [&](int i, std::int64_t& o) -> bool {
    const int ph = ph0 + i / kTPW, pw = pw0 + i % kTPW;
    o = ((n * ph_n + ph) * pw_n + pw) * cout + cg * kCpt;
    return ph < ph_n && pw < pw_n;
  };
  auto pixel = [&](int i) -> uint2 {
    const int lr = i / kTPW, lc = i % kTPW;
    // The (P+2)^2 input patch is read from smem per conv value (9 broadcast
    // loads per 72 FMAs) rather than held: 16 registers fewer, no spill.
    const float* patch = &s_x[(lr * P) * HC + lc * P];
    float best[kCpt] = {};
    std::uint32_t bpos = 0;  // channel j's winning position in bits 4j..4j+3 (packed: fewer registers, no spill)
#pragma unroll
    for (int dr = 0; dr < P; ++dr) {
#pragma unroll
      for (int dc = 0; dc < P; ++dc) {
        float acc[kCpt];  // bias from smem (2 broadcast loads) rather than 8 more registers
        {
          const float4 a = *reinterpret_cast<const float4*>(&s_b[cg * kCpt]);
          const float4 c = *reinterpret_cast<const float4*>(&s_b[cg * kCpt + 4]);
          acc[0] = a.x, acc[1] = a.y, acc[2] = a.z, acc[3] = a.w, acc[4] = c.x, acc[5] = c.y, acc[6] = c.z,
          acc[7] = c.w;
        }
#pragma unroll
        for (int r = 0; r < 3; ++r)
#pragma unroll
          for (int s = 0; s < 3; ++s)
#pragma unroll
            for (int j = 0; j < kCpt; ++j) acc[j] += patch[(dr + r) * HC + dc + s] * wr[r * 3 + s][j];
#pragma unroll
        for (int j = 0; j < kCpt; ++j) {
          // PyTorch's rule: strictly greater wins (ties keep the first), NaN always wins.
          if ((dr == 0 && dc == 0) || acc[j] > best[j] || isnan(acc[j])) {
            best[j] = acc[j];
            bpos = (bpos & ~(0xfu << (4 * j))) | (std::uint32_t(dr * P + dc) << (4 * j));
          }
        }
      }
    }
    float out[kCpt];
    std::uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int j = 0; j < kCpt; ++j) {
      const bool pass = best[j] > 0.f || isnan(best[j]);
      out[j] = pass ? best[j] : 0.f;
      const std::uint32_t c = pass ? (bpos >> (4 * j)) & 0xfu : std::uint32_t(kNoGrad);
      if (j < 4) lo |= c << (8 * j);
      else hi |= c << (8 * (j - 4));
    }
    std::int64_t o;
    if (place(i, o)) store8(y + o, out);
    return make_uint2(lo, hi);
  };

  const bool even = (cg & 1) == 0;
  // Uniform trip count: slots divides 128, so every thread runs 128 / slots steps.
  for (int i0 = slot; i0 < kTPH * kTPW; i0 += 2 * slots) {
    const uint2 ca = pixel(i0);
    const uint2 cb = pixel(i0 + slots);
    // Lane ^ 1 is channel group cg ^ 1 of the same pixels (tid = slot * cg_n + cg, cg_n even).
    const uint2 send = even ? cb : ca;
    uint2 recv;
    recv.x = __shfl_xor_sync(0xffffffffu, send.x, 1);
    recv.y = __shfl_xor_sync(0xffffffffu, send.y, 1);
    std::int64_t o;  // recomputed here rather than kept across the second pixel: no register spill
    if (code) {
      if (even && place(i0, o))
        *reinterpret_cast<uint4*>(code + o) = make_uint4(ca.x, ca.y, recv.x, recv.y);
      else if (!even && place(i0 + slots, o))
        *reinterpret_cast<uint4*>(code + o - kCpt) = make_uint4(recv.x, recv.y, cb.x, cb.y);
    }
  }
}

// Partials part[(chunk * cout + co) * 10 + rs] (dw, rs = r*3 + s) and
// part[(chunk * cout + co) * 10 + 9] (db): launch_reduce_partials' layout for
// k = 3, Cin = 1.
template <class D, int P>
__global__ void __launch_bounds__(kThreads, 2)
    cin1_dw_kernel(ConvReluPoolDims d, int chunks, const D* __restrict__ x, const D* __restrict__ dy,
                   const std::uint8_t* __restrict__ code, float* __restrict__ part) {
  __shared__ float s_red[kThreads * kCpt];
  const int tid = threadIdx.x, cout = d.cout, ph_n = d.h / P, pw_n = d.w / P;
  const int cg_n = cout / kCpt, cg = tid % cg_n, slot = tid / cg_n, slots = kThreads / cg_n;
  const int chunk = blockIdx.x;
  const std::int64_t units = d.n * ph_n;  // pooled rows (n, ph)
  const std::int64_t u0 = units * chunk / chunks, u1 = units * (chunk + 1) / chunks;
  const std::int64_t q_n = (u1 - u0) * pw_n;

  float acc[kCpt][kTaps + 1];
#pragma unroll
  for (int j = 0; j < kCpt; ++j)
#pragma unroll
    for (int e = 0; e <= kTaps; ++e) acc[j][e] = 0.f;

  for (std::int64_t q = slot; q < q_n; q += slots) {
    const std::int64_t u = u0 + q / pw_n;
    const int pw = int(q % pw_n);
    const std::int64_t n = u / ph_n;
    const int ph = int(u % ph_n);
    const std::int64_t o = (u0 * pw_n + q) * cout + cg * kCpt;  // (u * pw_n + pw) * cout + ...
    // dy's 8 channels: f32 as floats; 16-bit types stay packed in 4 registers
    // and are widened where used (holding 8 floats spilled at P = 2).
    float g[kCpt];
    uint4 g16 = make_uint4(0, 0, 0, 0);
    if constexpr (std::is_same_v<D, float>) load8(dy + o, g);
    else g16 = __ldg(reinterpret_cast<const uint4*>(dy + o));
    auto dy_f32 = [&](int j) -> float {
      if constexpr (std::is_same_v<D, float>) {
        return g[j];
      } else {
        const std::uint32_t word = j < 2 ? g16.x : (j < 4 ? g16.y : (j < 6 ? g16.z : g16.w));
        return cuda::load_f32(from_bits16<D>(word >> (16 * (j % 2))));
      }
    };
    const uint2 cw = __ldg(reinterpret_cast<const uint2*>(code + o));
    const D* __restrict__ xn = x + n * d.h * d.w;
    float pt[P + 2][P + 2];
#pragma unroll
    for (int a = 0; a < P + 2; ++a) {
      const int ih = ph * P - 1 + a;
#pragma unroll
      for (int c = 0; c < P + 2; ++c) {
        const int iw = pw * P - 1 + c;
        float v = 0.f;
        if (ih >= 0 && ih < d.h && iw >= 0 && iw < d.w) v = cuda::load_f32(xn[std::int64_t(ih) * d.w + iw]);
        pt[a][c] = v;
      }
    }
#pragma unroll
    for (int j = 0; j < kCpt; ++j) {
      const std::uint32_t cj = ((j < 4 ? cw.x : cw.y) >> (8 * (j % 4))) & 0xffu;
#pragma unroll
      for (int dr = 0; dr < P; ++dr) {
#pragma unroll
        for (int dc = 0; dc < P; ++dc) {
          const float gq = cj == std::uint32_t(dr * P + dc) ? dy_f32(j) : 0.f;
#pragma unroll
          for (int r = 0; r < 3; ++r)
#pragma unroll
            for (int s = 0; s < 3; ++s) acc[j][r * 3 + s] += gq * pt[dr + r][dc + s];
        }
      }
      acc[j][kTaps] += cj < std::uint32_t(P * P) ? dy_f32(j) : 0.f;
    }
  }

  // Fixed-order reduction over the slots: s_red[slot * cout + co] (tid * 8 + j
  // with tid = slot * cg_n + cg is exactly that index), summed by thread co in
  // slot order.
#pragma unroll
  for (int e = 0; e <= kTaps; ++e) {
#pragma unroll
    for (int j = 0; j < kCpt; ++j) s_red[tid * kCpt + j] = acc[j][e];
    __syncthreads();
    if (tid < cout) {
      float s = 0.f;
      for (int sl = 0; sl < slots; ++sl) s += s_red[sl * cout + tid];
      part[(std::int64_t(chunk) * cout + tid) * (kTaps + 1) + e] = s;
    }
    __syncthreads();
  }
}

// dx[n][ih][iw] = sum_{r, s, co} g[n][ih - r + 1][iw - s + 1][co] * w[co][r][s].
template <class D, int P>
__global__ void __launch_bounds__(kThreads)
    cin1_dx_kernel(ConvReluPoolDims d, const D* __restrict__ w, const D* __restrict__ dy,
                   const std::uint8_t* __restrict__ code, D* __restrict__ dx) {
  __shared__ float s_w[kTaps * kMaxCout];  // [co][rs], as in w
  for (int e = threadIdx.x; e < kTaps * d.cout; e += kThreads) s_w[e] = cuda::load_f32(w[e]);
  __syncthreads();
  const int ph_n = d.h / P, pw_n = d.w / P, hc = ph_n * P, wc = pw_n * P;
  const std::int64_t total = d.n * d.h * d.w;
  for (std::int64_t i = blockIdx.x * std::int64_t(kThreads) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * kThreads) {
    const int iw = int(i % d.w);
    const std::int64_t t = i / d.w;
    const int ih = int(t % d.h);
    const std::int64_t n = t / d.h;
    float acc = 0.f;
    for (int r = 0; r < 3; ++r) {
      const int oh = ih - r + 1;
      if (oh < 0 || oh >= hc) continue;
      for (int s = 0; s < 3; ++s) {
        const int ow = iw - s + 1;
        if (ow < 0 || ow >= wc) continue;
        const std::uint8_t pos = std::uint8_t((oh % P) * P + ow % P);
        const std::int64_t o = ((n * ph_n + oh / P) * pw_n + ow / P) * d.cout;
        for (int co = 0; co < d.cout; ++co)
          if (code[o + co] == pos) acc += cuda::load_f32(dy[o + co]) * s_w[co * kTaps + r * 3 + s];
      }
    }
    dx[i] = cuda::store_f32<D>(acc);
  }
}


int tiles_w(const ConvReluPoolDims& d) { return (d.pw() + kTPW - 1) / kTPW; }
int tiles_h(const ConvReluPoolDims& d) { return (d.ph() + kTPH - 1) / kTPH; }

}  // namespace

bool cin1_can_run(const ConvReluPoolDims& d) {
  if (d.cin != 1 || d.k != 3 || (d.pool != 1 && d.pool != 2)) return false;
  if (d.cout < kMinCout || d.cout > kMaxCout || (d.cout & (d.cout - 1)) != 0) return false;
  return d.n * std::int64_t(tiles_w(d)) * tiles_h(d) <= std::int64_t(INT_MAX);
}

template <class T>
bool cin1_forward(const ConvReluPoolDims& d, const void* x, const void* w, const void* b, void* y,
                  std::uint8_t* code, cudaStream_t stream) {
  if (!cin1_can_run(d) || !aligned_to(y, 16) || !aligned_to(code, 16)) return false;
  using D = cuda::device_t<T>;
  const int tw = tiles_w(d), tpi = tw * tiles_h(d);
  const unsigned grid = unsigned(d.n * tpi);
  if (grid == 0) return true;
  const auto* xd = static_cast<const D*>(x);
  const auto* wd = static_cast<const D*>(w);
  const auto* bd = static_cast<const D*>(b);
  auto* yd = static_cast<D*>(y);
  if (d.pool == 2) cin1_forward_kernel<D, 2><<<grid, kThreads, 0, stream>>>(d, tw, tpi, xd, wd, bd, yd, code);
  else cin1_forward_kernel<D, 1><<<grid, kThreads, 0, stream>>>(d, tw, tpi, xd, wd, bd, yd, code);
  MF_CUDA_CHECK_LAUNCH();
  return true;
}

template <class T>
bool cin1_backward(const ConvReluPoolDims& d, const void* x, const void* w, const void* dy,
                   const std::uint8_t* code, void* dx, float* dw, float* db, cudaStream_t stream) {
  if (!cin1_can_run(d) || !aligned_to(dy, 16) || !aligned_to(code, 16)) return false;
  using D = cuda::device_t<T>;
  const auto* xd = static_cast<const D*>(x);
  const auto* dyd = static_cast<const D*>(dy);
  if (dx) {
    const unsigned grid = cuda::grid_for(d.n * d.h * d.w, kThreads);
    const auto* wd = static_cast<const D*>(w);
    auto* dxd = static_cast<D*>(dx);
    if (d.pool == 2) cin1_dx_kernel<D, 2><<<grid, kThreads, 0, stream>>>(d, wd, dyd, code, dxd);
    else cin1_dx_kernel<D, 1><<<grid, kThreads, 0, stream>>>(d, wd, dyd, code, dxd);
    MF_CUDA_CHECK_LAUNCH();
  }
  // Units: pooled rows (n, ph); none when there is no pooled column.
  const std::int64_t units = d.pw() > 0 ? d.n * d.ph() : 0;
  dw_db_by_partials(d, units, kMaxPartialChunks, dw, db, stream, [&](int chunks, float* part) {
    if (d.pool == 2) cin1_dw_kernel<D, 2><<<unsigned(chunks), kThreads, 0, stream>>>(d, chunks, xd, dyd, code, part);
    else cin1_dw_kernel<D, 1><<<unsigned(chunks), kThreads, 0, stream>>>(d, chunks, xd, dyd, code, part);
    MF_CUDA_CHECK_LAUNCH();
  });
  return true;
}

#define MF_INSTANTIATE(T)                                                                             \
  template bool cin1_forward<T>(const ConvReluPoolDims&, const void*, const void*, const void*, void*, \
                                std::uint8_t*, cudaStream_t);                                         \
  template bool cin1_backward<T>(const ConvReluPoolDims&, const void*, const void*, const void*,       \
                                 const std::uint8_t*, void*, float*, float*, cudaStream_t);
MF_INSTANTIATE(float)
MF_INSTANTIATE(f16)
MF_INSTANTIATE(bf16)
#undef MF_INSTANTIATE

}  // namespace mf::kernels
