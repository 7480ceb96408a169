// The CPU conv micro-kernels for avx2 (kernels/conv_cpu_simd.hpp): the
// instruction-set prelude, then the shared body.
#include "kernels/conv_cpu_simd.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "kernels/simd_isa_avx2.inc"
#include "kernels/conv_cpu_simd.inc"
#else  // not x86-64 with GCC or Clang: never called (engine/cpu_kernels.hpp says no avx2)
namespace mf::kernels::avx2 {
void conv_row(const float* const*, int, int, const float*, int, const float*, int, float*) { __builtin_trap(); }
void tap_row(int, const float* const*, const float* const*, int, std::int64_t, int, const float*, int, float*) {
  __builtin_trap();
}
void dw_rows(const float* const*, int, int, int, int, const float* const*, int, int, float*, float*) {
  __builtin_trap();
}
}  // namespace mf::kernels::avx2
#endif
