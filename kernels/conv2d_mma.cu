// conv2d variant 2, "mma": bf16/f16 implicit GEMMs on tensor cores
// (mma.sync.m16n8k16, f32 accumulation, sm_80+), beside variant 1 in
// kernels/conv2d.cu (layouts and rules in kernels/conv2d.hpp). Products of
// bf16/f16 operands are exact in f32; sums are f32 (in the tensor cores' own
// order, so the bits differ from variant 1's but not run to run); each T output
// is rounded once. Router: only when asked for (Conv2dAlgo::mma; `automatic`
// runs variant 1) and T is bf16/f16, Cin and Cout are multiples of 16, the
// operands it reads are 16-byte aligned and the GPU is sm_80+; any odd k,
// stride 1 or 2. One GEMM core (a 64 x 64 tile of C per 128-thread block, K in
// steps of 32, cp.async staging two deep) for three kernels:
//   forward  M = N*OH*OW output pixels, N = Cout, K = k*k*Cin; + bias, ReLU.
//   dx       one GEMM per stride phase class (grid.z = stride^2): M = the
//            class's dx pixels, N = Cin, K = its taps x Cout (no zero MMAs).
//   dw, db   M = Cout, N = k*k*Cin + 1 (a column of ones gives db), K = the
//            pixels of one fixed chunk; one f32 partial per (chunk, co, j),
//            summed by conv2d.cu in chunk order. No atomics.
// Tile and bank layout, known costs: bench/NOTES.md, "Kernel lab notes".
#include <cuda_runtime.h>

#include <atomic>

#include "engine/error.hpp"
#include "kernels/conv2d_mma.cuh"
#include "kernels/cuda_types.cuh"
#include "kernels/launch.cuh"
#include "kernels/mma.cuh"

namespace mf::kernels {

namespace {

constexpr int kThreads = 128;
constexpr int kBM = 64, kBN = 64, kBK = 32;
constexpr int kRowK = kBK + 8;    // a [m][k] or [n][k] tile row, halves (80 B)
constexpr int kRowMN = kBM + 8;   // a [k][m] or [k][n] tile row, halves (144 B)
constexpr int kTileElems = kBM * kRowK > kBK * kRowMN ? kBM * kRowK : kBK * kRowMN;
static_assert(kBM == kBN, "the tile buffers are sized for square tiles");

// The block's shared tiles: [stage][operand][elements].
template <class D>
struct Tiles {
  __align__(16) D buf[2][2][kTileElems];
};

// C[64 x 64] += A[64 x 32] * B[32 x 64] from one stage. ATrans: A stored
// [k][m] (m contiguous, rows kRowMN), else [m][k] (rows kRowK); BTrans: B
// stored [k][n], else [n][k]. Warp (wm, wn) owns C rows 32wm.., columns 32wn..;
// acc[mi][nj]: rows 32wm + 16mi + {g, g+8}, columns 32wn + 8nj + {2t, 2t+1}.
template <class D, bool ATrans, bool BTrans>
__device__ __forceinline__ void mma_stage(const D* sa, const D* sb, float (&acc)[2][4][4], int wm, int wn,
                                          int lane) {
  const int mat = lane / 8, row = lane % 8;
#pragma unroll
  for (int kk = 0; kk < kBK; kk += 16) {
    std::uint32_t a[2][4], b[4][2];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      const int m0 = wm * 32 + mi * 16 + (mat & 1) * 8, k0 = kk + (mat >> 1) * 8;
      if constexpr (ATrans) mma::ldmatrix_x4<true>(a[mi], sa + (k0 + row) * kRowMN + m0);
      else mma::ldmatrix_x4<false>(a[mi], sa + (m0 + row) * kRowK + k0);
    }
#pragma unroll
    for (int nj = 0; nj < 4; nj += 2) {
      const int n0 = wn * 32 + nj * 8 + (mat >> 1) * 8, k0 = kk + (mat & 1) * 8;
      std::uint32_t r[4];
      if constexpr (BTrans) mma::ldmatrix_x4<true>(r, sb + (k0 + row) * kRowMN + n0);
      else mma::ldmatrix_x4<false>(r, sb + (n0 + row) * kRowK + k0);
      b[nj][0] = r[0];
      b[nj][1] = r[1];
      b[nj + 1][0] = r[2];
      b[nj + 1][1] = r[3];
    }
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int nj = 0; nj < 4; ++nj) mma::mma_16816<D>(acc[mi][nj], a[mi], b[nj][0], b[nj][1]);
  }
}

// The two-stage pipeline over `steps` K steps: load(stage, step) queues one
// step's cp.async copies (and may store directly); the MMAs of step i run while
// step i + 1's copies land. Every thread of the block must call it.
template <class D, bool ATrans, bool BTrans, class Load>
__device__ __forceinline__ void gemm_pipeline(Tiles<D>& sm, int steps, float (&acc)[2][4][4], Load&& load) {
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, wm = warp / 2, wn = warp % 2;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int nj = 0; nj < 4; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][nj][e] = 0.f;
  if (steps <= 0) return;
  load(0, 0);
  mma::cp_async_commit();
  for (int step = 0; step < steps; ++step) {
    if (step + 1 < steps) load((step + 1) & 1, step + 1);
    mma::cp_async_commit();  // (an empty group on the last step keeps the wait count uniform)
    mma::cp_async_wait<1>();
    __syncthreads();
    mma_stage<D, ATrans, BTrans>(sm.buf[step & 1][0], sm.buf[step & 1][1], acc, wm, wn, lane);
    __syncthreads();  // the next load overwrites this stage
  }
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

// A pixel of an [N, rows, cols] grid: p -> (n, row, col).
struct Pixel {
  std::int64_t n;
  int row, col;
};
__device__ __forceinline__ Pixel split_pixel(std::int64_t p, int rows, int cols) {
  const std::int64_t t = p / cols;
  return {t / rows, int(t % rows), int(p - t * cols)};
}

// ---- forward ------------------------------------------------------------------

template <class D>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(Conv2dDims d, const D* __restrict__ x, const D* __restrict__ w, const D* __restrict__ b,
                   D* __restrict__ y) {
  __shared__ Tiles<D> sm;
  const int oh_n = d.oh(), ow_n = d.ow(), kdim = d.k * d.k * d.cin, tid = int(threadIdx.x);
  const std::int64_t m_total = d.n * oh_n * ow_n;
  const std::int64_t m_base = std::int64_t(blockIdx.x) * kBM;
  const int n_base = int(blockIdx.y) * kBN;
  // This thread's two 16-byte groups of each operand per step: tile rows
  // tid / 4 + 32i, K group tid % 4 (elements 8 * (tid % 4) ..).
  const int kg = tid % 4;
  const D* xrow[2];
  int ih0[2], iw0[2];
  bool mval[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const std::int64_t m = m_base + tid / 4 + 32 * i;
    mval[i] = m < m_total;
    const Pixel p = split_pixel(mval[i] ? m : 0, oh_n, ow_n);
    xrow[i] = x + p.n * d.h * d.w * d.cin;
    ih0[i] = p.row * d.stride - d.pad();
    iw0[i] = p.col * d.stride - d.pad();
  }
  auto load = [&](int stage, int step) {
    const int kidx = step * kBK + kg * 8;
    const bool kval = kidx < kdim;
    const int rs = kidx / d.cin, ci = kidx - rs * d.cin, r = rs / d.k, s = rs - r * d.k;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = tid / 4 + 32 * i;
      const int ih = ih0[i] + r, iw = iw0[i] + s;
      const bool av = mval[i] && kval && ih >= 0 && ih < d.h && iw >= 0 && iw < d.w;
      mma::cp_async16(&sm.buf[stage][0][row * kRowK + kg * 8],
                      av ? xrow[i] + (std::int64_t(ih) * d.w + iw) * d.cin + ci : x, av);
      const int co = n_base + row;
      const bool bv = kval && co < d.cout;
      mma::cp_async16(&sm.buf[stage][1][row * kRowK + kg * 8], bv ? w + std::int64_t(co) * kdim + kidx : w, bv);
    }
  };
  float acc[2][4][4];
  gemm_pipeline<D, false, false>(sm, (kdim + kBK - 1) / kBK, acc, load);

  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nj = 0; nj < 4; ++nj) {
    const int co = n_base + (warp % 2) * 32 + nj * 8 + 2 * t;
    if (co >= d.cout) continue;  // Cout % 16 == 0: co and co + 1 together
    const float b0 = b ? cuda::load_f32(b[co]) : 0.f, b1 = b ? cuda::load_f32(b[co + 1]) : 0.f;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const std::int64_t m = m_base + (warp / 2) * 32 + mi * 16 + g + 8 * h;
        if (m >= m_total) continue;
        const float v0 = acc[mi][nj][2 * h] + b0, v1 = acc[mi][nj][2 * h + 1] + b1;
        store2(y + m * d.cout + co, d.relu && v0 <= 0.f ? 0.f : v0, d.relu && v1 <= 0.f ? 0.f : v1);  // NaN passes
      }
  }
}

// ---- dx: the transposed conv by phase class -------------------------------------

// Phase class (a, b) of a stride: its dx pixels ih = a + stride*i, iw = b +
// stride*j, the taps that reach them r = r0 + stride*ri (ri < tr), s likewise,
// and oh = i + offh - ri, ow = j + offw - si.
struct PhaseClass {
  int a, b, rows, cols, r0, s0, tr, ts, offh, offw;
};
__host__ __device__ inline PhaseClass phase_class(const Conv2dDims& d, int c) {
  PhaseClass p{};
  const int st = d.stride, pad = d.pad();
  p.a = c / st;
  p.b = c % st;
  p.rows = d.h > p.a ? (d.h - p.a + st - 1) / st : 0;
  p.cols = d.w > p.b ? (d.w - p.b + st - 1) / st : 0;
  p.r0 = (p.a + pad) % st;
  p.s0 = (p.b + pad) % st;
  p.tr = d.k > p.r0 ? (d.k - p.r0 + st - 1) / st : 0;
  p.ts = d.k > p.s0 ? (d.k - p.s0 + st - 1) / st : 0;
  p.offh = (p.a + pad - p.r0) / st;
  p.offw = (p.b + pad - p.s0) / st;
  return p;
}

template <class D>
__global__ void __launch_bounds__(kThreads)
    dx_kernel(Conv2dDims d, const D* __restrict__ w, const D* __restrict__ dy, D* __restrict__ dx) {
  __shared__ Tiles<D> sm;
  const PhaseClass pc = phase_class(d, int(blockIdx.z));
  const std::int64_t m_total = d.n * pc.rows * pc.cols;
  const std::int64_t m_base = std::int64_t(blockIdx.x) * kBM;
  if (m_base >= m_total) return;  // (block-uniform) this class has fewer blocks than the grid
  const int oh_n = d.oh(), ow_n = d.ow(), kdim = pc.tr * pc.ts * d.cout, tid = int(threadIdx.x);
  const int n_base = int(blockIdx.y) * kBN;
  // A (dy, [m][k]): rows tid / 4 + 32i, K group tid % 4. B (w, [k][n]): K rows
  // tid / 8 + 16i, N group tid % 8.
  const int kg = tid % 4, ng = tid % 8;
  const D* grow[2];
  int i0[2], j0[2];
  bool mval[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const std::int64_t m = m_base + tid / 4 + 32 * i;
    mval[i] = m < m_total;
    const Pixel p = split_pixel(mval[i] ? m : 0, pc.rows, pc.cols);
    grow[i] = dy + p.n * oh_n * ow_n * d.cout;
    i0[i] = p.row + pc.offh;
    j0[i] = p.col + pc.offw;
  }
  const bool nval = n_base + ng * 8 < d.cin;
  auto load = [&](int stage, int step) {
    {
      const int kidx = step * kBK + kg * 8;
      const int tap = kidx / d.cout, co = kidx - tap * d.cout, ri = tap / pc.ts, si = tap - ri * pc.ts;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int oh = i0[i] - ri, ow = j0[i] - si;
        const bool av = mval[i] && kidx < kdim && oh >= 0 && oh < oh_n && ow >= 0 && ow < ow_n;
        mma::cp_async16(&sm.buf[stage][0][(tid / 4 + 32 * i) * kRowK + kg * 8],
                        av ? grow[i] + (std::int64_t(oh) * ow_n + ow) * d.cout + co : dy, av);
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int krow = tid / 8 + 16 * i, kidx = step * kBK + krow;
      const int tap = kidx / d.cout, co = kidx - tap * d.cout, ri = tap / pc.ts, si = tap - ri * pc.ts;
      const int r = pc.r0 + d.stride * ri, s = pc.s0 + d.stride * si;
      const bool bv = nval && kidx < kdim;
      mma::cp_async16(&sm.buf[stage][1][krow * kRowMN + ng * 8],
                      bv ? w + ((std::int64_t(co) * d.k + r) * d.k + s) * d.cin + n_base + ng * 8 : w, bv);
    }
  };
  float acc[2][4][4];
  gemm_pipeline<D, false, true>(sm, (kdim + kBK - 1) / kBK, acc, load);

  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::int64_t m = m_base + (warp / 2) * 32 + mi * 16 + g + 8 * h;
      if (m >= m_total) continue;
      const Pixel p = split_pixel(m, pc.rows, pc.cols);
      D* out = dx + ((p.n * d.h + pc.a + d.stride * p.row) * d.w + pc.b + d.stride * p.col) * d.cin;
#pragma unroll
      for (int nj = 0; nj < 4; ++nj) {
        const int ci = n_base + (warp % 2) * 32 + nj * 8 + 2 * t;
        if (ci < d.cin) store2(out + ci, acc[mi][nj][2 * h], acc[mi][nj][2 * h + 1]);
      }
    }
}

// ---- dw, db: per-chunk partials ------------------------------------------------

template <class D>
__global__ void __launch_bounds__(kThreads)
    dw_kernel(Conv2dDims d, const D* __restrict__ x, const D* __restrict__ dy, int chunks, float* __restrict__ part) {
  __shared__ Tiles<D> sm;
  const int oh_n = d.oh(), ow_n = d.ow(), kkc = d.k * d.k * d.cin, tid = int(threadIdx.x);
  const int n_base = int(blockIdx.x) * kBN, m_base = int(blockIdx.y) * kBM, chunk = int(blockIdx.z);
  const std::int64_t pixels = d.n * oh_n * ow_n;
  const std::int64_t p0 = pixels * chunk / chunks, p1 = pixels * (chunk + 1) / chunks;
  // Both operands are [pixel][8-element groups]: K rows tid / 8 + 16i, group tid % 8.
  const int grp = tid % 8;
  const int co = m_base + grp * 8;  // A: dy[p][co .. co + 7]
  const bool coval = co < d.cout;
  // B: x[tap-shifted pixel][ci .. ci + 7] for column j = n_base + 8 grp = (r, s, ci),
  // or the ones column (j = kkc: db), or nothing (j > kkc).
  const int j = n_base + grp * 8;
  const int rs = j < kkc ? j / d.cin : 0, ci = j < kkc ? j - rs * d.cin : 0, r = rs / d.k, s = rs - r * d.k;
  auto load = [&](int stage, int step) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int krow = tid / 8 + 16 * i;
      const std::int64_t p = p0 + std::int64_t(step) * kBK + krow;
      const bool pval = p < p1;
      const Pixel px = split_pixel(pval ? p : 0, oh_n, ow_n);
      mma::cp_async16(&sm.buf[stage][0][krow * kRowMN + grp * 8], pval && coval ? dy + p * d.cout + co : dy,
                      pval && coval);
      D* bdst = &sm.buf[stage][1][krow * kRowMN + grp * 8];
      if (j < kkc) {
        const int ih = px.row * d.stride + r - d.pad(), iw = px.col * d.stride + s - d.pad();
        const bool bv = pval && ih >= 0 && ih < d.h && iw >= 0 && iw < d.w;
        mma::cp_async16(bdst, bv ? x + ((px.n * d.h + ih) * d.w + iw) * d.cin + ci : x, bv);
      } else {
        const D one = cuda::store_f32<D>(j == kkc && pval ? 1.f : 0.f), zero = cuda::store_f32<D>(0.f);
        bdst[0] = one;
#pragma unroll
        for (int e = 1; e < 8; ++e) bdst[e] = zero;
      }
    }
  };
  float acc[2][4][4];
  gemm_pipeline<D, true, true>(sm, int((p1 - p0 + kBK - 1) / kBK), acc, load);

  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int o = m_base + (warp / 2) * 32 + mi * 16 + g + 8 * h;
      if (o >= d.cout) continue;
      float* out = part + (std::int64_t(chunk) * d.cout + o) * (kkc + 1);
#pragma unroll
      for (int nj = 0; nj < 4; ++nj)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = n_base + (warp % 2) * 32 + nj * 8 + 2 * t + e;
          if (col <= kkc) out[col] = acc[mi][nj][2 * h + e];
        }
    }
}

// ---- launchers ---------------------------------------------------------------------

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }
bool aligned4(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 3u) == 0; }

bool sm80_or_newer() {
  int dev = 0, major = 0;
  MF_CUDA_CHECK(cudaGetDevice(&dev));
  MF_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  return major >= 8;
}

std::atomic<std::uint64_t> g_launches{0};

template <class D>
void launch_forward(const Conv2dDims& d, const void* x, const void* w, const void* b, void* y, cudaStream_t stream) {
  const dim3 grid(cuda::blocks_for(d.n * d.oh() * d.ow(), kBM), cuda::blocks_for(d.cout, kBN));
  forward_kernel<D><<<grid, kThreads, 0, stream>>>(d, static_cast<const D*>(x), static_cast<const D*>(w),
                                                   static_cast<const D*>(b), static_cast<D*>(y));
  MF_CUDA_CHECK_LAUNCH();
  g_launches.fetch_add(1);
}

template <class D>
void launch_dx(const Conv2dDims& d, const void* w, const void* dy, void* dx, cudaStream_t stream) {
  const int classes = d.stride * d.stride;
  std::int64_t m_max = 0;
  for (int c = 0; c < classes; ++c) {
    const PhaseClass pc = phase_class(d, c);
    const std::int64_t m = d.n * pc.rows * pc.cols;
    m_max = m > m_max ? m : m_max;
  }
  const dim3 grid(cuda::blocks_for(m_max, kBM), cuda::blocks_for(d.cin, kBN), unsigned(classes));
  dx_kernel<D><<<grid, kThreads, 0, stream>>>(d, static_cast<const D*>(w), static_cast<const D*>(dy),
                                              static_cast<D*>(dx));
  MF_CUDA_CHECK_LAUNCH();
  g_launches.fetch_add(1);
}

template <class D>
void launch_dw(const Conv2dDims& d, const void* x, const void* dy, int chunks, float* part, cudaStream_t stream) {
  // grid.z = chunks (<= 256 by conv2d.cu's rule), grid.y = Cout / 64: far below 65535.
  const dim3 grid(cuda::blocks_for(std::int64_t(d.k) * d.k * d.cin + 1, kBN), cuda::blocks_for(d.cout, kBM), unsigned(chunks));
  dw_kernel<D><<<grid, kThreads, 0, stream>>>(d, static_cast<const D*>(x), static_cast<const D*>(dy), chunks, part);
  MF_CUDA_CHECK_LAUNCH();
  g_launches.fetch_add(1);
}

}  // namespace

std::uint64_t conv2d_mma_launches() { return g_launches.load(); }

bool conv2d_mma_can_run(const Conv2dDims& d, DType dtype) {
  return (dtype == DType::bf16 || dtype == DType::f16) && d.cin % 16 == 0 && d.cout % 16 == 0 &&
         (d.stride == 1 || d.stride == 2) && d.k % 2 == 1 && sm80_or_newer();
}

bool conv2d_mma_forward(const Conv2dDims& d, DType dtype, const void* x, const void* w, const void* b, void* y,
                        cudaStream_t stream) {
  if (!conv2d_mma_can_run(d, dtype) || !aligned16(x) || !aligned16(w) || !aligned4(y)) return false;
  if (dtype == DType::bf16) launch_forward<__nv_bfloat16>(d, x, w, b, y, stream);
  else launch_forward<__half>(d, x, w, b, y, stream);
  return true;
}

bool conv2d_mma_dx(const Conv2dDims& d, DType dtype, const void* w, const void* dy, void* dx, cudaStream_t stream) {
  if (!conv2d_mma_can_run(d, dtype) || !aligned16(w) || !aligned16(dy) || !aligned4(dx)) return false;
  if (dtype == DType::bf16) launch_dx<__nv_bfloat16>(d, w, dy, dx, stream);
  else launch_dx<__half>(d, w, dy, dx, stream);
  return true;
}

bool conv2d_mma_dw_partials(const Conv2dDims& d, DType dtype, const void* x, const void* dy, int chunks,
                            float* part, cudaStream_t stream) {
  if (!conv2d_mma_can_run(d, dtype) || !aligned16(x) || !aligned16(dy)) return false;
  if (dtype == DType::bf16) launch_dw<__nv_bfloat16>(d, x, dy, chunks, part, stream);
  else launch_dw<__half>(d, x, dy, chunks, part, stream);
  return true;
}

}  // namespace mf::kernels
