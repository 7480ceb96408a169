// conv_relu_pool variant 5, "resident", for the Cin = 1 input layer (LeakCNN's
// 1 -> 32 at 64 x 64, k = 3, pool 2): the 3 x 3 taps as the K = 16 of one
// mma.m16n8k16 (taps 9..15 zero), bf16/f16 operands, f32 accumulation, sm_80+.
// Router: `automatic` and ConvAlgo::resident, tried first. Runs when T is
// bf16/f16, Cin == 1, k == 3, pool in {1, 2}, Cout a multiple of 16 in
// [16, 256] that splits into at most 8 warp slices of 16/32/48/64 channels
// (every multiple of 16 but 176 and 208), y/code (forward) and dy (backward)
// 16-byte aligned, code 8-byte aligned (backward), an sm_80+ GPU; anything else
// returns false and the caller falls back (cin1, then tiled).
//   resident_cin1_fwd_kernel  x [N,H,W,1] -> y, code [N,PH,PW,Cout]: bias,
//            2 x 2 max with PyTorch's rule (strictly greater wins, ties keep
//            the first, NaN wins), ReLU, the 1-byte code, as mma / cin1.
//   resident_cin1_dw_kernel   dw [Cout][3][3], db [Cout] (f32): one partial
//            per (chunk, co, tap | db) in launch_reduce_partials' layout
//            (chunks = min(tiles, 1024), a function of the shape only), summed
//            in chunk order: no atomics, bit-identical run to run.
//   dx: not here (the first layer needs none; a Cin = 1 layer asking for dx
//            falls back to cin1, which computes dx and dw together).
// Warp slices, tiles, byte and register counts, predictions: bench/NOTES.md.
#include <cuda_runtime.h>

#include <climits>
#include <type_traits>

#include "engine/error.hpp"
#include "kernels/conv_relu_pool_cuda.cuh"
#include "kernels/conv_route.cuh"
#include "kernels/cuda_types.cuh"
#include "kernels/mma.cuh"

namespace mf::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTaps = 9;
constexpr int kOutElems = 8192;                    // forward: pooled pixels x Cout staged per tile
constexpr int kGElems = 8192;                      // dw: conv pixels x Cout of g per tile
constexpr int kGCap = kGElems + 8 * (kGElems / 16);  // g rows padded by 8 halves (<= 512 pixels)
constexpr int kXCap = 4096;                        // input halo, halves

using mma::load_b16x2_unaligned;
using mma::mma_16816;

// Tile geometry (host-computed; the kernels read it).
struct Geom {
  int th = 2, tw = 8;         // conv rows, conv columns per tile
  int tiles_h = 0, tiles_w = 0;
  int hs = 24;                // halo row stride in halves (tw + 16)
  int slices = 1;             // warp slices over Cout
  std::int64_t tiles = 0;     // n * tiles_h * tiles_w
};

// 16-channel units per warp (4, 3, 2, 1: the largest leaving at most 8 slices); 0: none fits.
int pick_units(int cout) {
  const int u = cout / 16;
  for (int d = 4; d >= 1; --d)
    if (u % d == 0 && u / d <= kWarps) return d;
  return 0;
}

// A layer with no pooled output (H or W below the pool) is refused: its tile
// geometry would divide by a zero width or height; the fallbacks write the
// zero dw and db.
bool shape_ok(const ConvReluPoolDims& d) {
  return d.cin == 1 && d.k == 3 && (d.pool == 1 || d.pool == 2) && d.cout % 16 == 0 && d.cout >= 16 &&
         d.cout <= 256 && pick_units(d.cout) > 0 && d.ph() > 0 && d.pw() > 0;
}


int round_up(int v, int m) { return (v + m - 1) / m * m; }

// Tile rows for `max_px` pixels at width tw, a multiple of `step`, capped by the
// conv rows that matter and by the halo buffer.
int tile_rows(int max_px, int tw, int step, int conv_h) {
  int th = max_px / tw;
  const int cap_h = round_up(conv_h, step), cap_x = kXCap / (tw + 16) - 2;
  th = th < cap_h ? th : cap_h;
  th = th < cap_x ? th : cap_x;
  return th / step * step;
}

// Forward: pooled outputs x Cout <= kOutElems; TW a multiple of 8, TH even.
Geom forward_geom(const ConvReluPoolDims& d) {
  Geom g;
  const int p = d.pool, conv_h = d.ph() * p, conv_w = d.pw() * p;
  const int max_px = kOutElems * p * p / d.cout;  // >= 32
  g.tw = round_up(conv_w, 8) < 64 ? round_up(conv_w, 8) : 64;
  g.th = tile_rows(max_px, g.tw, 2, conv_h);
  if (g.th < 2) {
    g.tw = (max_px / 2) / 8 * 8;
    g.th = 2;
  }
  g.hs = g.tw + 16;
  g.tiles_h = (conv_h + g.th - 1) / g.th;
  g.tiles_w = (conv_w + g.tw - 1) / g.tw;
  g.slices = d.cout / 16 / pick_units(d.cout);
  g.tiles = d.n * g.tiles_h * g.tiles_w;
  return g;
}

// dw: conv pixels x Cout <= kGElems; TWc a multiple of 16 (one k-step), TR a multiple of P.
Geom dw_geom(const ConvReluPoolDims& d) {
  Geom g;
  const int p = d.pool, conv_h = d.ph() * p, conv_w = d.pw() * p;
  const int max_px = kGElems / d.cout;  // >= 32
  g.tw = round_up(conv_w, 16) < 64 ? round_up(conv_w, 16) : 64;
  g.th = tile_rows(max_px, g.tw, p, conv_h);
  if (g.th < p) {
    g.tw = 16;
    g.th = tile_rows(max_px, 16, p, conv_h);
  }
  g.hs = g.tw + 16;
  g.tiles_h = (conv_h + g.th - 1) / g.th;
  g.tiles_w = (conv_w + g.tw - 1) / g.tw;
  g.slices = d.cout / 16 / pick_units(d.cout);
  g.tiles = d.n * g.tiles_h * g.tiles_w;
  return g;
}

// s_x[hr * hs + c] = x[n][oh0 - 1 + hr][ow0 - 8 + c] (0 outside the image),
// hr < rows, c < hs: conv pixel (oh0 + tr, ow0 + tc)'s tap (r, s) is
// s_x[(tr + r) * hs + tc + s + 7]. `wide`: W % 8 == 0 and x 16-byte aligned,
// so every 8-column run is one aligned 16-byte load, wholly in or out.
__device__ __forceinline__ void stage_halo(const ConvReluPoolDims& d, const std::uint16_t* __restrict__ xn,
                                           int rows, int hs, int oh0, int ow0, bool wide,
                                           std::uint16_t* __restrict__ s_x) {
  const int tid = int(threadIdx.x);
  if (wide) {
    const int cpr = hs / 8;
    for (int e = tid; e < rows * cpr; e += kThreads) {
      const int hr = e / cpr, c8 = e - hr * cpr;
      const int ih = oh0 - 1 + hr, iw = ow0 - 8 + c8 * 8;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (ih >= 0 && ih < d.h && iw >= 0 && iw < d.w)
        v = __ldg(reinterpret_cast<const uint4*>(xn + std::int64_t(ih) * d.w + iw));
      *reinterpret_cast<uint4*>(s_x + hr * hs + c8 * 8) = v;
    }
  } else {
    for (int e = tid; e < rows * hs; e += kThreads) {
      const int hr = e / hs, c = e - hr * hs;
      const int ih = oh0 - 1 + hr, iw = ow0 - 8 + c;
      std::uint16_t v = 0;
      if (ih >= 0 && ih < d.h && iw >= 0 && iw < d.w) v = xn[std::int64_t(ih) * d.w + iw];
      s_x[e] = v;
    }
  }
}

template <class D>
__device__ __forceinline__ std::uint16_t bits_of(float v) {
  const D h = cuda::store_f32<D>(v);
  if constexpr (std::is_same_v<D, __half>) return __half_as_ushort(h);
  else return __bfloat16_as_ushort(h);
}

template <class D>
__device__ __forceinline__ float f32_of(std::uint32_t bits) {
  if constexpr (std::is_same_v<D, __half>) return cuda::load_f32(__ushort_as_half(static_cast<unsigned short>(bits)));
  else return cuda::load_f32(__ushort_as_bfloat16(static_cast<unsigned short>(bits)));
}

template <class D, int P, int NT>
__global__ void __launch_bounds__(kThreads, NT <= 4 ? 3 : 2)
    resident_cin1_fwd_kernel(ConvReluPoolDims d, Geom geo, bool wide, const std::uint16_t* __restrict__ x,
                             const std::uint16_t* __restrict__ w, const D* __restrict__ b,
                             std::uint16_t* __restrict__ y, std::uint8_t* __restrict__ code) {
  __shared__ __align__(16) std::uint16_t s_x[kXCap];
  __shared__ __align__(16) std::uint16_t s_y[kOutElems];
  __shared__ __align__(16) std::uint8_t s_c[kOutElems];

  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int cout = d.cout, ph_n = d.h / P, pw_n = d.w / P;
  const int slices = geo.slices, slice = warp % slices;
  const int m_first = warp / slices, m_step = (kWarps - 1 - slice) / slices + 1;
  const int co_base = slice * NT * 8;

  // The warp's weights as B fragments and its biases, for the block's life.
  std::uint32_t b0[NT], b1[NT];
  float bias[NT][2];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const std::uint16_t* wc = w + (co_base + 8 * j + g) * kTaps;  // w[co][r][s][0]
    b0[j] = load_b16x2_unaligned(wc + 2 * t);
    b1[j] = t == 0 ? std::uint32_t(wc[8]) : 0u;
    const int cb = co_base + 8 * j + 2 * t;
    bias[j][0] = cuda::load_f32(b[cb]);
    bias[j][1] = cuda::load_f32(b[cb + 1]);
  }
  // A: lane t holds taps 2t (low half) and 2t + 1 (high half); t = 0 also tap 8.
  const int hs = geo.hs;
  const int tap_lo = 2 * t, tap_hi = 2 * t + 1;
  const int off_lo = (tap_lo / 3) * hs + tap_lo % 3 + 7, off_hi = (tap_hi / 3) * hs + tap_hi % 3 + 7;
  const int off_8 = 2 * hs + 2 + 7;

  const int th = geo.th, tw = geo.tw, m_cols = tw / 8, m_count = (th / 2) * m_cols;
  const int oc_n = tw / P;  // pooled columns per tile row
  const std::int64_t per_image = std::int64_t(geo.tiles_h) * geo.tiles_w;
  const bool even = (g & 1) == 0;

  for (std::int64_t tile = blockIdx.x; tile < geo.tiles; tile += gridDim.x) {
    const std::int64_t n = tile / per_image;
    const int rem = int(tile - n * per_image);
    const int oh0 = (rem / geo.tiles_w) * th, ow0 = (rem % geo.tiles_w) * tw;
    __syncthreads();  // the previous tile's halo and staging buffers are free
    stage_halo(d, x + n * d.h * d.w, th + 2, hs, oh0, ow0, wide, s_x);
    __syncthreads();

    for (int m = m_first; m < m_count; m += m_step) {
      const int tr0 = (m / m_cols) * 2, tc0 = (m % m_cols) * 8;
      const std::uint16_t* p0 = s_x + tr0 * hs + tc0 + g;  // pixel (tr0, tc0 + g); p0 + hs: the row below
      const std::uint16_t* p1 = p0 + hs;
      std::uint32_t a[4];
      a[0] = std::uint32_t(p0[off_lo]) | (std::uint32_t(p0[off_hi]) << 16);
      a[1] = std::uint32_t(p1[off_lo]) | (std::uint32_t(p1[off_hi]) << 16);
      a[2] = t == 0 ? std::uint32_t(p0[off_8]) : 0u;
      a[3] = t == 0 ? std::uint32_t(p1[off_8]) : 0u;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        // c[0..1]: pixel (tr0, tc0 + g), channels cb, cb + 1; c[2..3]: pixel (tr0 + 1, tc0 + g).
        float c[4] = {bias[j][0], bias[j][1], bias[j][0], bias[j][1]};
        mma_16816<D>(c, a, b0[j], b1[j]);
        const int cb = co_base + 8 * j + 2 * t;
        if constexpr (P == 2) {
          // Lanes g (even) and g ^ 1 = lane ^ 4 hold the window's two columns;
          // the even lane finishes channel cb, the odd lane channel cb + 1.
          const float s0 = even ? c[1] : c[0], s1 = even ? c[3] : c[2];
          const float r0 = __shfl_xor_sync(0xffffffffu, s0, 4), r1 = __shfl_xor_sync(0xffffffffu, s1, 4);
          const float win[4] = {even ? c[0] : r0, even ? r0 : c[1], even ? c[2] : r1, even ? r1 : c[3]};
          float best = win[0];
          int bpos = 0;
#pragma unroll
          for (int i = 1; i < 4; ++i)
            if (win[i] > best || isnan(win[i])) {  // PyTorch: strictly greater wins, ties keep the first, NaN wins
              best = win[i];
              bpos = i;
            }
          const bool pass = best > 0.f || isnan(best);
          const int opx = (tr0 / 2) * oc_n + (tc0 + g) / 2, ch = cb + (even ? 0 : 1);
          s_y[opx * cout + ch] = bits_of<D>(pass ? best : 0.f);
          s_c[opx * cout + ch] = pass ? std::uint8_t(bpos) : kNoGrad;
        } else {
#pragma unroll
          for (int rr = 0; rr < 2; ++rr) {
            const float v0 = c[2 * rr], v1 = c[2 * rr + 1];
            const bool q0 = v0 > 0.f || isnan(v0), q1 = v1 > 0.f || isnan(v1);
            const int o = ((tr0 + rr) * oc_n + tc0 + g) * cout + cb;
            *reinterpret_cast<std::uint32_t*>(&s_y[o]) =
                std::uint32_t(bits_of<D>(q0 ? v0 : 0.f)) | (std::uint32_t(bits_of<D>(q1 ? v1 : 0.f)) << 16);
            *reinterpret_cast<std::uint16_t*>(&s_c[o]) =
                std::uint16_t((q0 ? 0u : std::uint32_t(kNoGrad)) | ((q1 ? 0u : std::uint32_t(kNoGrad)) << 8));
          }
        }
      }
    }
    __syncthreads();

    // A pooled row of the tile is one contiguous NHWC run in y and in code:
    // warp w copies items w, w + 8, ... (item 2r: y of row r; 2r + 1: its codes).
    const int or_n = th / P, ph0 = oh0 / P, pw0 = ow0 / P;
    const int ncols = pw_n - pw0 < oc_n ? pw_n - pw0 : oc_n;
    for (int item = warp; item < 2 * or_n; item += kWarps) {
      const int orow = item >> 1, ph = ph0 + orow;
      if (ph >= ph_n) continue;
      const std::int64_t o = ((n * ph_n + ph) * pw_n + pw0) * cout;
      if ((item & 1) == 0) {
        const uint4* src = reinterpret_cast<const uint4*>(s_y + orow * oc_n * cout);
        uint4* dst = reinterpret_cast<uint4*>(y + o);
        for (int c = lane; c < ncols * cout / 8; c += 32) dst[c] = src[c];
      } else if (code) {
        const uint4* src = reinterpret_cast<const uint4*>(s_c + orow * oc_n * cout);
        uint4* dst = reinterpret_cast<uint4*>(code + o);
        for (int c = lane; c < ncols * cout / 16; c += 32) dst[c] = src[c];
      }
    }
  }
}

template <class D, int P, int MT>
__global__ void __launch_bounds__(kThreads, MT <= 2 ? 3 : 2)
    resident_cin1_dw_kernel(ConvReluPoolDims d, Geom geo, bool wide, int chunks, const std::uint16_t* __restrict__ x,
                            const std::uint16_t* __restrict__ dy, const std::uint8_t* __restrict__ code,
                            float* __restrict__ part) {
  __shared__ __align__(16) std::uint16_t s_x[kXCap];
  __shared__ __align__(16) std::uint16_t s_g[kGCap];  // [pixel][Cout + 8]; then the reduction scratch

  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int cout = d.cout, ph_n = d.h / P, pw_n = d.w / P, gs = cout + 8;
  const int slices = geo.slices, slice = warp % slices;
  const int k_first = warp / slices, k_step = (kWarps - 1 - slice) / slices + 1;
  const int co_base = slice * MT * 16;
  const int hs = geo.hs, th = geo.th, tw = geo.tw, ks_cols = tw / 16, ks_count = th * ks_cols;
  const std::int64_t per_image = std::int64_t(geo.tiles_h) * geo.tiles_w;
  const std::int64_t t0 = geo.tiles * blockIdx.x / chunks, t1 = geo.tiles * (blockIdx.x + 1) / chunks;

  // ldmatrix.x4.trans rows of A = g^T: matrices (px 0-7, co 0-7), (px 0-7, co 8-15),
  // (px 8-15, co 0-7), (px 8-15, co 8-15); lane l gives matrix l / 8's row l % 8.
  const int lm = lane / 8, lr = lane % 8;
  const int a_px = (lm / 2) * 8 + lr, a_co = co_base + (lm % 2) * 8;
  // B: lane (g, t) forms tap g (n8 tile 0) and tap 8 / ones / zero (tile 1) of
  // pixels 2t, 2t + 1 (b0) and 2t + 8, 2t + 9 (b1) of the k-step.
  const int off_g = (g / 3) * hs + g % 3 + 7 + 2 * t, off_8 = 2 * hs + 2 + 7 + 2 * t;
  constexpr std::uint32_t kOne = std::is_same_v<D, __half> ? 0x3c00u : 0x3f80u;
  const std::uint32_t second = g == 1 ? (kOne | (kOne << 16)) : 0u;  // the db column, or zero

  float acc[MT][2][4];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[m][j][i] = 0.f;

  const int pc_n = tw / P, cpg = cout / 8, items = (th / P) * pc_n * cpg;
  for (std::int64_t tile = t0; tile < t1; ++tile) {
    const std::int64_t n = tile / per_image;
    const int rem = int(tile - n * per_image);
    const int oh0 = (rem / geo.tiles_w) * th, ow0 = (rem % geo.tiles_w) * tw;
    __syncthreads();  // the previous tile's buffers are free
    stage_halo(d, x + n * d.h * d.w, th + 2, hs, oh0, ow0, wide, s_x);
    // g: per (pooled pixel, 8 channels) one 16-byte dy load and one 8-byte code
    // load, written to the pool window's P*P conv pixels (0 where the code
    // names another pixel or the pixel lies beyond the pooled map).
    for (int e = tid; e < items; e += kThreads) {
      const int pp = e / cpg, grp = e - pp * cpg, pr = pp / pc_n, pc = pp - pr * pc_n;
      const int ph = oh0 / P + pr, pw = ow0 / P + pc;
      uint4 v = make_uint4(0, 0, 0, 0);
      uint2 cw = make_uint2(0xffffffffu, 0xffffffffu);
      if (ph < ph_n && pw < pw_n) {
        const std::int64_t o = ((n * ph_n + ph) * pw_n + pw) * cout + grp * 8;
        v = __ldg(reinterpret_cast<const uint4*>(dy + o));
        cw = __ldg(reinterpret_cast<const uint2*>(code + o));
      }
#pragma unroll
      for (int pos = 0; pos < P * P; ++pos) {
        const int px = (pr * P + pos / P) * tw + pc * P + pos % P;
        *reinterpret_cast<uint4*>(&s_g[px * gs + grp * 8]) = route8(v, cw, unsigned(pos));
      }
    }
    __syncthreads();

    for (int ks = k_first; ks < ks_count; ks += k_step) {
      const int row = ks / ks_cols, c0 = (ks - row * ks_cols) * 16;
      const std::uint16_t* xb = s_x + row * hs + c0;
      const std::uint32_t b00 = load_b16x2_unaligned(xb + off_g), b01 = load_b16x2_unaligned(xb + off_g + 8);
      const std::uint32_t t80 = load_b16x2_unaligned(xb + off_8), t81 = load_b16x2_unaligned(xb + off_8 + 8);
      const std::uint32_t b10 = g == 0 ? t80 : second, b11 = g == 0 ? t81 : second;
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        std::uint32_t a[4];
        mma::ldmatrix_x4<true>(a, &s_g[(ks * 16 + a_px) * gs + a_co + m * 16]);
        mma_16816<D>(acc[m][0], a, b00, b01);
        mma_16816<D>(acc[m][1], a, b10, b11);
      }
    }
  }

  // acc[m][j][i]: co = co_base + 16 m + g + 8 (i / 2), column (tap) 8 j + 2 t + i % 2
  // (9: db). The warps of a slice are added in warp order.
  __syncthreads();
  constexpr int kWarpFloats = MT * 16 * (kTaps + 1);
  static_assert(kWarps * kWarpFloats * sizeof(float) <= sizeof(s_g), "reduction scratch must fit in s_g");
  float* red = reinterpret_cast<float*>(s_g);
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int col = 8 * j + 2 * t + (i & 1);
        if (col <= kTaps) red[warp * kWarpFloats + (16 * m + g + 8 * (i / 2)) * (kTaps + 1) + col] = acc[m][j][i];
      }
  __syncthreads();
  float* const out = part + std::int64_t(blockIdx.x) * cout * (kTaps + 1);
  for (int e = tid; e < cout * (kTaps + 1); e += kThreads) {
    const int co = e / (kTaps + 1), col = e - co * (kTaps + 1);
    const int s = co / (MT * 16), local = (co - s * MT * 16) * (kTaps + 1) + col;
    float sum = 0.f;
    for (int wi = s; wi < kWarps; wi += slices) sum += red[wi * kWarpFloats + local];
    out[e] = sum;  // part[(chunk * cout + co) * 10 + col]
  }
}

template <class D, int P, int NT>
void launch_forward(const ConvReluPoolDims& d, const Geom& geo, bool wide, const std::uint16_t* x,
                    const std::uint16_t* w, const D* b, std::uint16_t* y, std::uint8_t* code, cudaStream_t stream) {
  int dev = 0, sms = 0, per_sm = 0;
  MF_CUDA_CHECK(cudaGetDevice(&dev));
  MF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  MF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, resident_cin1_fwd_kernel<D, P, NT>, kThreads, 0));
  const std::int64_t resident = std::int64_t(sms > 0 ? sms : 1) * (per_sm > 0 ? per_sm : 1);
  const auto grid = unsigned(geo.tiles < resident ? geo.tiles : resident);
  resident_cin1_fwd_kernel<D, P, NT><<<grid, kThreads, 0, stream>>>(d, geo, wide, x, w, b, y, code);
  MF_CUDA_CHECK_LAUNCH();
}

template <class D, int P>
void forward_p(const ConvReluPoolDims& d, const Geom& geo, bool wide, const std::uint16_t* x, const std::uint16_t* w,
               const D* b, std::uint16_t* y, std::uint8_t* code, cudaStream_t stream) {
  switch (pick_units(d.cout)) {
    case 1: return launch_forward<D, P, 2>(d, geo, wide, x, w, b, y, code, stream);
    case 2: return launch_forward<D, P, 4>(d, geo, wide, x, w, b, y, code, stream);
    case 3: return launch_forward<D, P, 6>(d, geo, wide, x, w, b, y, code, stream);
    default: return launch_forward<D, P, 8>(d, geo, wide, x, w, b, y, code, stream);
  }
}

template <class D, int P>
void dw_p(const ConvReluPoolDims& d, const Geom& geo, bool wide, int chunks, const std::uint16_t* x,
          const std::uint16_t* dy, const std::uint8_t* code, float* part, cudaStream_t stream) {
  const unsigned grid = unsigned(chunks);
  switch (pick_units(d.cout)) {
    case 1: resident_cin1_dw_kernel<D, P, 1><<<grid, kThreads, 0, stream>>>(d, geo, wide, chunks, x, dy, code, part); break;
    case 2: resident_cin1_dw_kernel<D, P, 2><<<grid, kThreads, 0, stream>>>(d, geo, wide, chunks, x, dy, code, part); break;
    case 3: resident_cin1_dw_kernel<D, P, 3><<<grid, kThreads, 0, stream>>>(d, geo, wide, chunks, x, dy, code, part); break;
    default: resident_cin1_dw_kernel<D, P, 4><<<grid, kThreads, 0, stream>>>(d, geo, wide, chunks, x, dy, code, part); break;
  }
  MF_CUDA_CHECK_LAUNCH();
}

// dw and db through partials over contiguous ranges of the geometry's tiles.
template <class D>
void dw_by_tiles(const ConvReluPoolDims& d, const Geom& geo, const void* x, const void* dy, const std::uint8_t* code,
                 float* dw, float* db, cudaStream_t stream) {
  dw_db_by_partials(d, geo.tiles, kMaxPartialChunks, dw, db, stream, [&](int chunks, float* part) {
    const bool wide = d.w % 8 == 0 && aligned_to(x, 16);
    const auto* xd = static_cast<const std::uint16_t*>(x);
    const auto* dyd = static_cast<const std::uint16_t*>(dy);
    if (d.pool == 2) dw_p<D, 2>(d, geo, wide, chunks, xd, dyd, code, part, stream);
    else dw_p<D, 1>(d, geo, wide, chunks, xd, dyd, code, part, stream);
  });
}

}  // namespace

bool resident_cin1_can_run(const ConvReluPoolDims& d, DType dtype) {
  return (dtype == DType::bf16 || dtype == DType::f16) && shape_ok(d) && gpu_is_sm80_or_newer();
}

template <class T>
bool resident_cin1_forward(const ConvReluPoolDims& d, const void* x, const void* w, const void* b, void* y,
                           std::uint8_t* code, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    return false;
  } else {
    if (!shape_ok(d) || !aligned_to(y, 16) || !aligned_to(code, 16) || !aligned_to(x, 2)) return false;
    if (!gpu_is_sm80_or_newer()) return false;
    const Geom geo = forward_geom(d);
    if (geo.tiles == 0) return true;
    using D = cuda::device_t<T>;
    const bool wide = d.w % 8 == 0 && aligned_to(x, 16);
    const auto* xd = static_cast<const std::uint16_t*>(x);
    const auto* wd = static_cast<const std::uint16_t*>(w);
    const auto* bd = static_cast<const D*>(b);
    auto* yd = static_cast<std::uint16_t*>(y);
    if (d.pool == 2) forward_p<D, 2>(d, geo, wide, xd, wd, bd, yd, code, stream);
    else forward_p<D, 1>(d, geo, wide, xd, wd, bd, yd, code, stream);
    return true;
  }
}

template <class T>
bool resident_cin1_dw(const ConvReluPoolDims& d, const void* x, const void* dy, const std::uint8_t* code, float* dw,
                      float* db, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    return false;
  } else {
    if (!shape_ok(d) || !aligned_to(dy, 16) || !aligned_to(code, 8) || !aligned_to(x, 2)) return false;
    if (!gpu_is_sm80_or_newer()) return false;
    dw_by_tiles<cuda::device_t<T>>(d, dw_geom(d), x, dy, code, dw, db, stream);
    return true;
  }
}

#define MF_INSTANTIATE(T)                                                                                          \
  template bool resident_cin1_forward<T>(const ConvReluPoolDims&, const void*, const void*, const void*, void*,    \
                                         std::uint8_t*, cudaStream_t);                                             \
  template bool resident_cin1_dw<T>(const ConvReluPoolDims&, const void*, const void*, const std::uint8_t*, float*, \
                                    float*, cudaStream_t);
MF_INSTANTIATE(float)
MF_INSTANTIATE(f16)
MF_INSTANTIATE(bf16)
#undef MF_INSTANTIATE

}  // namespace mf::kernels
