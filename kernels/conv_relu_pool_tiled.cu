// conv_relu_pool variant 2, "tiled": shared-memory tiles on CUDA cores, for
// every T (f32, bf16, f16) with f32 accumulation. No TF32: FP32 stays full f32.
// Router: `automatic`'s choice when cin1 and mma cannot run (f32, or shapes
// they refuse); runs pool p in {1, 2} and k <= 5 (else direct).
//   tiled_conv_kernel  forward, and dx as the same correlation: a block owns
//            one image, a 16 x 16 tile of conv pixels and 32 output channels;
//            256 threads = 64 pixel groups (2 x 2 conv pixels, one pool window
//            at p = 2) x 4 channel groups of 8, 4 x 8 f32 accumulators each.
//            forward: input x, weights w, + bias, ReLU, 2 x 2 max with
//            PyTorch's tie/NaN rule -> y, code (NHWC). dx: input g rebuilt
//            from dy and code, weights flipped (w[co][k-1-r][k-1-s][ci]) -> dx.
//   tiled_dw_kernel  dw, db: grid (chunk, Cout tile x Cin tile, r*k+s), a chunk
//            a fixed range of conv rows (a function of the shape only); one
//            partial per (chunk, co, r, s, ci) and per (chunk, co) for db, then
//            launch_reduce_partials sums the chunks in order: deterministic.
// Shared-memory sizes and reads per element: bench/NOTES.md, "Kernel lab notes".
#include <cuda_runtime.h>

#include "engine/error.hpp"
#include "kernels/conv_relu_pool_cuda.cuh"
#include "kernels/cuda_types.cuh"

namespace mf::kernels {

namespace {

constexpr int kTile = 16;     // conv pixels per tile side
constexpr int kCoTile = 32;   // output channels per block
constexpr int kCiSlice = 8;   // reduction channels per shared-memory slice
constexpr int kMaxK = 5;
constexpr int kMaxHalo = kTile + kMaxK - 1;

constexpr int kThreads = 256;  // 64 pixel groups x 4 output-channel groups (the layout above)

enum class Mode { forward, dx };

// The gradient reaching conv position (oh, ow), channel co of image n: dy where
// the code points at it, 0 elsewhere (also outside the pooled region).
template <class D>
__device__ __forceinline__ float routed_grad(const ConvReluPoolDims& d, const D* __restrict__ dy,
                                             const std::uint8_t* __restrict__ code, std::int64_t n, int oh,
                                             int ow, int co) {
  const int p = d.pool, ph_n = d.ph(), pw_n = d.pw();
  if (oh < 0 || ow < 0 || oh >= ph_n * p || ow >= pw_n * p) return 0.f;
  const std::int64_t o = ((n * ph_n + oh / p) * pw_n + ow / p) * d.cout + co;
  return code[o] == std::uint8_t((oh % p) * p + ow % p) ? cuda::load_f32(dy[o]) : 0.f;
}

// Forward: in = x (channels cin), out channels cout. dx: in = g (channels cout),
// out channels cin. `pad` = k/2 in both: dx is the correlation of g with the
// flipped weights, which has the same zero padding.
template <class D, int P, Mode M>
__global__ void __launch_bounds__(kThreads) tiled_conv_kernel(ConvReluPoolDims d, const D* __restrict__ x,
                                                         const D* __restrict__ w, const D* __restrict__ b,
                                                         const D* __restrict__ dy,
                                                         const std::uint8_t* __restrict__ code_in,
                                                         D* __restrict__ out, std::uint8_t* __restrict__ code_out) {
  __shared__ float s_in[kCiSlice][kMaxHalo * kMaxHalo];
  __shared__ __align__(16) float s_w[kMaxK * kMaxK][kCiSlice][kCoTile];

  const int k = d.k, pad = k / 2, halo = kTile + k - 1;
  const int in_c = M == Mode::forward ? d.cin : d.cout;
  const int out_c = M == Mode::forward ? d.cout : d.cin;
  const int oh_n = M == Mode::forward ? d.ph() * P : d.h;  // conv rows that matter
  const int ow_n = M == Mode::forward ? d.pw() * P : d.w;
  const int tiles_x = (ow_n + kTile - 1) / kTile, tiles_y = (oh_n + kTile - 1) / kTile;
  const std::int64_t n = blockIdx.x / (tiles_x * tiles_y);
  const int tile = int(blockIdx.x % (tiles_x * tiles_y));
  const int oh0 = (tile / tiles_x) * kTile, ow0 = (tile % tiles_x) * kTile;
  const int co0 = blockIdx.y * kCoTile;

  const int tid = threadIdx.x;
  const int pg = tid % 64, cg = tid / 64;  // pixel group, channel group
  const int py = (pg / 8) * 2, px = (pg % 8) * 2;

  float acc[4][8];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

  for (int c0 = 0; c0 < in_c; c0 += kCiSlice) {
    // Input halo: s_in[c][hy * halo + hx] = input at (oh0 - pad + hy, ow0 - pad + hx), channel c0 + c.
    for (int e = tid; e < kCiSlice * halo * halo; e += kThreads) {
      const int c = e % kCiSlice, pix = e / kCiSlice;
      const int ih = oh0 - pad + pix / halo, iw = ow0 - pad + pix % halo;
      float v = 0.f;
      if (c0 + c < in_c) {
        if constexpr (M == Mode::forward) {
          if (ih >= 0 && ih < d.h && iw >= 0 && iw < d.w)
            v = cuda::load_f32(x[((n * d.h + ih) * d.w + iw) * d.cin + c0 + c]);
        } else {
          v = routed_grad(d, dy, code_in, n, ih, iw, c0 + c);
        }
      }
      s_in[c][pix] = v;
    }
    // Weights: s_w[r*k + s][c][o] = B(r, s, reduction channel c0 + c, output channel co0 + o).
    for (int e = tid; e < k * k * kCiSlice * kCoTile; e += kThreads) {
      const int o = e % kCoTile, c = (e / kCoTile) % kCiSlice, rs = e / (kCoTile * kCiSlice);
      const int r = rs / k, s = rs % k;
      float v = 0.f;
      if (c0 + c < in_c && co0 + o < out_c) {
        if constexpr (M == Mode::forward)
          v = cuda::load_f32(w[((std::int64_t(co0 + o) * k + r) * k + s) * d.cin + c0 + c]);
        else  // B[r][s][co][ci] = w[co][k-1-r][k-1-s][ci]
          v = cuda::load_f32(w[((std::int64_t(c0 + c) * k + (k - 1 - r)) * k + (k - 1 - s)) * d.cin + co0 + o]);
      }
      s_w[rs][c][o] = v;
    }
    __syncthreads();
    for (int c = 0; c < kCiSlice; ++c) {
      for (int r = 0; r < k; ++r) {
        for (int s = 0; s < k; ++s) {
          const float4 wa = *reinterpret_cast<const float4*>(&s_w[r * k + s][c][cg * 8]);
          const float4 wb = *reinterpret_cast<const float4*>(&s_w[r * k + s][c][cg * 8 + 4]);
          const float wv[8] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float xv = s_in[c][(py + i / 2 + r) * halo + px + i % 2 + s];
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[i][j] += xv * wv[j];
          }
        }
      }
    }
    __syncthreads();
  }

  if constexpr (M == Mode::forward) {
    const int ph_n = d.ph(), pw_n = d.pw();
    for (int j = 0; j < 8; ++j) {
      const int co = co0 + cg * 8 + j;
      if (co >= d.cout) break;
      const float bias = cuda::load_f32(b[co]);
      if constexpr (P == 2) {
        const int ph = (oh0 + py) / 2, pw = (ow0 + px) / 2;
        if (ph >= ph_n || pw >= pw_n) continue;
        float best = acc[0][j] + bias;
        int bpos = 0;
        for (int i = 1; i < 4; ++i) {
          const float v = acc[i][j] + bias;
          if (v > best || isnan(v)) {
            best = v;
            bpos = i;
          }
        }
        const bool pass = best > 0.f || isnan(best);
        const std::int64_t o = ((n * ph_n + ph) * pw_n + pw) * d.cout + co;
        out[o] = cuda::store_f32<D>(pass ? best : 0.f);
        if (code_out) code_out[o] = pass ? std::uint8_t(bpos) : kNoGrad;
      } else {
        for (int i = 0; i < 4; ++i) {
          const int oh = oh0 + py + i / 2, ow = ow0 + px + i % 2;
          if (oh >= ph_n || ow >= pw_n) continue;
          const float v = acc[i][j] + bias;
          const bool pass = v > 0.f || isnan(v);
          const std::int64_t o = ((n * ph_n + oh) * pw_n + ow) * d.cout + co;
          out[o] = cuda::store_f32<D>(pass ? v : 0.f);
          if (code_out) code_out[o] = pass ? std::uint8_t(0) : kNoGrad;
        }
      }
    }
  } else {
    for (int i = 0; i < 4; ++i) {
      const int ih = oh0 + py + i / 2, iw = ow0 + px + i % 2;
      if (ih >= d.h || iw >= d.w) continue;
      for (int j = 0; j < 8; ++j) {
        const int ci = co0 + cg * 8 + j;
        if (ci < d.cin) out[((n * d.h + ih) * d.w + iw) * d.cin + ci] = cuda::store_f32<D>(acc[i][j]);
      }
    }
  }
}

constexpr int kDwPix = 32;  // conv pixels per shared-memory step

// Partials part[(chunk * cout + co) * (kkc + 1) + (r*k + s)*cin + ci], db at kkc.
template <class D>
__global__ void __launch_bounds__(kThreads) tiled_dw_kernel(ConvReluPoolDims d, const D* __restrict__ x,
                                                       const D* __restrict__ dy,
                                                       const std::uint8_t* __restrict__ code, int chunks,
                                                       int ci_tiles, float* __restrict__ part) {
  __shared__ float s_g[kDwPix][kCoTile + 1];
  __shared__ float s_x[kDwPix][kCoTile + 1];
  const int k = d.k, pad = k / 2, p = d.pool;
  const int hc = d.ph() * p, wc = d.pw() * p, kkc = k * k * d.cin;
  const int chunk = blockIdx.x;
  const int co0 = (blockIdx.y / ci_tiles) * kCoTile, ci0 = (blockIdx.y % ci_tiles) * kCoTile;
  const int rs = blockIdx.z, r = rs / k, s = rs % k;
  const std::int64_t units = d.n * hc;
  const std::int64_t q0 = units * chunk / chunks * wc, q1 = units * (chunk + 1) / chunks * wc;
  const int tid = threadIdx.x, tco = (tid / 16) * 2, tci = (tid % 16) * 2;
  const bool do_db = rs == 0 && ci0 == 0;
  float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
  float dbacc = 0.f;
  for (std::int64_t qb = q0; qb < q1; qb += kDwPix) {
    for (int e = tid; e < kDwPix * kCoTile; e += kThreads) {
      const int c = e % kCoTile, i = e / kCoTile;
      const std::int64_t q = qb + i;
      float gv = 0.f, xv = 0.f;
      if (q < q1) {
        const std::int64_t row = q / wc;
        const int ow = int(q % wc), oh = int(row % hc);
        const std::int64_t n = row / hc;
        if (co0 + c < d.cout) gv = routed_grad(d, dy, code, n, oh, ow, co0 + c);
        const int ih = oh + r - pad, iw = ow + s - pad;
        if (ci0 + c < d.cin && ih >= 0 && ih < d.h && iw >= 0 && iw < d.w)
          xv = cuda::load_f32(x[((n * d.h + ih) * d.w + iw) * d.cin + ci0 + c]);
      }
      s_g[i][c] = gv;
      s_x[i][c] = xv;
    }
    __syncthreads();
    for (int i = 0; i < kDwPix; ++i) {
      const float g0 = s_g[i][tco], g1 = s_g[i][tco + 1];
      const float x0 = s_x[i][tci], x1 = s_x[i][tci + 1];
      acc[0][0] += g0 * x0;
      acc[0][1] += g0 * x1;
      acc[1][0] += g1 * x0;
      acc[1][1] += g1 * x1;
    }
    if (do_db && tid < kCoTile)
      for (int i = 0; i < kDwPix; ++i) dbacc += s_g[i][tid];
    __syncthreads();
  }
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 2; ++c) {
      const int co = co0 + tco + a, ci = ci0 + tci + c;
      if (co < d.cout && ci < d.cin)
        part[(std::int64_t(chunk) * d.cout + co) * (kkc + 1) + rs * d.cin + ci] = acc[a][c];
    }
  if (do_db && tid < kCoTile && co0 + tid < d.cout)
    part[(std::int64_t(chunk) * d.cout + co0 + tid) * (kkc + 1) + kkc] = dbacc;
}

bool tiled_supported(const ConvReluPoolDims& d) { return (d.pool == 1 || d.pool == 2) && d.k <= kMaxK; }

template <class D, int P, Mode M>
void launch_conv(const ConvReluPoolDims& d, const D* x, const D* w, const D* b, const D* dy,
                 const std::uint8_t* code_in, D* out, std::uint8_t* code_out, cudaStream_t stream) {
  const int oh_n = M == Mode::forward ? d.ph() * P : d.h, ow_n = M == Mode::forward ? d.pw() * P : d.w;
  const int out_c = M == Mode::forward ? d.cout : d.cin;
  const std::int64_t tiles = std::int64_t((oh_n + kTile - 1) / kTile) * ((ow_n + kTile - 1) / kTile);
  const dim3 grid(unsigned(d.n * tiles), unsigned((out_c + kCoTile - 1) / kCoTile));
  tiled_conv_kernel<D, P, M><<<grid, kThreads, 0, stream>>>(d, x, w, b, dy, code_in, out, code_out);
  MF_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool tiled_can_run(const ConvReluPoolDims& d) { return tiled_supported(d); }

template <class T>
bool tiled_forward(const ConvReluPoolDims& d, const void* x, const void* w, const void* b, void* y,
                   std::uint8_t* code, cudaStream_t stream) {
  if (!tiled_supported(d)) return false;
  using D = cuda::device_t<T>;
  const auto* xd = static_cast<const D*>(x);
  const auto* wd = static_cast<const D*>(w);
  const auto* bd = static_cast<const D*>(b);
  auto* yd = static_cast<D*>(y);
  if (d.pool == 2) launch_conv<D, 2, Mode::forward>(d, xd, wd, bd, nullptr, nullptr, yd, code, stream);
  else launch_conv<D, 1, Mode::forward>(d, xd, wd, bd, nullptr, nullptr, yd, code, stream);
  return true;
}

template <class T>
bool tiled_backward(const ConvReluPoolDims& d, const void* x, const void* w, const void* dy,
                    const std::uint8_t* code, void* dx, float* dw, float* db, cudaStream_t stream) {
  if (!tiled_supported(d)) return false;
  using D = cuda::device_t<T>;
  if (dx)
    launch_conv<D, 1, Mode::dx>(d, nullptr, static_cast<const D*>(w), nullptr, static_cast<const D*>(dy), code,
                                static_cast<D*>(dx), nullptr, stream);
  dw_db_by_partials(d, pooled_conv_rows(d), kMaxPartialChunks, dw, db, stream, [&](int chunks, float* part) {
    const int ci_tiles = (d.cin + kCoTile - 1) / kCoTile, co_tiles = (d.cout + kCoTile - 1) / kCoTile;
    const dim3 grid(unsigned(chunks), unsigned(co_tiles * ci_tiles), unsigned(d.k * d.k));
    tiled_dw_kernel<D><<<grid, kThreads, 0, stream>>>(d, static_cast<const D*>(x), static_cast<const D*>(dy), code,
                                                 chunks, ci_tiles, part);
    MF_CUDA_CHECK_LAUNCH();
  });
  return true;
}

#define MF_INSTANTIATE(T)                                                                              \
  template bool tiled_forward<T>(const ConvReluPoolDims&, const void*, const void*, const void*, void*,  \
                                 std::uint8_t*, cudaStream_t);                                          \
  template bool tiled_backward<T>(const ConvReluPoolDims&, const void*, const void*, const void*,        \
                                  const std::uint8_t*, void*, float*, float*, cudaStream_t);
MF_INSTANTIATE(float)
MF_INSTANTIATE(f16)
MF_INSTANTIATE(bf16)
#undef MF_INSTANTIATE

}  // namespace mf::kernels
