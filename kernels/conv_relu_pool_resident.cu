// conv_relu_pool variant 5, "resident": forward and dx on tensor cores (bf16/f16
// implicit GEMM, mma.sync.m16n8k16, f32 accumulation, sm_80+); dw/db are in
// conv_relu_pool_resident_dw.cu. Shaped for LeakCNN-64's layers 2/3 at a large
// batch: tiny weights, kept resident in shared memory, a huge batch.
// Router: `automatic`'s first choice (and ConvAlgo::resident) when resident_can_run (bf16/
// f16, k 1 or 3, pool 1 or 2, Cin and Cout multiples of 16, sm_80+); a part it
// refuses (shared memory, 16-byte alignment) falls back to the mma variant.
// resident_kernel<D, K, P, NT, Mode> runs both directions as a forward-style
// convolution over 16-channel stages, weights [out][K*K*in] (OHWI):
//   forward  x [N,H,W,Cin] -> y, code [N,PH,PW,Cout]: + bias, ReLU, p x p max
//            with the mma variant's rules (ties to the first element in
//            row-major order, NaN wins, a winner <= 0 gives kNoGrad).
//   dx       g = dy routed through the codes, correlated with w'[ci][r][s][co] =
//            w[co][K-1-r][K-1-s][ci] (flip_weights_kernel) -> dx [N,H,W,Cin].
// A block: 16 x 16 output pixels x NT*8 output channels (pick_nt), 256 threads,
// persistent over tiles. No float atomics; a tile's result depends only on its
// inputs, never on the grid. Layout details, shared-memory sizes, register
// counts and predictions: bench/NOTES.md, "Kernel lab notes".
#include <cuda_runtime.h>

#include <cstdlib>
#include <type_traits>

#include "engine/error.hpp"
#include "kernels/conv_relu_pool_cuda.cuh"
#include "kernels/conv_route.cuh"
#include "kernels/cuda_types.cuh"
#include "kernels/launch.cuh"
#include "kernels/mma.cuh"

namespace mf::kernels {

namespace {

constexpr int kThreads = 256;  // 8 warps
constexpr int kTile = 16;      // output tile side (pixels)
constexpr int kKC = 16;        // input channels per stage
constexpr int kRowA = kKC + 8; // halves per halo pixel in shared memory (48 B)
constexpr int kStages = 2;     // halo buffers
constexpr unsigned kFull = 0xffffffffu;

enum class Mode { forward, dx };

// Compile-time halo geometry for a k x k conv.
template <int K>
struct Halo {
  static constexpr int kPad = K / 2;
  static constexpr int kHW = kTile + K - 1;           // halo side
  static constexpr int kHaloPix = kHW * kHW;
  static constexpr int kItems = kHaloPix * 2;         // 16-byte pieces per stage (2 per pixel)
  static constexpr int kPerThread = (kItems + kThreads - 1) / kThreads;
  static constexpr int kStageHalves = kHaloPix * kRowA;
};

// Everything a block needs; built by the launcher. "in" is the GEMM's input
// (x, or dy routed by code_in), "out" its output (y + code_out, or dx).
template <class D>
struct Args {
  const D* in;
  const std::uint8_t* code_in;  // dx: the forward's codes [N,PH,PW,Cout]
  const D* wgt;                 // [out_c][K*K*in_c]
  const D* bias;                // forward: [Cout]
  D* out;
  std::uint8_t* code_out;       // forward: may be null
  int h, w, ph, pw;             // the layer's dims (conv H x W, pooled PH x PW)
  int in_c, out_c;
  int row_w;                    // K*K*in_c + 8: the resident weight row (halves)
  int out_h, out_w;             // output pixel grid tiled by 16 x 16
  int src_h, src_w;             // where the input is non-zero (x: H x W; g: PH*p x PW*p)
  int tiles_x, tiles_per_img, tiles, chunks;  // chunks = in_c / 16 stages per tile
};

// Walks a block's (tile, stage) sequence: tiles blockIdx.x, + gridDim.x, ...
struct Cursor {
  int tile = 0, chunk = 0, img = 0, oh0 = 0, ow0 = 0;
  template <class D>
  __device__ void set(int t, const Args<D>& a) {
    tile = t;
    chunk = 0;
    img = t / a.tiles_per_img;
    const int r = t - img * a.tiles_per_img, ty = r / a.tiles_x;
    oh0 = ty * kTile;
    ow0 = (r - ty * a.tiles_x) * kTile;
  }
  template <class D>
  __device__ void next(const Args<D>& a) {
    if (++chunk == a.chunks) set(tile + int(gridDim.x), a);
  }
};

// ---- staging --------------------------------------------------------------

// The block's weight slice (rows n0 .. n0 + kN - 1, zero beyond out_c) into
// shared memory, once: 16-byte cp.async pieces, one group (the caller commits).
template <class D, int NT>
__device__ void stage_weights(const Args<D>& a, D* sw, int n0) {
  constexpr int kN = NT * 8;
  const int per_row = (a.row_w - 8) / 8;  // K*K*in_c / 8
  for (int e = threadIdx.x; e < kN * per_row; e += kThreads) {
    const int n = e / per_row, part = e - n * per_row;
    const bool ok = n0 + n < a.out_c;
    const D* src = ok ? a.wgt + std::int64_t(n0 + n) * (a.row_w - 8) + part * 8 : a.wgt;
    mma::cp_async16(sw + n * a.row_w + part * 8, src, ok);
  }
}

// Forward: one stage of the x halo (16 channels from c0) by cp.async, zero
// outside the image.
template <class D, int K>
__device__ void issue_x_halo(const Args<D>& a, const Cursor& c, D* sa) {
  using G = Halo<K>;
  const int c0 = c.chunk * kKC;
#pragma unroll
  for (int i = 0; i < G::kPerThread; ++i) {
    const int e = threadIdx.x + i * kThreads;
    if (G::kItems % kThreads != 0 && e >= G::kItems) break;
    const int pix = e >> 1, part = e & 1, hr = pix / G::kHW, hc = pix - hr * G::kHW;
    const int ih = c.oh0 - G::kPad + hr, iw = c.ow0 - G::kPad + hc;
    const bool ok = unsigned(ih) < unsigned(a.src_h) && unsigned(iw) < unsigned(a.src_w);
    const D* src = ok ? a.in + ((std::int64_t(c.img) * a.h + ih) * a.w + iw) * a.in_c + c0 + part * 8 : a.in;
    mma::cp_async16(sa + pix * kRowA + part * 8, src, ok);
  }
}

// dx: one stage of the routed-gradient halo, in two steps so that the global
// loads overlap the MMAs: fetch (dy and code vectors into registers), then
// route_and_store (g into shared memory).
template <int K>
struct Fetched {
  uint4 dy[Halo<K>::kPerThread];
  uint2 code[Halo<K>::kPerThread];
};

template <class D, int K, int P>
__device__ void fetch_g(const Args<D>& a, const Cursor& c, Fetched<K>& f) {
  using G = Halo<K>;
  constexpr int kShift = P == 2 ? 1 : 0;
  const int c0 = c.chunk * kKC;
#pragma unroll
  for (int i = 0; i < G::kPerThread; ++i) {
    const int e = threadIdx.x + i * kThreads;
    f.dy[i] = make_uint4(0, 0, 0, 0);
    f.code[i] = make_uint2(0, 0);
    if (G::kItems % kThreads != 0 && e >= G::kItems) break;
    const int pix = e >> 1, part = e & 1, hr = pix / G::kHW, hc = pix - hr * G::kHW;
    const int oh = c.oh0 - G::kPad + hr, ow = c.ow0 - G::kPad + hc;
    if (unsigned(oh) < unsigned(a.src_h) && unsigned(ow) < unsigned(a.src_w)) {
      const std::int64_t o =
          ((std::int64_t(c.img) * a.ph + (oh >> kShift)) * a.pw + (ow >> kShift)) * a.in_c + c0 + part * 8;
      f.dy[i] = *reinterpret_cast<const uint4*>(a.in + o);
      f.code[i] = *reinterpret_cast<const uint2*>(a.code_in + o);
    }
  }
}

template <class D, int K, int P>
__device__ void route_and_store_g(const Fetched<K>& f, D* sa) {
  using G = Halo<K>;
#pragma unroll
  for (int i = 0; i < G::kPerThread; ++i) {
    const int e = threadIdx.x + i * kThreads;
    if (G::kItems % kThreads != 0 && e >= G::kItems) break;
    const int pix = e >> 1, part = e & 1, hr = pix / G::kHW, hc = pix - hr * G::kHW;
    // Tiles start at multiples of 16, so a pixel's place in its pool window
    // depends on its halo position only. Out-of-range pixels fetched zeros.
    const unsigned pos = P == 2 ? unsigned(((hr - G::kPad) & 1) * 2 + ((hc - G::kPad) & 1)) : 0u;
    *reinterpret_cast<uint4*>(sa + pix * kRowA + part * 8) = route8(f.dy[i], f.code[i], pos);
  }
}

// ---- the MMAs of one stage --------------------------------------------------

// acc[i][j] += A(m16 tile i of this warp) x B(n-tile j) over the K*K taps and
// the stage's 16 channels. a_lane / w_lane: this lane's ldmatrix row address
// for tap (0, 0) of the stage / for weight column 0.
template <class D, int K, int NT>
__device__ __forceinline__ void mma_stage(float (&acc)[2][NT][4], const D* a_lane, const D* w_lane, int row_w,
                                          int in_c, int c0) {
  using G = Halo<K>;
#pragma unroll 1  // rolled: unrolling all k*k taps lets ptxas hoist fragment loads and spill
  for (int r = 0; r < K; ++r) {
#pragma unroll
    for (int s = 0; s < K; ++s) {
      std::uint32_t a[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) mma::ldmatrix_x4<false>(a[i], a_lane + (r * G::kHW + s + 8 * i) * kRowA);
      const D* wp = w_lane + (r * K + s) * in_c + c0;
#pragma unroll
      for (int p = 0; p < NT / 2; ++p) {
        std::uint32_t b[4];  // b[0], b[1]: n-tile 2p; b[2], b[3]: n-tile 2p + 1
        mma::ldmatrix_x4<false>(b, wp + 16 * p * row_w);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          mma::mma_16816<D>(acc[i][2 * p], a[i], b[0], b[1]);
          mma::mma_16816<D>(acc[i][2 * p + 1], a[i], b[2], b[3]);
        }
      }
    }
  }
}

// ---- epilogue ---------------------------------------------------------------

// Stores one pixel's NT*8 channels (this quad's words) as 16-byte pieces;
// px points at the pixel's channel n0. Every lane must call (shuffles).
template <class D, int NT>
__device__ __forceinline__ void store_values(const std::uint32_t (&yw)[NT], bool ok, D* px, int n_left, int t) {
#pragma unroll
  for (int jj = 0; jj < NT; jj += 4) {
    const std::uint32_t w[4] = {yw[jj], yw[jj + 1], yw[jj + 2], yw[jj + 3]};
    const uint4 v = mma::quad_transpose(w, t);
    const int c = 8 * (jj + t);
    if (ok && c < n_left) *reinterpret_cast<uint4*>(px + c) = v;
  }
}

// The codes of the same channels, cw[j] = 2 code bytes (channel 8j + 2t low):
// 8 bytes per lane and n-tile.
template <int NT>
__device__ __forceinline__ void store_codes(const std::uint32_t (&cw)[NT], bool ok, std::uint8_t* px, int n_left,
                                            int t) {
  std::uint32_t w[4];  // n-tile j in the low half, j + 4 in the high half
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    w[j] = cw[j];
    if constexpr (NT == 8) w[j] |= cw[j + 4] << 16;
  }
  const uint4 v = mma::quad_transpose(w, t);
  if (!ok) return;
  if (8 * t < n_left)
    *reinterpret_cast<uint2*>(px + 8 * t) =
        make_uint2((v.x & 0xffffu) | (v.y << 16), (v.z & 0xffffu) | (v.w << 16));
  if (NT == 8 && 8 * (t + 4) < n_left)
    *reinterpret_cast<uint2*>(px + 8 * (t + 4)) =
        make_uint2((v.x >> 16) | (v.y & 0xffff0000u), (v.z >> 16) | (v.w & 0xffff0000u));
}

// Forward: bias + ReLU + p x p max + code for this warp's 2 x 16 pixels.
template <class D, int P, int NT>
__device__ void epilogue_forward(const float (&acc)[2][NT][4], const Args<D>& a, const Cursor& c, int n0) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int n_left = a.out_c - n0;
  const int oh = c.oh0 + 2 * warp;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int ow = c.ow0 + 8 * i + g;
#pragma unroll
    for (int rr = 0; rr < (P == 2 ? 1 : 2); ++rr) {
      std::uint32_t yw[NT], cw[NT];
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int co = n0 + 8 * j + 2 * t;  // out_c % 16 == 0: co and co + 1 together
        const float bias[2] = {co < a.out_c ? cuda::load_f32(a.bias[co]) : 0.f,
                               co < a.out_c ? cuda::load_f32(a.bias[co + 1]) : 0.f};
        float res[2];
        std::uint32_t cd[2];
#pragma unroll
        for (int cc = 0; cc < 2; ++cc) {
          float best;
          int bpos = 0;
          if constexpr (P == 2) {
            // Window rows oh, oh + 1 = fragment rows g, g + 8; its right column is lane ^ 4's.
            const float v0 = acc[i][j][cc] + bias[cc], v2 = acc[i][j][2 + cc] + bias[cc];
            const float win[4] = {v0, __shfl_xor_sync(kFull, v0, 4), v2, __shfl_xor_sync(kFull, v2, 4)};
            best = win[0];
#pragma unroll
            for (int q = 1; q < 4; ++q)
              if (win[q] > best || isnan(win[q])) {
                best = win[q];
                bpos = q;
              }
          } else {
            best = acc[i][j][2 * rr + cc] + bias[cc];
          }
          const bool pass = best > 0.f || isnan(best);
          res[cc] = pass ? best : 0.f;
          cd[cc] = pass ? std::uint32_t(bpos) : std::uint32_t(kNoGrad);
        }
        yw[j] = mma::pack_b16x2<D>(res[0], res[1]);
        cw[j] = cd[0] | (cd[1] << 8);
      }
      const int py = P == 2 ? oh / 2 : oh + rr, px = P == 2 ? ow / 2 : ow;
      const bool ok = (P == 1 || (g & 1) == 0) && py < a.ph && px < a.pw;
      const std::int64_t o = ((std::int64_t(c.img) * a.ph + py) * a.pw + px) * a.out_c + n0;
      store_values<D, NT>(yw, ok, a.out + (ok ? o : 0), n_left, t);
      if (a.code_out) store_codes<NT>(cw, ok, a.code_out + (ok ? o : 0), n_left, t);
    }
  }
}

// dx: the f32 sums rounded to D, this warp's 2 x 16 pixels.
template <class D, int NT>
__device__ void epilogue_dx(const float (&acc)[2][NT][4], const Args<D>& a, const Cursor& c, int n0) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int ih = c.oh0 + 2 * warp + rr, iw = c.ow0 + 8 * i + g;
      std::uint32_t yw[NT];
#pragma unroll
      for (int j = 0; j < NT; ++j) yw[j] = mma::pack_b16x2<D>(acc[i][j][2 * rr], acc[i][j][2 * rr + 1]);
      const bool ok = ih < a.h && iw < a.w;
      const std::int64_t o = ((std::int64_t(c.img) * a.h + ih) * a.w + iw) * a.out_c + n0;
      store_values<D, NT>(yw, ok, a.out + (ok ? o : 0), a.out_c - n0, t);
    }
  }
}

// ---- the kernel ---------------------------------------------------------------

// Registers and shared memory per instantiation: the file's header comment.
template <class D, int K, int P, int NT, Mode M>
__global__ void __launch_bounds__(kThreads, 2) resident_kernel(const Args<D> a) {
  using G = Halo<K>;
  constexpr int kN = NT * 8;  // output channels per block (slice)
  extern __shared__ __align__(16) uint4 smem_raw[];
  D* const sw = reinterpret_cast<D*>(smem_raw);  // [kN][row_w] resident weights
  D* const sa = sw + kN * a.row_w;            // [kStages][kHaloPix][kRowA] halos
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n0 = blockIdx.y * kN;

  stage_weights<D, NT>(a, sw, n0);
  mma::cp_async_commit();

  // ldmatrix row addresses. A (m16 tile i, tap (0,0)): matrix lane >> 3 holds
  // fragment rows (lane >> 3 & 1) * 8 .. +7 (tile row 2w or 2w + 1), channels
  // (lane >> 4) * 8 .. +7. B: matrix lane >> 3 holds n rows (lane >> 4) * 8 .. +7,
  // k columns (lane >> 3 & 1) * 8 .. +7.
  const int a_off = ((2 * warp + ((lane >> 3) & 1)) * G::kHW + (lane & 7)) * kRowA + (lane >> 4) * 8;
  const D* const w_lane = sw + ((lane >> 4) * 8 + (lane & 7)) * a.row_w + ((lane >> 3) & 1) * 8;

  Cursor load, comp;
  load.set(blockIdx.x, a);
  comp = load;
  [[maybe_unused]] Fetched<K> fetched;
  if constexpr (M == Mode::forward) {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (load.tile < a.tiles) {
        issue_x_halo<D, K>(a, load, sa + s * G::kStageHalves);
        load.next(a);
      }
      mma::cp_async_commit();
    }
  } else {
    fetch_g<D, K, P>(a, load, fetched);
    route_and_store_g<D, K, P>(fetched, sa);
    load.next(a);
    mma::cp_async_wait<0>();
    __syncthreads();
  }

  float acc[2][NT][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

  int stage = 0;
  while (comp.tile < a.tiles) {
    const bool more = load.tile < a.tiles;
    if constexpr (M == Mode::forward) {
      // This stage's copies (and, the first time, the weights') have landed
      // for every thread, and every warp is done with the buffer refilled next.
      mma::cp_async_wait<kStages - 2>();
      __syncthreads();
      if (more) issue_x_halo<D, K>(a, load, sa + ((stage + kStages - 1) % kStages) * G::kStageHalves);
      mma::cp_async_commit();
    } else {
      if (more) fetch_g<D, K, P>(a, load, fetched);
    }
    mma_stage<D, K, NT>(acc, sa + stage * G::kStageHalves + a_off, w_lane, a.row_w, a.in_c, comp.chunk * kKC);
    if (comp.chunk == a.chunks - 1) {
      if constexpr (M == Mode::forward) epilogue_forward<D, P, NT>(acc, a, comp, n0);
      else epilogue_dx<D, NT>(acc, a, comp, n0);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;
    }
    if constexpr (M == Mode::dx) {
      // The other buffer was last read before the previous barrier.
      if (more) route_and_store_g<D, K, P>(fetched, sa + (stage ^ 1) * G::kStageHalves);
      __syncthreads();
    }
    if (more) load.next(a);
    comp.next(a);
    stage = (stage + 1) % kStages;
  }
  if constexpr (M == Mode::forward) mma::cp_async_wait<0>();  // no copy outlives the block
}

// w'[ci][r][s][co] = w[co][K-1-r][K-1-s][ci]: dx's weights as an OHWI conv
// weight with O = Cin, I = Cout (73,728 elements for layer 3: negligible).
template <class D>
__global__ void flip_weights_kernel(const D* __restrict__ w, D* __restrict__ wf, int k, int cin, int cout) {
  const std::int64_t total = std::int64_t(cin) * k * k * cout;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const int co = int(i % cout);
    const std::int64_t rest = i / cout;
    const int rs = int(rest % (k * k)), ci = int(rest / (k * k));
    wf[i] = w[(std::int64_t(co) * k * k + (k * k - 1 - rs)) * cin + ci];
  }
}

// ---- launchers --------------------------------------------------------------------


std::size_t smem_bytes(int k, int nt, int row_w) {
  const int hw = kTile + k - 1;
  return 2 * (std::size_t(nt) * 8 * row_w + std::size_t(kStages) * hw * hw * kRowA);
}

struct DeviceLimits {
  int sms = 0, smem_optin = 0;
};
DeviceLimits device_limits() {
  int dev = 0;
  DeviceLimits l;
  MF_CUDA_CHECK(cudaGetDevice(&dev));
  MF_CUDA_CHECK(cudaDeviceGetAttribute(&l.sms, cudaDevAttrMultiProcessorCount, dev));
  MF_CUDA_CHECK(cudaDeviceGetAttribute(&l.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return l;
}

// Blocks of `smem` bytes that fit on one SM: shared memory per SM on sm_80..sm_120
// is the per-block opt-in limit + 1 KB, and each block reserves 1 KB; capped at
// 2 by __launch_bounds__(256, 2)'s register budget. 0: does not fit.
int blocks_per_sm(std::size_t smem, const DeviceLimits& lim) {
  if (smem > std::size_t(lim.smem_optin)) return 0;
  return std::size_t(lim.smem_optin) + 1024 >= 2 * (smem + 1024) ? 2 : 1;
}

// The N tile (n-tiles of 8 channels per block: 4 or 8), 0 when neither fits.
// 4 when the layer has <= 32 output channels (no half-empty MMAs); else 8
// (the wider warp tile, fewer shared-memory bytes per MAC) unless only 4 keeps
// two blocks per SM (layer 3's dx on sm_90: 179,584 B for 8 vs 105,344 for 4;
// a prediction to check on a GPU), or only 4 fits at all.
int pick_nt(int k, int out_c, int row_w, const DeviceLimits& lim) {
  const int narrow = blocks_per_sm(smem_bytes(k, 4, row_w), lim);
  if (out_c <= 32) return narrow > 0 ? 4 : 0;
  const int wide = blocks_per_sm(smem_bytes(k, 8, row_w), lim);
  if (wide > 0 && wide >= narrow) return 8;
  return narrow > 0 ? 4 : 0;
}

// Fills the geometry of Args for one direction; false when the tile count
// does not fit an int.
template <class D>
bool make_args(Args<D>& a, const ConvReluPoolDims& d, Mode mode) {
  a.h = d.h;
  a.w = d.w;
  a.ph = d.ph();
  a.pw = d.pw();
  const bool fwd = mode == Mode::forward;
  a.in_c = fwd ? d.cin : d.cout;
  a.out_c = fwd ? d.cout : d.cin;
  a.row_w = d.k * d.k * a.in_c + 8;
  a.out_h = fwd ? a.ph * d.pool : d.h;
  a.out_w = fwd ? a.pw * d.pool : d.w;
  a.src_h = fwd ? d.h : a.ph * d.pool;
  a.src_w = fwd ? d.w : a.pw * d.pool;
  a.tiles_x = (a.out_w + kTile - 1) / kTile;
  a.tiles_per_img = ((a.out_h + kTile - 1) / kTile) * a.tiles_x;
  const std::int64_t tiles = d.n * a.tiles_per_img;
  if (tiles >= (std::int64_t(1) << 30)) return false;  // the cursors add gridDim.x to an int
  a.tiles = int(tiles);
  a.chunks = a.in_c / kKC;
  return true;
}

// One direction's geometry (a), the device limits (lim) and its N tile; 0
// when the variant refuses: too many tiles for the int cursors, or a weight
// slice that fits in shared memory at neither N tile.
template <class D>
int plan(Args<D>& a, const ConvReluPoolDims& d, Mode mode, DeviceLimits& lim) {
  if (!make_args(a, d, mode)) return 0;
  lim = device_limits();
  return pick_nt(d.k, a.out_c, a.row_w, lim);
}

// MELFORGE_RESIDENT_BLOCKS=n caps the persistent grid at n blocks per slice
// (0 or unset: the occupancy-based size). For tests (the emulator's 132 SMs
// would give small shapes one tile per block) and grid-size experiments on a
// GPU; the results do not depend on it.
int grid_cap() {
  static const int cap = [] {
    const char* s = std::getenv("MELFORGE_RESIDENT_BLOCKS");
    return s ? std::atoi(s) : 0;
  }();
  return cap;
}

template <class D, int K, int P, int NT, Mode M>
void launch_nt(const Args<D>& a, const DeviceLimits& lim, cudaStream_t stream) {
  const std::size_t smem = smem_bytes(K, NT, a.row_w);
  auto* kernel = resident_kernel<D, K, P, NT, M>;
  const void* entry = reinterpret_cast<const void*>(kernel);
  if (smem > 48 * 1024) raise_dynamic_smem_limit(entry, smem);
  // The whole unified L1/shared array as shared memory, then the persistent
  // grid from what the runtime says fits (registers included), not from our
  // model alone: a grid sized for 2 blocks per SM where 1 fits runs in 2 waves.
  MF_CUDA_CHECK(cudaFuncSetAttribute(entry, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     int(cudaSharedmemCarveoutMaxShared)));
  int per_sm_blocks = 0;
  MF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_blocks, kernel, kThreads, smem));
  const int modelled = blocks_per_sm(smem, lim);  // >= 1: pick_nt checked
  per_sm_blocks = per_sm_blocks < 1 ? 1 : (per_sm_blocks > modelled ? modelled : per_sm_blocks);
  const int slices = (a.out_c + NT * 8 - 1) / (NT * 8);
  int gx = lim.sms * per_sm_blocks / slices;
  if (grid_cap() > 0 && gx > grid_cap()) gx = grid_cap();
  gx = gx < 1 ? 1 : (gx > a.tiles ? a.tiles : gx);
  resident_kernel<D, K, P, NT, M><<<dim3(unsigned(gx), unsigned(slices)), kThreads, smem, stream>>>(a);
  MF_CUDA_CHECK_LAUNCH();
}

template <class D, Mode M>
void launch(const Args<D>& a, const ConvReluPoolDims& d, int nt, const DeviceLimits& lim, cudaStream_t stream) {
  const bool wide = nt == 8;
  if (d.k == 3) {
    if (d.pool == 2) wide ? launch_nt<D, 3, 2, 8, M>(a, lim, stream) : launch_nt<D, 3, 2, 4, M>(a, lim, stream);
    else wide ? launch_nt<D, 3, 1, 8, M>(a, lim, stream) : launch_nt<D, 3, 1, 4, M>(a, lim, stream);
  } else {
    if (d.pool == 2) wide ? launch_nt<D, 1, 2, 8, M>(a, lim, stream) : launch_nt<D, 1, 2, 4, M>(a, lim, stream);
    else wide ? launch_nt<D, 1, 1, 8, M>(a, lim, stream) : launch_nt<D, 1, 1, 4, M>(a, lim, stream);
  }
}

}  // namespace

template <class T>
bool resident_forward(const ConvReluPoolDims& d, const void* x, const void* w, const void* b, void* y,
                      std::uint8_t* code, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    return false;
  } else {
    if (!resident_can_run(d, dtype_of_v<T>) || !aligned_to(x, 16) || !aligned_to(w, 16) || !aligned_to(y, 16) ||
        !aligned_to(code, 16))
      return false;
    using D = cuda::device_t<T>;
    Args<D> a{};
    DeviceLimits lim;
    const int nt = plan(a, d, Mode::forward, lim);
    if (nt == 0) return false;
    if (a.tiles == 0) return true;
    a.in = static_cast<const D*>(x);
    a.wgt = static_cast<const D*>(w);
    a.bias = static_cast<const D*>(b);
    a.out = static_cast<D*>(y);
    a.code_out = code;
    launch<D, Mode::forward>(a, d, nt, lim, stream);
    return true;
  }
}

template <class T>
bool resident_dx(const ConvReluPoolDims& d, const void* w, const void* dy, const std::uint8_t* code, void* dx,
                 cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    return false;
  } else {
    if (!resident_can_run(d, dtype_of_v<T>) || !aligned_to(w, 16) || !aligned_to(dy, 16) || !aligned_to(code, 16) ||
        !aligned_to(dx, 16))
      return false;
    using D = cuda::device_t<T>;
    Args<D> a{};
    DeviceLimits lim;
    const int nt = plan(a, d, Mode::dx, lim);
    if (nt == 0) return false;
    if (a.tiles == 0) return true;
    // The flipped weights live in a stream-ordered pool workspace (WeightPartials
    // hands out f32 units; 2 halves each).
    const std::int64_t elems = std::int64_t(d.cin) * d.k * d.k * d.cout;
    WeightPartials flipped(std::size_t(elems + 1) / 2, stream);
    D* wf = reinterpret_cast<D*>(flipped.data());
    flip_weights_kernel<D><<<cuda::grid_for(elems, cuda::kElementwiseThreads), cuda::kElementwiseThreads, 0, stream>>>(static_cast<const D*>(w), wf, d.k,
                                                                            d.cin, d.cout);
    MF_CUDA_CHECK_LAUNCH();
    a.in = static_cast<const D*>(dy);
    a.code_in = code;
    a.wgt = wf;
    a.out = static_cast<D*>(dx);
    launch<D, Mode::dx>(a, d, nt, lim, stream);
    return true;
  }
}

#define MF_INSTANTIATE(T)                                                                                  \
  template bool resident_forward<T>(const ConvReluPoolDims&, const void*, const void*, const void*, void*, \
                                    std::uint8_t*, cudaStream_t);                                         \
  template bool resident_dx<T>(const ConvReluPoolDims&, const void*, const void*, const std::uint8_t*, void*, \
                               cudaStream_t);
MF_INSTANTIATE(float)
MF_INSTANTIATE(f16)
MF_INSTANTIATE(bf16)
#undef MF_INSTANTIATE

}  // namespace mf::kernels
