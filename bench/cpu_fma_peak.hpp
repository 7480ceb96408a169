// The roofline of the CPU benchmarks: the f32 FMA rate the cores reach with
// the active CPU kernels' vectors (engine/cpu_kernels.hpp: 16 lanes for
// avx512, 8 for avx2), every CPU-backend thread running independent FMA chains
// from registers (no memory traffic). The best of 3 runs, about 0.1 s a call.
#pragma once

#include <string>

namespace mf::bench {

struct CpuFmaPeak {
  double gflops = 0;  // 0 with the twin kernels (no FMA path to measure)
  int threads = 0;
  std::string isa;    // avx512 or avx2; empty with the twin
};

CpuFmaPeak measure_cpu_fma_peak();

}  // namespace mf::bench
