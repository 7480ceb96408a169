// FMA panel kernels of gemm_cpu (kernels/dense.hpp) for the avx512 and avx2
// CPU kernels (engine/cpu_kernels.hpp): one body (kernels/gemm_cpu_simd.inc)
// compiled per instruction set (gemm_cpu_avx512.cpp, gemm_cpu_avx2.cpp). Call a
// namespace's function only when the CPU has that instruction set.
#pragma once

#include <cstdint>

namespace mf::kernels {

// gemm_panel: c[r*ldc + j] = fma(a, b, c) over kk < kn in increasing order,
// with a = ap[r*lda + kk] and b = bp[kk*ldb + j], for r < rows and j < cols:
// every C element is the one-rounding-per-step sum `s = fmaf(a, b, s)`,
// whatever tile covers it (register tiles of rows x 2 vectors; masked column
// and shorter row tails).
namespace avx512 {
void gemm_panel(const float* ap, std::int64_t lda, const float* bp, std::int64_t ldb, std::int64_t kn,
                std::int64_t rows, std::int64_t cols, float* c, std::int64_t ldc);
}  // namespace avx512
namespace avx2 {
void gemm_panel(const float* ap, std::int64_t lda, const float* bp, std::int64_t ldb, std::int64_t kn,
                std::int64_t rows, std::int64_t cols, float* c, std::int64_t ldc);
}  // namespace avx2

}  // namespace mf::kernels
