// Helpers for melforge tests: seeded random fills, small-integer fills whose
// fp16/bf16 products and fp32 sums are exact, error norms, and running the
// Python oracle.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/cpu_kernels.hpp"
#include "engine/error.hpp"

namespace mf::testing {

// True in the emulated build (MELFORGE_CUDA_EMU, tests/cudaemu): "GPU" work
// runs on the CPU emulator, so GPU suites scale their largest shapes down.
#if defined(MELFORGE_CUDA_EMU)
inline constexpr bool kEmulatedGpu = true;
#else
inline constexpr bool kEmulatedGpu = false;
#endif
// n, or n / div (at least 1) in the emulated build.
inline std::int64_t emu_scaled(std::int64_t n, std::int64_t div) {
  return kEmulatedGpu ? (n / div > 0 ? n / div : 1) : n;
}


inline std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Normally distributed (mean, sd), e.g. log-mel-like data with a large offset.
inline std::vector<float> random_normal_floats(std::size_t n, std::uint64_t seed, float mean, float sd) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(mean, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Integers in [lo, hi]: exact in fp16/bf16, and small enough that products and
// short sums stay exact in fp32.
inline std::vector<float> random_small_ints(std::size_t n, std::uint64_t seed, int lo = -3, int hi = 3) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = float(d(rng));
  return v;
}

// ||a - b||_2 / ||b||_2 in double; +inf if any NaN appears in a, or if b is
// zero and a is not.
template <class A, class B>
double rel_l2(const A& a, const B& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = double(a[i]), y = double(b[i]);
    if (std::isnan(x) || std::isnan(y)) return INFINITY;
    num += (x - y) * (x - y);
    den += y * y;
  }
  if (den == 0) return num == 0 ? 0.0 : INFINITY;
  return std::sqrt(num / den);
}

// The message of the mf::Error that f throws, or "<no error>" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const mf::Error& e) {
    return e.message();
  }
  return "<no error>";
}

// Runs the Python oracle interpreter (Debian's python3 with torch) on a script
// under tests/oracle/ with arguments; returns its exit code.
// The script's stdout and stderr go to the test's output.
inline int run_oracle(const std::string& script, const std::string& args) {
  const std::string cmd = std::string(MELFORGE_ORACLE_PYTHON) + " " + MELFORGE_SOURCE_DIR +
                          "/tests/oracle/" + script + " " + args;
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

// The CPU kernel variants this machine runs (engine/cpu_kernels.hpp): the
// twins always, avx2 and avx512 where the CPU has them. Tests of ops with variants loop
// over them, each inside a CpuKernelsScope.
inline std::vector<CpuKernels> cpu_kernel_variants() {
  std::vector<CpuKernels> v{CpuKernels::twin};
  if (cpu_has_avx2_fma()) v.push_back(CpuKernels::avx2);
  if (cpu_has_avx512()) v.push_back(CpuKernels::avx512);
  return v;
}
// Selects `k` for the scope's lifetime, then restores the previous choice.
struct CpuKernelsScope {
  CpuKernels saved = cpu_kernels();
  explicit CpuKernelsScope(CpuKernels k) { set_cpu_kernels(k); }
  ~CpuKernelsScope() { set_cpu_kernels(saved); }
  CpuKernelsScope(const CpuKernelsScope&) = delete;
  CpuKernelsScope& operator=(const CpuKernelsScope&) = delete;
};

// Runs the audio front-end's oracle (librosa in .venv-audio/, made by
// tools/audio-oracle-venv.sh) on a script under tests/oracle/; returns its exit
// code. A missing venv is a failure with the command that makes it.
inline int run_audio_oracle(const std::string& script, const std::string& args) {
  const std::string py = MELFORGE_AUDIO_ORACLE_PYTHON;
  if (access(py.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "the audio oracle %s is missing: run tools/audio-oracle-venv.sh\n", py.c_str());
    return 127;
  }
  const std::string cmd = py + " " + MELFORGE_SOURCE_DIR + "/tests/oracle/" + script + " " + args;
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

}  // namespace mf::testing
