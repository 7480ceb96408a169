// AdamW's CPU loops in AVX-512 (contract: adamw_cpu_avx512.hpp). AVX-512 only
// inside this file's target-attributed functions: the target attribute and
// the lane masks are the AVX-512 prelude's (kernels/simd_isa_avx512.inc).
#include "kernels/adamw_cpu_avx512.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "kernels/simd_isa_avx512.inc"

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 flags the _mm512_undefined_* placeholder inside _mm512_sqrt_ps,
// _mm512_cvtps_pd and _mm512_extractf64x4_pd (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace mf::kernels {

using avx512::lanes;

MF_ISA_TARGET void adamw_sumsq_avx512(const float* grad, std::int64_t n, float inv_scale, double* sumsq,
                                  long long* nonfinite) {
  const __m512 scale = _mm512_set1_ps(inv_scale), fmax = _mm512_set1_ps(3.40282347e+38f);
  __m512d acc = _mm512_setzero_pd();
  long long bad = 0;
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 in = lanes(n - i);
    const __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(in, grad + i), scale);
    // |g| <= FLT_MAX is false for Inf and NaN (ordered compare); lanes past n load 0.
    const __mmask16 fin = _mm512_cmp_ps_mask(_mm512_abs_ps(g), fmax, _CMP_LE_OQ);
    bad += __builtin_popcount(unsigned(in & ~fin));
    const __m512 gz = _mm512_maskz_mov_ps(fin, g);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(gz));
    const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(gz), 1)));
    acc = _mm512_add_pd(acc, _mm512_mul_pd(lo, lo));  // elements i .. i+7 (lanes 0..7)
    acc = _mm512_add_pd(acc, _mm512_mul_pd(hi, hi));  // then i+8 .. i+15
  }
  alignas(64) double lane[8];
  _mm512_store_pd(lane, acc);
  double s = lane[0];
  for (int l = 1; l < 8; ++l) s += lane[l];
  *sumsq = s;
  *nonfinite = bad;
}

MF_ISA_TARGET void adamw_update_avx512(const AdamWLaneScalars& s, std::int64_t begin, std::int64_t end,
                                   std::int64_t decay_end, float* master, const float* grad, float* m, float* v) {
  const __m512 coef = _mm512_set1_ps(s.coef), decay = _mm512_set1_ps(s.decay_factor);
  const __m512 b1 = _mm512_set1_ps(s.beta1), omb1 = _mm512_set1_ps(s.one_minus_beta1);
  const __m512 b2 = _mm512_set1_ps(s.beta2), omb2 = _mm512_set1_ps(s.one_minus_beta2);
  const __m512 step = _mm512_set1_ps(s.step_size), bc2 = _mm512_set1_ps(s.bc2_sqrt), eps = _mm512_set1_ps(s.eps);
  for (std::int64_t i = begin; i < end; i += 16) {
    const __mmask16 in = lanes(end - i);
    const std::int64_t nd = decay_end - i;
    const __mmask16 dec = lanes(nd);  // none when nd <= 0
    const __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(in, grad + i), coef);
    __m512 p = _mm512_maskz_loadu_ps(in, master + i);
    p = _mm512_mask_mul_ps(p, dec, p, decay);
    const __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_maskz_loadu_ps(in, m + i)), _mm512_mul_ps(omb1, g));
    const __m512 vi =
        _mm512_add_ps(_mm512_mul_ps(b2, _mm512_maskz_loadu_ps(in, v + i)), _mm512_mul_ps(omb2, _mm512_mul_ps(g, g)));
    const __m512 den = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2), eps);
    p = _mm512_sub_ps(p, _mm512_mul_ps(step, _mm512_div_ps(mi, den)));
    _mm512_mask_storeu_ps(master + i, in, p);
    _mm512_mask_storeu_ps(m + i, in, mi);
    _mm512_mask_storeu_ps(v + i, in, vi);
  }
}

}  // namespace mf::kernels

#else  // not x86-64 with GCC or Clang: never called (cpu_has_avx512() is false)

namespace mf::kernels {
void adamw_sumsq_avx512(const float*, std::int64_t, float, double*, long long*) { __builtin_trap(); }
void adamw_update_avx512(const AdamWLaneScalars&, std::int64_t, std::int64_t, std::int64_t, float*, const float*,
                         float*, float*) {
  __builtin_trap();
}
}  // namespace mf::kernels

#endif
