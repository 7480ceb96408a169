// AVX-512 FMA panel kernel of gemm_cpu (contract: gemm_cpu_avx512.hpp). Like
// conv_cpu_avx512.cpp: AVX-512 only inside this file's target-attributed
// functions, nothing inline shared with other files.
#include "kernels/gemm_cpu_avx512.hpp"

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

constexpr std::int64_t kTileRows = 8;
constexpr std::int64_t kTileCols = 32;   // two 16-lane vectors
constexpr std::int64_t kColBlock = 256;  // C columns per pass (B rows stay in L1/L2)

MF_AVX512 __mmask16 lanes(std::int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// MR rows x up to 32 columns (masks m0, m1) of C.
template <int MR>
MF_AVX512 void tile(const float* ap, std::int64_t lda, const float* bp, std::int64_t ldb, std::int64_t kn,
                    __mmask16 m0, __mmask16 m1, float* c, std::int64_t ldc) {
  __m512 acc[MR][2];
  MF_UNROLL for (int r = 0; r < MR; ++r) {
    acc[r][0] = _mm512_maskz_loadu_ps(m0, c + r * ldc);
    acc[r][1] = _mm512_maskz_loadu_ps(m1, c + r * ldc + 16);
  }
  for (std::int64_t kk = 0; kk < kn; ++kk) {
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, bp + kk * ldb), b1 = _mm512_maskz_loadu_ps(m1, bp + kk * ldb + 16);
    MF_UNROLL for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r * lda + kk]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  MF_UNROLL for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, m0, acc[r][0]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, acc[r][1]);
  }
}

MF_AVX512 void row_tail(int mr, const float* ap, std::int64_t lda, const float* bp, std::int64_t ldb, std::int64_t kn,
                        __mmask16 m0, __mmask16 m1, float* c, std::int64_t ldc) {
  switch (mr) {
    case 1: return tile<1>(ap, lda, bp, ldb, kn, m0, m1, c, ldc);
    case 2: return tile<2>(ap, lda, bp, ldb, kn, m0, m1, c, ldc);
    case 3: return tile<3>(ap, lda, bp, ldb, kn, m0, m1, c, ldc);
    case 4: return tile<4>(ap, lda, bp, ldb, kn, m0, m1, c, ldc);
    case 5: return tile<5>(ap, lda, bp, ldb, kn, m0, m1, c, ldc);
    case 6: return tile<6>(ap, lda, bp, ldb, kn, m0, m1, c, ldc);
    default: return tile<7>(ap, lda, bp, ldb, kn, m0, m1, c, ldc);
  }
}

}  // namespace

MF_AVX512 void gemm_panel_avx512(const float* ap, std::int64_t lda, const float* bp, std::int64_t ldb,
                                 std::int64_t kn, std::int64_t rows, std::int64_t cols, float* c, std::int64_t ldc) {
  for (std::int64_t jb = 0; jb < cols; jb += kColBlock) {
    const std::int64_t je = jb + kColBlock < cols ? jb + kColBlock : cols;
    for (std::int64_t r = 0; r < rows; r += kTileRows) {
      const std::int64_t mr = rows - r < kTileRows ? rows - r : kTileRows;
      for (std::int64_t j = jb; j < je; j += kTileCols) {
        const __mmask16 m0 = lanes(je - j), m1 = lanes(je - j - 16);
        if (mr == kTileRows)
          tile<kTileRows>(ap + r * lda, lda, bp + j, ldb, kn, m0, m1, c + r * ldc + j, ldc);
        else
          row_tail(int(mr), ap + r * lda, lda, bp + j, ldb, kn, m0, m1, c + r * ldc + j, ldc);
      }
    }
  }
}

}  // namespace mf::kernels

#else  // not x86-64 with GCC or Clang: never called (cpu_has_avx512() is false)

namespace mf::kernels {
void gemm_panel_avx512(const float*, std::int64_t, const float*, std::int64_t, std::int64_t, std::int64_t,
                       std::int64_t, float*, std::int64_t) {
  __builtin_trap();
}
}  // namespace mf::kernels

#endif
