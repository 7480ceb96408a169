// FMA micro-kernels for the CPU convs (the avx512 and avx2 CPU kernels of
// conv_relu_pool, kernels/conv_relu_pool.cpp, and conv2d, kernels/conv2d.cpp):
// the twins' conv_row / tap_row / dw_row data layouts and loop contracts,
// wider register tiles and fused multiply-adds.
// An FMA rounds once where the twin rounds twice, so the bits differ from the
// twin's (within f32 accumulation error; tests hold both to a float64 loop).
// Per output the sums run in a fixed order that depends on the shape only: the
// results do not depend on the thread count.
//
// One body (kernels/conv_cpu_simd.inc) compiled per instruction set
// (conv_cpu_avx512.cpp, conv_cpu_avx2.cpp). Call a namespace's functions only
// when engine/cpu_kernels.hpp says the CPU has that instruction set. Channel
// counts passed as `coutp` / `lanesp` must be multiples of kChannelBlock, conv_row's
// pixel counts (`wout_p`) multiples of kPixelBlock.
#pragma once

#include <cstdint>

namespace mf::kernels {

// out[ow][co] = bias[co] (0 when bias is null) + sum over r, s, ci (in that
// order) of rows[r][(ow + s) * cin + ci] * wt[((r*k + s)*cin + ci)*coutp + co],
// for ow < wout_p and co < coutp. rows[r] holds wout_p + k - 1 pixels of cin floats.
using ConvRowFn = void (*)(const float* const* rows, int cin, int k, const float* wt, int coutp, const float* bias,
                           int wout_p, float* out);

// The gathered conv row (conv2d's forward and dx, any stride):
// out[p*lanesp + l] = init[l] (0 when init is null) + sum over t < ntaps, then
// c < c_n (in that order), of in[t][p*pstep + c] * wm[t][c*lanesp + l],
// for p < npix and l < lanesp. The FMA kernels take any npix (a row's last
// pixels in a narrower tile), the twin a multiple of its pixel block.
using TapRowFn = void (*)(int ntaps, const float* const* in, const float* const* wm, int c_n, std::int64_t pstep,
                          int lanesp, const float* init, int npix, float* out);

// For the conv rows j < nconv of one image at stride st (conv row j reads
// input rows xrows[j*st .. j*st + k - 1], each (wout_p - 1)*st + k pixels of
// cin floats; g[j] is its output gradient, wout_p pixels of coutp floats):
//   dwt[((r*k + s)*cin + ci)*coutp + co] += sum over j, then ow, of
//       xrows[j*st + r][(ow*st + s)*cin + ci] * g[j][ow*coutp + co]
//   db[co] += sum over j, then ow, of g[j][ow*coutp + co].
using DwRowsFn = void (*)(const float* const* xrows, int nconv, int st, int cin, int k, const float* const* g,
                          int coutp, int wout_p, float* dwt, float* db);

namespace avx512 {
inline constexpr int kPixelBlock = 8, kChannelBlock = 16;
void conv_row(const float* const* rows, int cin, int k, const float* wt, int coutp, const float* bias, int wout_p,
              float* out);
void tap_row(int ntaps, const float* const* in, const float* const* wm, int c_n, std::int64_t pstep, int lanesp,
             const float* init, int npix, float* out);
void dw_rows(const float* const* xrows, int nconv, int st, int cin, int k, const float* const* g, int coutp,
             int wout_p, float* dwt, float* db);
}  // namespace avx512

namespace avx2 {
inline constexpr int kPixelBlock = 4, kChannelBlock = 8;
void conv_row(const float* const* rows, int cin, int k, const float* wt, int coutp, const float* bias, int wout_p,
              float* out);
void tap_row(int ntaps, const float* const* in, const float* const* wm, int c_n, std::int64_t pstep, int lanesp,
             const float* init, int npix, float* out);
void dw_rows(const float* const* xrows, int nconv, int st, int cin, int k, const float* const* g, int coutp,
             int wout_p, float* dwt, float* db);
}  // namespace avx2

}  // namespace mf::kernels
