// conv_relu_pool variant 5, "resident": the weight and bias gradients on
// tensor cores (bf16/f16, sm_80+), shaped for LeakCNN's layers 2-3 (Cin 32-64,
// Cout 64-128, 32x32 / 16x16 maps, batches in the thousands).
//   dw[co][r][s][ci] = sum over conv pixels q of g[q][co] * x[q + (r, s) - pad][ci]
//   db[co]           = sum over q of g[q][co]
// where g is the gradient routed through the 2x2 max and the ReLU: dy of the
// pool window where the 1-byte code names q's position, else 0.
// Router: `automatic` or ConvAlgo::resident, and resident_can_run (bf16/f16, k 1 or 3, pool 1
// or 2, Cin and Cout multiples of 16, sm_80+); refused (shared memory,
// alignment), the caller's chain (mma, tiled, direct) computes dw.
// resident_dw_kernel<D, K, P>: one GEMM per tap, M = 64 Cout x N = 32 Cin, the
// reduction over pixels. A block owns one (Cout tile, Cin tile) pair and a
// contiguous range of pixel tiles (8 conv rows x 16 columns) and accumulates
// ALL k*k taps in registers (x, dy and the codes read once per tile pair).
// Output: one f32 partial per (chunk = block x, co, tap, ci) and per (chunk,
// co) for db, in launch_reduce_partials' layout, summed in chunk order. No
// atomics: the bits depend on the shape only. Thread layout, bytes per MAC,
// shared memory, registers, ceilings: bench/NOTES.md, "Kernel lab notes".
#include <cuda_runtime.h>

#include <type_traits>

#include "engine/error.hpp"
#include "kernels/conv_relu_pool_cuda.cuh"
#include "kernels/conv_route.cuh"
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

template <class D, int K, int P>
struct DwSmem {
  static constexpr int kHaloH = kTileH + K - 1, kHaloW = kTileW + K - 1;
  static constexpr int kPooled = (kTileH / P) * (kTileW / P);  // pooled cells under one tile
  D x[2][kHaloH * kHaloW][kXRow];       // double-buffered input halo, [pixel][ci]
  D g[kTileH * kTileW][kGRow];          // routed gradient, [pixel][co]
  D dy[kPooled][kCo];                   // the next tile's dy and codes as stored (cp.async)
  std::uint8_t code[kPooled][kCo];
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

// The dy and code cells under tile (n, oh0, ow0) (tile origins are multiples
// of the pool) as 16-byte cp.async copies: 8 per cell of dy, 4 of codes (Cout
// % 16 == 0 keeps a cell's codes 16-byte aligned). Cells beyond the pooled map
// and channels >= Cout read as dy 0 with code 0, so they route 0.
template <class D, int K, int P>
__device__ __forceinline__ void stage_raw(const ConvReluPoolDims& d, const D* __restrict__ dy,
                                          const std::uint8_t* __restrict__ code, std::int64_t n, int oh0, int ow0,
                                          int co0, DwSmem<D, K, P>& sm) {
  constexpr int kCellsW = kTileW / P, kCells = DwSmem<D, K, P>::kPooled;
  constexpr int kDyParts = kCo / 8, kCodeParts = kCo / 16, kCopies = kCells * (kDyParts + kCodeParts);
  const int ph_n = d.ph(), pw_n = d.pw();
#pragma unroll
  for (int it = 0; it < (kCopies + kThreads - 1) / kThreads; ++it) {
    const int e = int(threadIdx.x) + it * kThreads;
    if (e >= kCopies) break;
    const bool is_dy = e < kCells * kDyParts;
    const int parts = is_dy ? kDyParts : kCodeParts, f = is_dy ? e : e - kCells * kDyParts;
    const int cell = f / parts, part = f % parts;
    const int ph = oh0 / P + cell / kCellsW, pw = ow0 / P + cell % kCellsW;
    const int co = co0 + part * (is_dy ? 8 : 16);
    const bool valid = ph < ph_n && pw < pw_n && co < d.cout;
    const std::int64_t o = ((n * ph_n + ph) * pw_n + pw) * d.cout + co;
    if (is_dy) mma::cp_async16(&sm.dy[cell][part * 8], valid ? dy + o : dy, valid);
    else mma::cp_async16(&sm.code[cell][part * 16], valid ? code + o : code, valid);
  }
}

// g of the staged tile into sm.g: a thread routes 8 channels of one conv pixel
// at a time (16 bytes of dy, 8 code bytes, from smem) and, when `db_sum`, adds
// them to its 8 running bias sums. Its channel group is tid % 8 for every
// pixel (the stride, 256, is a multiple of 8), so the sums stay per channel.
template <class D, int K, int P>
__device__ __forceinline__ void route_g(DwSmem<D, K, P>& sm, bool db_sum, float (&db)[8]) {
  constexpr int kGroups = kCo / 8, kCellsW = kTileW / P;
  static_assert(kTileH * kTileW * kGroups % kThreads == 0, "every thread routes the same number of vectors");
#pragma unroll 1  // smem-fed: nothing to overlap; unrolled, it spills beside 72 live accumulators at k = 3
  for (int it = 0; it < kTileH * kTileW * kGroups / kThreads; ++it) {
    const int e = int(threadIdx.x) + it * kThreads;
    const int grp = e % kGroups, pix = e / kGroups;
    const int r = pix / kTileW, c = pix % kTileW, cell = (r / P) * kCellsW + c / P;
    const uint4 v = *reinterpret_cast<const uint4*>(&sm.dy[cell][grp * 8]);
    const uint2 cb = *reinterpret_cast<const uint2*>(&sm.code[cell][grp * 8]);
    const uint4 routed = route8(v, cb, unsigned((r % P) * P + c % P));
    const std::uint32_t gw[4] = {routed.x, routed.y, routed.z, routed.w};
    if (db_sum) {
      const D* h = reinterpret_cast<const D*>(gw);
#pragma unroll
      for (int i = 0; i < 8; ++i) db[i] += cuda::load_f32(h[i]);
    }
    *reinterpret_cast<uint4*>(&sm.g[pix][grp * 8]) = routed;
  }
}

template <class D, int K, int P>
__global__ void __launch_bounds__(kThreads, 2)
    resident_dw_kernel(ConvReluPoolDims d, const D* __restrict__ x, const D* __restrict__ dy,
                       const std::uint8_t* __restrict__ code, int chunks, int ci_tiles, float* __restrict__ part) {
  constexpr int kTaps = K * K, kHaloW = kTileW + K - 1;
  extern __shared__ __align__(16) unsigned char dw_smem[];  // DwSmem: 53-72 KB at k = 3, opt-in at launch
  DwSmem<D, K, P>& sm = *reinterpret_cast<DwSmem<D, K, P>*>(dw_smem);

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

  // Per tile t: [wait for t's halo, dy and codes; barrier] [route g] [barrier]
  // [issue t+1's halo, dy and codes by cp.async] [the MMAs of t]: the next
  // tile's loads fly during this tile's MMAs, and no thread waits on a global
  // load outside the copy engine.
  int buf = 0;
  if (t0 < t1) {
    std::int64_t n;
    int oh0, ow0;
    origin(t0, n, oh0, ow0);
    stage_x<D, K>(d, x, n, oh0, ow0, ci0, sm.x[0]);
    stage_raw<D, K, P>(d, dy, code, n, oh0, ow0, co0, sm);
  }
  mma::cp_async_commit();
  for (std::int64_t t = t0; t < t1; ++t) {
    mma::cp_async_wait<0>();  // tile t's copies have landed ...
    __syncthreads();          // ... for every thread; and tile t-1's MMAs are done (g is free)
    route_g<D, K, P>(sm, do_db, db);
    __syncthreads();          // g is ready; the dy/code buffer is free
    if (t + 1 < t1) {
      std::int64_t n;
      int oh0, ow0;
      origin(t + 1, n, oh0, ow0);
      stage_x<D, K>(d, x, n, oh0, ow0, ci0, sm.x[buf ^ 1]);
      stage_raw<D, K, P>(d, dy, code, n, oh0, ow0, co0, sm);
    }
    mma::cp_async_commit();
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
    __syncthreads();  // every warp's last MMAs have read g
    float(*dbs)[8] = reinterpret_cast<float(*)[8]>(&sm.g[0][0]);
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

template <class D, int K, int P>
void launch_dw(const ConvReluPoolDims& d, const D* x, const D* dy, const std::uint8_t* code, float* dw, float* db,
               cudaStream_t stream) {
  const std::int64_t tiles = d.n * tile_grid(d).per_image();
  dw_db_by_partials(d, tiles, kMaxChunks, dw, db, stream, [&](int chunks, float* part) {
    const int ci_tiles = (d.cin + kCi - 1) / kCi, co_tiles = (d.cout + kCo - 1) / kCo;
    constexpr std::size_t smem = sizeof(DwSmem<D, K, P>);
    if (smem > 48 * 1024)  // all sizes fit every sm_80+ opt-in limit (99 KB and up)
      raise_dynamic_smem_limit(reinterpret_cast<const void*>(resident_dw_kernel<D, K, P>), smem);
    resident_dw_kernel<D, K, P><<<dim3(unsigned(chunks), unsigned(co_tiles * ci_tiles)), kThreads, smem, stream>>>(
        d, x, dy, code, chunks, ci_tiles, part);
    MF_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

bool resident_can_run(const ConvReluPoolDims& d, DType dtype) {
  if (dtype != DType::bf16 && dtype != DType::f16) return false;
  if (!((d.k == 1 || d.k == 3) && (d.pool == 1 || d.pool == 2) && d.cin % 16 == 0 && d.cout % 16 == 0)) return false;
  return gpu_is_sm80_or_newer();
}

template <class T>
bool resident_dw(const ConvReluPoolDims& d, const void* x, const void* dy, const std::uint8_t* code, float* dw,
                 float* db, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    return false;
  } else {
    using D = cuda::device_t<T>;
    // x, dy, code non-null (dw always needs them), so null-as-aligned does not apply
    if (!resident_can_run(d, dtype_of_v<T>) || !aligned_to(x, 16) || !aligned_to(dy, 16) || !aligned_to(code, 16))
      return false;
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
