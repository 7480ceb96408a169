// The AVX-512 FMA kernel of gemm_cpu (kernels/dense.hpp), run when
// use_avx512_kernels() (engine/cpu_kernels.hpp).
#pragma once

#include <cstdint>

namespace mf::kernels {

// c[r*ldc + j] = fma(a, b, c) over kk < kn in increasing order, with a =
// ap[r*lda + kk] and b = bp[kk*ldb + j], for r < rows and j < cols: every C
// element is the one-rounding-per-step sum `s = fmaf(a, b, s)`, whatever tile
// covers it (8 x 32 register tiles; masked column and shorter row tails).
void gemm_panel_avx512(const float* ap, std::int64_t lda, const float* bp, std::int64_t ldb, std::int64_t kn,
                       std::int64_t rows, std::int64_t cols, float* c, std::int64_t ldc);

}  // namespace mf::kernels
