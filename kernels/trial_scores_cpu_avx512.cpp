// The trial-score body for avx512 (kernels/trial_scores_simd.hpp): the
// instruction-set prelude, then the shared body.
#include "kernels/trial_scores_simd.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "kernels/simd_isa_avx512.inc"
#include "kernels/trial_scores_simd.inc"
#else  // not x86-64 with GCC or Clang: never called (engine/cpu_kernels.hpp says no avx512)
namespace mf::kernels::avx512 {
void trial_scores_range(const float*, std::int64_t, const std::int32_t*, std::int64_t, std::int64_t, float*) {
  __builtin_trap();
}
}  // namespace mf::kernels::avx512
#endif
