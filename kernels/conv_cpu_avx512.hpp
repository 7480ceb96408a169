// AVX-512 FMA micro-kernels for the CPU conv (conv_relu_pool's `avx512`
// variant, kernels/conv_relu_pool.cpp). Same data layouts and loop contracts as
// the twin's conv_row / dw_row, wider register tiles (8 output pixels x 32
// output channels, or 8 weight rows x 32 channels for dw) and fused
// multiply-adds: one rounding per multiply-add instead of two, so the bits
// differ from the twin (within f32 accumulation error; tests compare them
// against it). Per output the sums run in a fixed order that depends on the
// shape only: the results do not depend on the thread count.
//
// Call only when cpu_has_avx512() (engine/cpu_kernels.hpp: a run-time CPU
// check; the rest of the build targets the baseline ISA). Every channel count passed as
// `coutp` here must be a multiple of 16; pixel counts (`wout_p`) multiples of 8.
#pragma once

#include <cstdint>

namespace mf::kernels {

// out[ow][co] = bias[co] (0 when bias is null) + sum over r, s, ci (in that
// order) of rows[r][(ow + s) * cin + ci] * wt[((r*k + s)*cin + ci)*coutp + co],
// for ow < wout_p and co < coutp. rows[r] holds wout_p + k - 1 pixels of cin floats.
void conv_row_avx512(const float* const* rows, int cin, int k, const float* wt, int coutp, const float* bias,
                     int wout_p, float* out);

// For the conv rows j < nconv of one image (conv row j reads input rows
// xrows[j .. j + k - 1], each wout_p + k - 1 pixels of cin floats; g[j] is its
// output gradient, wout_p pixels of coutp floats):
//   dwt[((r*k + s)*cin + ci)*coutp + co] += sum over j, then ow, of
//       xrows[j + r][(ow + s)*cin + ci] * g[j][ow*coutp + co]
//   db[co] += sum over j, then ow, of g[j][ow*coutp + co].
void dw_rows_avx512(const float* const* xrows, int nconv, int cin, int k, const float* const* g, int coutp,
                    int wout_p, float* dwt, float* db);

}  // namespace mf::kernels
