// FMA micro-kernels for the CPU conv (conv_relu_pool's avx512 and avx2 CPU
// kernels, kernels/conv_relu_pool.cpp): the twin's conv_row / dw_row data
// layouts and loop contracts, wider register tiles and fused multiply-adds.
// An FMA rounds once where the twin rounds twice, so the bits differ from the
// twin's (within f32 accumulation error; tests hold both to a float64 loop).
// Per output the sums run in a fixed order that depends on the shape only: the
// results do not depend on the thread count.
//
// One body (kernels/conv_cpu_simd.inc) compiled per instruction set
// (conv_cpu_avx512.cpp, conv_cpu_avx2.cpp). Call a namespace's functions only
// when engine/cpu_kernels.hpp says the CPU has that instruction set. Channel
// counts passed as `coutp` must be multiples of kChannelBlock, pixel counts
// (`wout_p`) multiples of kPixelBlock.
#pragma once

#include <cstdint>

namespace mf::kernels {

// out[ow][co] = bias[co] (0 when bias is null) + sum over r, s, ci (in that
// order) of rows[r][(ow + s) * cin + ci] * wt[((r*k + s)*cin + ci)*coutp + co],
// for ow < wout_p and co < coutp. rows[r] holds wout_p + k - 1 pixels of cin floats.
using ConvRowFn = void (*)(const float* const* rows, int cin, int k, const float* wt, int coutp, const float* bias,
                           int wout_p, float* out);

// For the conv rows j < nconv of one image (conv row j reads input rows
// xrows[j .. j + k - 1], each wout_p + k - 1 pixels of cin floats; g[j] is its
// output gradient, wout_p pixels of coutp floats):
//   dwt[((r*k + s)*cin + ci)*coutp + co] += sum over j, then ow, of
//       xrows[j + r][(ow + s)*cin + ci] * g[j][ow*coutp + co]
//   db[co] += sum over j, then ow, of g[j][ow*coutp + co].
using DwRowsFn = void (*)(const float* const* xrows, int nconv, int cin, int k, const float* const* g, int coutp,
                          int wout_p, float* dwt, float* db);

namespace avx512 {
inline constexpr int kPixelBlock = 8, kChannelBlock = 16;
void conv_row(const float* const* rows, int cin, int k, const float* wt, int coutp, const float* bias, int wout_p,
              float* out);
void dw_rows(const float* const* xrows, int nconv, int cin, int k, const float* const* g, int coutp, int wout_p,
             float* dwt, float* db);
}  // namespace avx512

namespace avx2 {
inline constexpr int kPixelBlock = 4, kChannelBlock = 8;
void conv_row(const float* const* rows, int cin, int k, const float* wt, int coutp, const float* bias, int wout_p,
              float* out);
void dw_rows(const float* const* xrows, int nconv, int cin, int k, const float* const* g, int coutp, int wout_p,
             float* dwt, float* db);
}  // namespace avx2

}  // namespace mf::kernels
