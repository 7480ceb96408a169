#include "engine/cpu_kernels.hpp"

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "engine/error.hpp"

namespace mf {
namespace {

CpuKernels from_env() {
  const char* e = std::getenv("MELFORGE_CPU_KERNELS");
  if (!e || !*e) return CpuKernels::automatic;
  const std::string_view v(e);
  if (v == "auto") return CpuKernels::automatic;
  if (v == "twin") return CpuKernels::twin;
  if (v == "avx2") return CpuKernels::avx2;
  if (v == "avx512") return CpuKernels::avx512;
  MF_THROW("MELFORGE_CPU_KERNELS='{}': expected auto, twin, avx2 or avx512", v);
}

std::atomic<int>& slot() {
  static std::atomic<int> k{int(from_env())};
  return k;
}

}  // namespace

bool cpu_has_avx512() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  return have;
#else
  return false;
#endif
}

bool cpu_has_avx2_fma() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return have;
#else
  return false;
#endif
}

void set_cpu_kernels(CpuKernels k) { slot().store(int(k)); }
CpuKernels cpu_kernels() { return CpuKernels(slot().load()); }

const char* cpu_kernels_name(CpuKernels k) {
  switch (k) {
    case CpuKernels::automatic: return "auto";
    case CpuKernels::twin: return "twin";
    case CpuKernels::avx512: return "avx512";
    case CpuKernels::avx2: return "avx2";
  }
  return "?";
}

CpuKernels resolve_cpu_kernels(CpuKernels requested) {
  if (requested == CpuKernels::automatic)
    return cpu_has_avx512() ? CpuKernels::avx512 : cpu_has_avx2_fma() ? CpuKernels::avx2 : CpuKernels::twin;
  if (requested == CpuKernels::avx512 && !cpu_has_avx512())
    MF_THROW("CPU kernels avx512 (MELFORGE_CPU_KERNELS or set_cpu_kernels): this CPU has no AVX-512F with FMA; "
             "expected auto, twin{}", cpu_has_avx2_fma() ? " or avx2" : "");
  if (requested == CpuKernels::avx2 && !cpu_has_avx2_fma())
    MF_THROW("CPU kernels avx2 (MELFORGE_CPU_KERNELS or set_cpu_kernels): this CPU has no AVX2 with FMA; "
             "expected auto or twin");
  return requested;
}

CpuKernels active_cpu_kernels() { return resolve_cpu_kernels(cpu_kernels()); }

}  // namespace mf
