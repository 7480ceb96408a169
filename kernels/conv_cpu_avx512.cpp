// AVX-512 FMA micro-kernels of the CPU conv (contracts: conv_cpu_avx512.hpp).
//
// Only this file's functions use AVX-512, through target attributes, so the
// rest of the build stays baseline x86-64 and the callers check the CPU first.
// Nothing here is an inline function shared with other files (no templates
// from headers): a COMDAT copy compiled for AVX-512 could otherwise replace
// the baseline one elsewhere.
//
// Register tiles (32 zmm registers): the conv holds 8 output pixels x 2
// vectors of 16 output channels (16 accumulators; per input channel 2 weight
// loads and 8 broadcasts feed 16 FMAs), dw holds 8 weight rows x 2 vectors of
// 16 channels and runs over every pixel of a group of conv rows before it
// touches memory.
#include "kernels/conv_cpu_avx512.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define MF_AVX512 __attribute__((target("avx512f,avx2,fma")))
#if defined(__clang__)
#define MF_UNROLL _Pragma("unroll")
#else
#define MF_UNROLL _Pragma("GCC unroll 16")
#endif

namespace mf::kernels {
namespace {

constexpr int kPixels = 8;  // conv tile: output pixels
constexpr int kRows = 8;    // dw tile: weight rows (r, s, ci)

template <int J>
MF_AVX512 void conv_tile(const float* const* rows, int cin, int k, const float* wt, int coutp, const float* bias,
                         int ow, int cb, float* out) {
  __m512 acc[kPixels][J];
  MF_UNROLL for (int j = 0; j < J; ++j) {
    const __m512 init = bias ? _mm512_loadu_ps(bias + cb + 16 * j) : _mm512_setzero_ps();
    MF_UNROLL for (int p = 0; p < kPixels; ++p) acc[p][j] = init;
  }
  for (int r = 0; r < k; ++r) {
    for (int s = 0; s < k; ++s) {
      const float* xp = rows[r] + std::int64_t(ow + s) * cin;
      const float* wp = wt + std::int64_t((r * k + s) * cin) * coutp + cb;
      for (int ci = 0; ci < cin; ++ci) {
        __m512 wv[J];
        MF_UNROLL for (int j = 0; j < J; ++j) wv[j] = _mm512_loadu_ps(wp + std::int64_t(ci) * coutp + 16 * j);
        MF_UNROLL for (int p = 0; p < kPixels; ++p) {
          const __m512 xv = _mm512_set1_ps(xp[std::int64_t(p) * cin + ci]);
          MF_UNROLL for (int j = 0; j < J; ++j) acc[p][j] = _mm512_fmadd_ps(xv, wv[j], acc[p][j]);
        }
      }
    }
  }
  MF_UNROLL for (int p = 0; p < kPixels; ++p)
    MF_UNROLL for (int j = 0; j < J; ++j) _mm512_storeu_ps(out + std::int64_t(ow + p) * coutp + cb + 16 * j, acc[p][j]);
}

// dw for weight rows m0 .. m0 + MT - 1 (m = (r*k + s)*cin + ci) and channels
// cb .. cb + 16*J - 1. kSameTap: all MT rows share (r, s), so their inputs are
// MT consecutive floats of one pixel (the common case, cin a multiple of 8).
template <int MT, int J, bool kSameTap>
MF_AVX512 void dw_tile(const float* const* xrows, int nconv, int cin, int k, const float* const* g, int coutp,
                       int wout_p, int m0, int cb, float* dwt) {
  __m512 acc[MT][J];
  MF_UNROLL for (int i = 0; i < MT; ++i)
    MF_UNROLL for (int j = 0; j < J; ++j) acc[i][j] = _mm512_loadu_ps(dwt + std::int64_t(m0 + i) * coutp + cb + 16 * j);
  int tap_row[MT], tap_off[MT];  // input row r and offset s*cin + ci of each weight row
  for (int i = 0; i < MT; ++i) {
    const int rs = (m0 + i) / cin, ci = (m0 + i) % cin;
    tap_row[i] = rs / k;
    tap_off[i] = (rs % k) * cin + ci;
  }
  for (int c = 0; c < nconv; ++c) {
    const float* gp = g[c] + cb;
    const float* xp[MT];
    for (int i = 0; i < MT; ++i) xp[i] = xrows[c + tap_row[i]] + tap_off[i];
    for (int ow = 0; ow < wout_p; ++ow) {
      __m512 gv[J];
      MF_UNROLL for (int j = 0; j < J; ++j) gv[j] = _mm512_loadu_ps(gp + std::int64_t(ow) * coutp + 16 * j);
      const std::int64_t at = std::int64_t(ow) * cin;
      MF_UNROLL for (int i = 0; i < MT; ++i) {
        const __m512 xv = _mm512_set1_ps(kSameTap ? xp[0][at + i] : xp[i][at]);
        MF_UNROLL for (int j = 0; j < J; ++j) acc[i][j] = _mm512_fmadd_ps(xv, gv[j], acc[i][j]);
      }
    }
  }
  MF_UNROLL for (int i = 0; i < MT; ++i)
    MF_UNROLL for (int j = 0; j < J; ++j) _mm512_storeu_ps(dwt + std::int64_t(m0 + i) * coutp + cb + 16 * j, acc[i][j]);
}

template <int J>
MF_AVX512 void dw_tail(int mt, const float* const* xrows, int nconv, int cin, int k, const float* const* g, int coutp,
                       int wout_p, int m0, int cb, float* dwt) {
  switch (mt) {
    case 1: return dw_tile<1, J, false>(xrows, nconv, cin, k, g, coutp, wout_p, m0, cb, dwt);
    case 2: return dw_tile<2, J, false>(xrows, nconv, cin, k, g, coutp, wout_p, m0, cb, dwt);
    case 3: return dw_tile<3, J, false>(xrows, nconv, cin, k, g, coutp, wout_p, m0, cb, dwt);
    case 4: return dw_tile<4, J, false>(xrows, nconv, cin, k, g, coutp, wout_p, m0, cb, dwt);
    case 5: return dw_tile<5, J, false>(xrows, nconv, cin, k, g, coutp, wout_p, m0, cb, dwt);
    case 6: return dw_tile<6, J, false>(xrows, nconv, cin, k, g, coutp, wout_p, m0, cb, dwt);
    default: return dw_tile<7, J, false>(xrows, nconv, cin, k, g, coutp, wout_p, m0, cb, dwt);
  }
}

template <int J>
MF_AVX512 void dw_all(const float* const* xrows, int nconv, int cin, int k, const float* const* g, int coutp,
                      int wout_p, float* dwt) {
  const int m_total = k * k * cin;
  for (int cb = 0; cb + 16 * J <= coutp; cb += 16 * J) {
    int m0 = 0;
    for (; m0 + kRows <= m_total; m0 += kRows) {
      if (m0 / cin == (m0 + kRows - 1) / cin)
        dw_tile<kRows, J, true>(xrows, nconv, cin, k, g, coutp, wout_p, m0, cb, dwt);
      else
        dw_tile<kRows, J, false>(xrows, nconv, cin, k, g, coutp, wout_p, m0, cb, dwt);
    }
    if (m0 < m_total) dw_tail<J>(m_total - m0, xrows, nconv, cin, k, g, coutp, wout_p, m0, cb, dwt);
  }
}

}  // namespace

MF_AVX512 void conv_row_avx512(const float* const* rows, int cin, int k, const float* wt, int coutp,
                               const float* bias, int wout_p, float* out) {
  for (int ow = 0; ow < wout_p; ow += kPixels) {
    int cb = 0;
    for (; cb + 32 <= coutp; cb += 32) conv_tile<2>(rows, cin, k, wt, coutp, bias, ow, cb, out);
    if (cb < coutp) conv_tile<1>(rows, cin, k, wt, coutp, bias, ow, cb, out);
  }
}

MF_AVX512 void dw_rows_avx512(const float* const* xrows, int nconv, int cin, int k, const float* const* g,
                              int coutp, int wout_p, float* dwt, float* db) {
  if (coutp % 32 == 0) {
    dw_all<2>(xrows, nconv, cin, k, g, coutp, wout_p, dwt);
  } else {
    dw_all<1>(xrows, nconv, cin, k, g, coutp, wout_p, dwt);
  }
  for (int cb = 0; cb < coutp; cb += 16) {
    __m512 acc = _mm512_loadu_ps(db + cb);
    for (int c = 0; c < nconv; ++c)
      for (int ow = 0; ow < wout_p; ++ow) acc = _mm512_add_ps(acc, _mm512_loadu_ps(g[c] + std::int64_t(ow) * coutp + cb));
    _mm512_storeu_ps(db + cb, acc);
  }
}

}  // namespace mf::kernels

#else  // not x86-64 with GCC or Clang: the twin runs instead

namespace mf::kernels {
void conv_row_avx512(const float* const*, int, int, const float*, int, const float*, int, float*) { __builtin_trap(); }
void dw_rows_avx512(const float* const*, int, int, int, const float* const*, int, int, float*, float*) {
  __builtin_trap();
}
}  // namespace mf::kernels

#endif
