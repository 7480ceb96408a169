// Which implementation the CPU backend's hot kernels run: one process-wide
// choice shared by every op that has more than one (conv_relu_pool, dense).
//   twin    the reference twins: baseline x86-64 with an AVX2 clone and no
//           FMA, so every x86-64 CPU computes the same bits.
//   avx512  AVX-512 FMA micro-kernels with wider register tiles: several
//           times the twins' FLOP rate. A fused multiply-add rounds once where
//           the twin rounds twice, so the bits differ from the twin's (within
//           f32 accumulation error; the tests hold each op to its twin and a
//           float64 reference). They are still the same for any thread count,
//           run after run, on one CPU: resume stays bit-identical.
//   auto    avx512 where the CPU has AVX-512F and FMA, else twin (the default).
// The environment variable MELFORGE_CPU_KERNELS (auto, twin, avx512) sets the
// initial value; asking for avx512 on a CPU without it is an error.
#pragma once

namespace mf {

enum class CpuKernels : int { automatic = 0, twin = 1, avx512 = 2 };

void set_cpu_kernels(CpuKernels k);
CpuKernels cpu_kernels();  // as set (automatic unless set or in the environment)
const char* cpu_kernels_name(CpuKernels k);
// What runs when `requested` is selected: never automatic; throws for avx512
// on a CPU without it.
CpuKernels resolve_cpu_kernels(CpuKernels requested);
// resolve_cpu_kernels(cpu_kernels()) == avx512: the question each op asks.
bool use_avx512_kernels();
// x86-64 with AVX-512F and FMA (false on other CPUs and compilers).
bool cpu_has_avx512();

}  // namespace mf
