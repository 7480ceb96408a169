// Which implementation the CPU backend's hot kernels run: one process-wide
// choice shared by every op that has more than one (conv_relu_pool, dense,
// adamw).
//   twin    the reference twins: baseline x86-64 with an AVX2 clone and no
//           FMA, so every x86-64 CPU computes the same bits.
//   avx512  AVX-512 FMA micro-kernels with wider register tiles: several
//           times the twins' FLOP rate. A fused multiply-add rounds once where
//           the twin rounds twice, so the bits differ from the twin's (within
//           f32 accumulation error; the tests hold each op to its twin and a
//           float64 reference). They are still the same for any thread count,
//           run after run, on one CPU: resume stays bit-identical.
//   avx2    the same micro-kernels for AVX2 + FMA (8 lanes, 16 registers:
//           smaller tiles), for CPUs without AVX-512; its bits differ from
//           both others'. AdamW runs the twin's loop (its bits need no FMA).
//   auto    avx512 where the CPU has AVX-512F and FMA, else avx2 where it has
//           AVX2 and FMA, else twin (the default).
// The environment variable MELFORGE_CPU_KERNELS (auto, twin, avx2, avx512)
// sets the initial value; asking for an instruction set the CPU lacks is an
// error.
#pragma once

namespace mf {

enum class CpuKernels : int { automatic = 0, twin = 1, avx512 = 2, avx2 = 3 };

void set_cpu_kernels(CpuKernels k);
CpuKernels cpu_kernels();  // as set (automatic unless set or in the environment)
const char* cpu_kernels_name(CpuKernels k);
// What runs when `requested` is selected: never automatic; throws for an
// instruction set the CPU lacks.
CpuKernels resolve_cpu_kernels(CpuKernels requested);
// resolve_cpu_kernels(cpu_kernels()): the question each op asks.
CpuKernels active_cpu_kernels();
// x86-64 with AVX-512F and FMA, with AVX2 and FMA (false on other CPUs and compilers).
bool cpu_has_avx512();
bool cpu_has_avx2_fma();

}  // namespace mf
