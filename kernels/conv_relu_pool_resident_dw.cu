// conv_relu_pool variant 5, "resident": the weight and bias gradients on
// tensor cores (bf16/f16, sm_80+), shaped for LeakCNN's layers 2-3 (Cin 32-64,
// Cout 64-128, 32x32 / 16x16 maps, batches in the thousands).
//
//   dw[co][r][s][ci] = sum over conv pixels q of g[q][co] * x[q + (r, s) - pad][ci]
//   db[co]           = sum over q of g[q][co]
// where g is the gradient routed through the 2x2 max and the ReLU: dy of the
// pool window where the 1-byte code names q's position, else 0.
//
// resident_dw_kernel<D, K, P>: one GEMM per tap, M = 64 Cout x N = 32 Cin,
// the reduction over pixels. A block owns one (Cout tile, Cin tile) pair and a
// contiguous range of pixel tiles (8 conv rows x 16 columns); it accumulates
// ALL k*k taps in registers, so x, dy and the codes are read once per
// (Cout tile, Cin tile) instead of once per tap.
//   threads   256 = 8 warps; warp w: Cout rows 16 (w % 4) .. +15, Cin
//             columns 16 (w / 4) .. +15, every tap: K*K x 2 m16n8 tiles,
//             72 f32 accumulators per thread at k = 3.
//   per tile  x halo (8+k-1) x (16+k-1) pixels x 32 Cin, staged by cp.async
//             (16-byte copies, zero-filled outside the image), double-buffered:
//             the next tile's halo is in flight while this one's MMAs run.
//             g: 128 pixels x 64 Cout built with 16-byte dy loads and 8-byte
//             code loads (8 channels per load), index math once per 8
//             channels with pool P a template constant (shifts).
//   k-step    one conv row of the tile (16 pixels): 1 ldmatrix.x4.trans for
//             A (g, [pixel][co] in smem) + 1 ldmatrix.x4.trans per tap for B
//             (x shifted by (r, s), [pixel][ci]) feeding 2 MMAs: at k = 3,
//             10 ldmatrix (5 KiB) per 18 MMAs (36,864 MACs): 0.14 B/MAC from
//             shared memory; rows padded to 80 / 144 bytes, so every 8-row
//             ldmatrix phase touches 8 distinct 16-byte bank groups.
//   L2/DRAM   per tile 11.5 KiB of x, 16 KiB of dy and 8 KiB of codes for
//             2.36 M MACs: 0.015 B/MAC (dy and codes are re-read P*P times,
//             from L1). At batch 8192, layer 2 streams ~0.94 GB: 0.31 ms at
//             3 TB/s against 0.39 ms of MMAs at the dense peak: both limits
//             are close, so the double-buffered halo matters.
//   smem      k = 3: 2 x 14,400 B (x) + 18,432 B (g) = 47,232 B static.
//   registers ptxas -v (CUDA 13.0, sm_90): 128 at k = 3 (the cap of
//             __launch_bounds__(256, 2)), 75-79 at k = 1, no spills: two
//             blocks (16 warps) per SM by registers, 94 KB of the 228 KB smem.
//   db        the threads staging g also sum it (8 channels each, fixed
//             order), combined across threads in a fixed order at the end.
//   output    one f32 partial per (chunk = block x, co, tap, ci) and per
//             (chunk, co) for db, in launch_reduce_partials' layout; that
//             fixed-order reduction finishes dw and db. No atomics: the bits
//             depend on the shape only (chunks is a function of the shape).
#include <cuda_runtime.h>

#include <type_traits>

#include "engine/error.hpp"
#include "kernels/conv_relu_pool_cuda.cuh"
#include "kernels/cuda_types.cuh"
#include "kernels/mma.cuh"

namespace mf::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kCo = 64;          // Cout per block (M)
constexpr int kCi = 32;          // Cin per block (N)
constexpr int kTileH = 8;        // conv rows per pixel tile
constexpr int kTileW = 16;       // conv columns per pixel tile (= one k16 step)
constexpr int kXRow = kCi + 8;   // smem row of x (halves): 80 bytes
constexpr int kGRow = kCo + 8;   // smem row of g (halves): 144 bytes
constexpr int kMaxChunks = 512;  // partial sums per weight, at most

// Which pixel tiles exist: tiles_h x tiles_w per image over the conv rows and
// columns that feed the pool (PH*P x PW*P; the floor-dropped edge gets no
// gradient).
struct TileGrid {
  int conv_h, conv_w, tiles_h, tiles_w;
  __host__ __device__ std::int64_t per_image() const { return std::int64_t(tiles_h) * tiles_w; }
};

__host__ __device__ inline TileGrid tile_grid(const ConvReluPoolDims& d) {
  const int ch = d.ph() * d.pool, cw = d.pw() * d.pool;
  return {ch, cw, (ch + kTileH - 1) / kTileH, (cw + kTileW - 1) / kTileW};
}

template <class D, int K>
struct DwSmem {
  static constexpr int kHaloH = kTileH + K - 1, kHaloW = kTileW + K - 1;
  D x[2][kHaloH * kHaloW][kXRow];       // double-buffered input halo, [pixel][ci]
  D g[kTileH * kTileW][kGRow];          // routed gradient, [pixel][co]
};

// The x halo of tile (n, oh0, ow0) into buffer `xs`, as 16-byte cp.async copies
// (4 per pixel); pixels outside the image and channels >= Cin become zeros.
template <class D, int K>
__device__ __forceinline__ void stage_x(const ConvReluPoolDims& d, const D* __restrict__ x, std::int64_t n,
                                        int oh0, int ow0, int ci0, D (*xs)[kXRow]) {
  constexpr int kHaloH = kTileH + K - 1, kHaloW = kTileW + K - 1, kParts = kCi / 8;
  constexpr int pad = K / 2;
  constexpr int kCopies = kHaloH * kHaloW * kParts;
#pragma unroll
  for (int it = 0; it < (kCopies + kThreads - 1) / kThreads; ++it) {  // a fixed trip count: all copies in flight
    const int e = int(threadIdx.x) + it * kThreads;
    if (e >= kCopies) break;
    const int pix = e / kParts, part = e % kParts;
    const int ih = oh0 - pad + pix / kHaloW, iw = ow0 - pad + pix % kHaloW, ci = ci0 + part * 8;
    const bool valid = ih >= 0 && ih < d.h && iw >= 0 && iw < d.w && ci < d.cin;
    const D* src = valid ? x + ((n * d.h + ih) * d.w + iw) * d.cin + ci : x;
    mma::cp_async16(&xs[pix][part * 8], src, valid);
  }
}

// g of tile (n, oh0, ow0) into smem: each thread builds 8 channels per pixel
// from one 16-byte dy load and one 8-byte code load, and (when `db_sum`) adds
// them to its 8 running bias sums. A thread's channel group is tid % 8 for
// every pixel it stages (the stride, 256, is a multiple of 8).
template <class D, int P>
__device__ __forceinline__ void stage_g(const ConvReluPoolDims& d, const TileGrid& tg, const D* __restrict__ dy,
                                        const std::uint8_t* __restrict__ code, std::int64_t n, int oh0, int ow0,
                                        int co0, D (*gs)[kGRow], bool db_sum, float (&db)[8]) {
  constexpr int kGroups = kCo / 8;
  const int ph_n = d.ph(), pw_n = d.pw();
  static_assert(kTileH * kTileW * kGroups % kThreads == 0, "every thread stages the same number of vectors");
#pragma unroll 2  // two vectors in flight per thread; a full unroll spills at k = 3 (72 accumulators live)
  for (int it = 0; it < kTileH * kTileW * kGroups / kThreads; ++it) {
    const int e = int(threadIdx.x) + it * kThreads;
    const int grp = e % kGroups, pix = e / kGroups;
    const int oh = oh0 + pix / kTileW, ow = ow0 + pix % kTileW, co = co0 + grp * 8;
    uint4 out = make_uint4(0, 0, 0, 0);
    if (oh < tg.conv_h && ow < tg.conv_w && co < d.cout) {
      const std::int64_t o = ((n * ph_n + oh / P) * pw_n + ow / P) * d.cout + co;
      const uint4 v = *reinterpret_cast<const uint4*>(dy + o);
      const uint2 c = *reinterpret_cast<const uint2*>(code + o);
      const std::uint32_t pos = std::uint32_t((oh % P) * P + ow % P);
      const std::uint32_t vw[4] = {v.x, v.y, v.z, v.w}, cw[2] = {c.x, c.y};
      std::uint32_t ow4[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        // channels 2j (low half) and 2j + 1 (high half); their codes are bytes 2j, 2j + 1
        const std::uint32_t c_lo = (cw[j / 2] >> (16 * (j % 2))) & 0xffu, c_hi = (cw[j / 2] >> (16 * (j % 2) + 8)) & 0xffu;
        ow4[j] = (c_lo == pos ? vw[j] & 0x0000ffffu : 0u) | (c_hi == pos ? vw[j] & 0xffff0000u : 0u);
      }
      out = make_uint4(ow4[0], ow4[1], ow4[2], ow4[3]);
      if (db_sum) {
        const D* h = reinterpret_cast<const D*>(ow4);
#pragma unroll
        for (int i = 0; i < 8; ++i) db[i] += cuda::load_f32(h[i]);
      }
    }
    *reinterpret_cast<uint4*>(&gs[pix][grp * 8]) = out;
  }
}

template <class D, int K, int P>
__global__ void __launch_bounds__(kThreads, 2)
    resident_dw_kernel(ConvReluPoolDims d, const D* __restrict__ x, const D* __restrict__ dy,
                       const std::uint8_t* __restrict__ code, int chunks, int ci_tiles, float* __restrict__ part) {
  constexpr int kTaps = K * K, kHaloW = kTileW + K - 1;
  __shared__ __align__(16) DwSmem<D, K> sm;

  const TileGrid tg = tile_grid(d);
  const std::int64_t tiles = d.n * tg.per_image();
  const std::int64_t t0 = tiles * blockIdx.x / chunks, t1 = tiles * (blockIdx.x + 1) / chunks;
  const int co0 = int(blockIdx.y / ci_tiles) * kCo, ci0 = int(blockIdx.y % ci_tiles) * kCi;
  const bool do_db = ci0 == 0;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp % 4, wn = warp / 4;  // the warp's 16 Cout rows and 16 Cin columns
  // ldmatrix row of this lane: matrix lane / 8, row lane % 8.
  const int lm = lane / 8, lr = lane % 8;
  // A (g^T): matrices (co 0-7, px 0-7), (co 8-15, px 0-7), (co 0-7, px 8-15), (co 8-15, px 8-15).
  const int a_px = (lm / 2) * 8 + lr, a_co = wm * 16 + (lm % 2) * 8;
  // B (x): matrices (px 0-7, ci 0-7), (px 8-15, ci 0-7), (px 0-7, ci 8-15), (px 8-15, ci 8-15).
  const int b_px = (lm % 2) * 8 + lr, b_ci = wn * 16 + (lm / 2) * 8;

  float acc[kTaps][2][4];
#pragma unroll
  for (int t = 0; t < kTaps; ++t)
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[t][j][i] = 0.f;
  float db[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};

  auto origin = [&](std::int64_t t, std::int64_t& n, int& oh0, int& ow0) {
    n = t / tg.per_image();
    const int r = int(t % tg.per_image());
    oh0 = (r / tg.tiles_w) * kTileH;
    ow0 = (r % tg.tiles_w) * kTileW;
  };

  int buf = 0;
  if (t0 < t1) {
    std::int64_t n;
    int oh0, ow0;
    origin(t0, n, oh0, ow0);
    stage_x<D, K>(d, x, n, oh0, ow0, ci0, sm.x[0]);
  }
  mma::cp_async_commit();
  for (std::int64_t t = t0; t < t1; ++t) {
    std::int64_t n;
    int oh0, ow0;
    origin(t, n, oh0, ow0);
    stage_g<D, P>(d, tg, dy, code, n, oh0, ow0, co0, sm.g, do_db, db);
    if (t + 1 < t1) {  // the next tile's halo flies while this tile's MMAs run
      std::int64_t nn;
      int noh0, now0;
      origin(t + 1, nn, noh0, now0);
      stage_x<D, K>(d, x, nn, noh0, now0, ci0, sm.x[buf ^ 1]);
    }
    mma::cp_async_commit();
    mma::cp_async_wait<1>();  // this tile's halo has landed (the newest group may still fly)
    __syncthreads();
    const D (*xs)[kXRow] = sm.x[buf];
#pragma unroll 1
    for (int row = 0; row < kTileH; ++row) {
      std::uint32_t a[4];
      mma::ldmatrix_x4<true>(a, &sm.g[row * kTileW + a_px][a_co]);
#pragma unroll
      for (int r = 0; r < K; ++r)
#pragma unroll
        for (int s = 0; s < K; ++s) {
          std::uint32_t b[4];
          mma::ldmatrix_x4<true>(b, &xs[(row + r) * kHaloW + b_px + s][b_ci]);
          mma::mma_16816<D>(acc[r * K + s][0], a, b[0], b[1]);
          mma::mma_16816<D>(acc[r * K + s][1], a, b[2], b[3]);
        }
    }
    __syncthreads();  // g and this halo buffer are free for the next tile
    buf ^= 1;
  }
  mma::cp_async_wait<0>();

  // acc[tap][j][i]: co = co0 + 16 wm + g + 8 (i / 2), ci = ci0 + 16 wn + 8 j + 2 t + i % 2.
  const int kkc = kTaps * d.cin, g = lane / 4, tq = lane % 4;
  float* const chunk_part = part + std::int64_t(blockIdx.x) * d.cout * (kkc + 1);
#pragma unroll
  for (int tap = 0; tap < kTaps; ++tap)
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int co = co0 + wm * 16 + g + (i / 2) * 8, ci = ci0 + wn * 16 + j * 8 + 2 * tq + i % 2;
        if (co < d.cout && ci < d.cin) chunk_part[std::int64_t(co) * (kkc + 1) + tap * d.cin + ci] = acc[tap][j][i];
      }
  if (do_db) {
    // Every thread's 8 sums (channels 8 (tid % 8) + i), then for each channel
    // the 32 threads of its group added in thread order.
    float(*dbs)[8] = reinterpret_cast<float(*)[8]>(&sm.g[0][0]);  // g is free after the last barrier
    static_assert(sizeof(sm.g) >= kThreads * 8 * sizeof(float), "db scratch must fit in the g buffer");
#pragma unroll
    for (int i = 0; i < 8; ++i) dbs[tid][i] = db[i];
    __syncthreads();
    if (tid < kCo && co0 + tid < d.cout) {
      const int grp = tid / 8, i = tid % 8;
      float sum = 0.f;
      for (int u = grp; u < kThreads; u += 8) sum += dbs[u][i];
      chunk_part[std::int64_t(co0 + tid) * (kkc + 1) + kkc] = sum;
    }
  }
}

bool aligned(const void* p, std::uintptr_t bytes) { return (reinterpret_cast<std::uintptr_t>(p) & (bytes - 1)) == 0; }

template <class D, int K, int P>
void launch_dw(const ConvReluPoolDims& d, const D* x, const D* dy, const std::uint8_t* code, float* dw, float* db,
               cudaStream_t stream) {
  const int kkc = K * K * d.cin;
  const std::int64_t floats_per_chunk = std::int64_t(d.cout) * (kkc + 1);
  const std::int64_t tiles = d.n * tile_grid(d).per_image();
  constexpr std::int64_t kMaxFloats = std::int64_t(16) << 20;  // 64 MiB of partials
  std::int64_t chunks = kMaxFloats / floats_per_chunk;
  chunks = chunks < 1 ? 1 : (chunks > kMaxChunks ? kMaxChunks : chunks);
  if (tiles < chunks) chunks = tiles;
  WeightPartials ws(std::size_t(chunks) * std::size_t(floats_per_chunk), stream);
  if (chunks > 0) {
    const int ci_tiles = (d.cin + kCi - 1) / kCi, co_tiles = (d.cout + kCo - 1) / kCo;
    resident_dw_kernel<D, K, P><<<dim3(unsigned(chunks), unsigned(co_tiles * ci_tiles)), kThreads, 0, stream>>>(
        d, x, dy, code, int(chunks), ci_tiles, ws.data());
    MF_CUDA_CHECK_LAUNCH();
  }
  launch_reduce_partials(d, ws.data(), int(chunks), dw, db, stream);
}

}  // namespace

bool resident_can_run(const ConvReluPoolDims& d, DType dtype) {
  if (dtype != DType::bf16 && dtype != DType::f16) return false;
  if (!((d.k == 1 || d.k == 3) && (d.pool == 1 || d.pool == 2) && d.cin % 16 == 0 && d.cout % 16 == 0)) return false;
  int dev = 0, major = 0;
  MF_CUDA_CHECK(cudaGetDevice(&dev));
  MF_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  return major >= 8;
}

template <class T>
bool resident_dw(const ConvReluPoolDims& d, const void* x, const void* dy, const std::uint8_t* code, float* dw,
                 float* db, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    return false;
  } else {
    using D = cuda::device_t<T>;
    const DType dt = std::is_same_v<T, bf16> ? DType::bf16 : DType::f16;
    if (!resident_can_run(d, dt) || !aligned(x, 16) || !aligned(dy, 16) || !aligned(code, 8)) return false;
    const auto* xd = static_cast<const D*>(x);
    const auto* dyd = static_cast<const D*>(dy);
    if (d.k == 3 && d.pool == 2) launch_dw<D, 3, 2>(d, xd, dyd, code, dw, db, stream);
    else if (d.k == 3) launch_dw<D, 3, 1>(d, xd, dyd, code, dw, db, stream);
    else if (d.pool == 2) launch_dw<D, 1, 2>(d, xd, dyd, code, dw, db, stream);
    else launch_dw<D, 1, 1>(d, xd, dyd, code, dw, db, stream);
    return true;
  }
}

#define MF_INSTANTIATE(T)                                                                                    \
  template bool resident_dw<T>(const ConvReluPoolDims&, const void*, const void*, const std::uint8_t*, float*, \
                               float*, cudaStream_t);
MF_INSTANTIATE(float)
MF_INSTANTIATE(f16)
MF_INSTANTIATE(bf16)
#undef MF_INSTANTIATE

}  // namespace mf::kernels
