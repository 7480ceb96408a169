// The CPU's measured f32 FMA peak (bench/cpu_fma_peak.hpp): independent FMA
// chains in registers, on every CPU-backend thread at once.
#include "bench/cpu_fma_peak.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "engine/cpu_kernels.hpp"
#include "engine/parallel.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MF_HAVE_X86_PEAK 1
#endif

namespace mf::bench {

namespace {

constexpr int kChains = 12;  // > FMA latency x pipes on current x86 cores
constexpr std::int64_t kIters = std::int64_t(1) << 23;  // ~30 ms a run on a ~3.5 GHz core

#ifdef MF_HAVE_X86_PEAK
// Returns the sum of the chains (kept live); kIters x kChains FMAs of `lanes` floats.
__attribute__((target("avx512f,fma"))) float chains_avx512(float seed) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(seed + float(i));
  const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
  for (std::int64_t it = 0; it < kIters; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], m, a);
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  float q[16];
  _mm512_storeu_ps(q, s);
  float t = 0.f;
  for (float v : q) t += v;
  return t;
}
__attribute__((target("avx2,fma"))) float chains_avx2(float seed) {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(seed + float(i));
  const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
  for (std::int64_t it = 0; it < kIters; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], m, a);
  __m256 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_ps(s, acc[i]);
  float q[8];
  _mm256_storeu_ps(q, s);
  return q[0] + q[1] + q[2] + q[3] + q[4] + q[5] + q[6] + q[7];
}
#endif

}  // namespace

CpuFmaPeak measure_cpu_fma_peak() {
  CpuFmaPeak p;
  p.threads = cpu_threads();
#ifdef MF_HAVE_X86_PEAK
  const CpuKernels k = active_cpu_kernels();
  if (k != CpuKernels::avx512 && k != CpuKernels::avx2) return p;
  p.isa = cpu_kernels_name(k);
  const int lanes = k == CpuKernels::avx512 ? 16 : 8;
  std::atomic<float> sink{0.f};
  for (int run = 0; run < 3; ++run) {  // the best of 3: the first also warms the clocks up
    const auto t0 = std::chrono::steady_clock::now();
    parallel_for(p.threads, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i)
        sink.store(k == CpuKernels::avx512 ? chains_avx512(float(i)) : chains_avx2(float(i)));
    }, 1);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    p.gflops = std::max(p.gflops, 2.0 * lanes * kChains * double(kIters) * p.threads / s / 1e9);
  }
#endif
  return p;
}

}  // namespace mf::bench
