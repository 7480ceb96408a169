// conv_relu_pool: y = maxpool_{p x p, stride p}( relu( conv2d(x, w) + b ) )
//
// conv k x k (k odd), stride 1, zero padding k/2, so the conv output is H x W;
// pool p (2, or 1 for "no pool"); windows that do not fit are dropped (floor),
// as in PyTorch: PH = H / p, PW = W / p. Ties in the max go to the first
// element in row-major order; NaN propagates (as PyTorch's max_pool2d).
//
// Layouts (row-major):
//   x    [N, H, W, Cin]        activation dtype T (NHWC)
//   w    [Cout, k, k, Cin]     T   (OHWI; PyTorch's Conv2d weight is
//                                   [Cout, Cin, k, k]: w[o][i][r][s] -> w[o][r][s][i])
//   b    [Cout]                T
//   y    [N, PH, PW, Cout]     T
//   code [N, PH, PW, Cout]     u8: what the forward keeps for the backward, one
//        byte per pooled output: the winning position dy*p+dx inside its p x p
//        window, or kNoGrad when the winner's pre-activation was <= 0 (ReLU
//        blocked it). 1 byte against the 4-byte pre-pool tensor times p*p.
//   dy   [N, PH, PW, Cout]     T
//   dx   [N, H, W, Cin]        T, may be null (the first layer skips it)
//   dw   [Cout, k, k, Cin]     f32, overwritten (not accumulated)
//   db   [Cout]                f32, overwritten
// Precision: products of T operands accumulated in f32; outputs rounded once.
// No TF32 anywhere: f32 runs in full f32 on CUDA cores; bf16/f16 use tensor
// cores (mma.sync, sm_80+) with f32 accumulation. The CUDA variants are in
// conv_relu_pool{,_tiled,_mma,_cin1,_resident,_resident_dw,_resident_cin1}.cu
// (see ConvAlgo below, docs/decisions.md).
// Deterministic: no floating-point atomics; bit-identical run after run.
// T is f32, bf16 or f16 (the `dtype` argument).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/dtype.hpp"

namespace mf::kernels {

inline constexpr std::uint8_t kNoGrad = 0xff;

struct ConvReluPoolDims {
  std::int64_t n = 1;
  int h = 1, w = 1, cin = 1, cout = 1;
  int k = 3;
  int pool = 2;
  constexpr int ph() const { return h / pool; }
  constexpr int pw() const { return w / pool; }
};

void conv_relu_pool_forward_cpu(const ConvReluPoolDims& d, DType dtype, const void* x, const void* w,
                                const void* b, void* y, std::uint8_t* code, cudaStream_t stream);
void conv_relu_pool_backward_cpu(const ConvReluPoolDims& d, DType dtype, const void* x, const void* w,
                                 const void* dy, const std::uint8_t* code, void* dx, float* dw,
                                 float* db, cudaStream_t stream);

// The CPU implementation (twin, or avx512 micro-kernels) follows the
// process-wide choice of engine/cpu_kernels.hpp (MELFORGE_CPU_KERNELS).

// Which CUDA implementation conv_relu_pool_*_cuda runs.
// Process-wide; the environment variable MELFORGE_CONV_ALGO (auto, direct,
// tiled, mma, cin1, resident) sets the initial value. What each variant needs
// (checked by its launcher, which refuses otherwise):
//   direct    nothing beyond the layouts above (the last fallback).
//   tiled     k <= 5.
//   mma       bf16/f16; k 1 or 3; Cin and Cout multiples of 16 (one m16n8k16
//             step reduces 16 channels; outputs are stored 16 channels at a
//             time); x, w, y, code (forward) and dx 16-byte aligned; sm_80+.
//   cin1      Cin = 1, k = 3, Cout a power of two in [16, 256]; y, code
//             (forward) and dy, code (backward) 16-byte aligned. Any dtype.
//   resident  bf16/f16, sm_80+, and either mma's shape conditions (Cin and
//             Cout multiples of 16, k 1 or 3; x, w, y, code, dy, dx 16-byte
//             aligned, and a shared-memory budget per part), or the Cin = 1
//             layer: k = 3, Cout a multiple of 16 in [16, 256] except 176 and
//             208; y, code (forward) and dy 16-byte aligned, code (dw) 8-byte,
//             x 2-byte (forward and dw only: a Cin = 1 backward that wants dx
//             goes to cin1).
// Every variant takes pool 1 or 2. automatic takes resident when it can run,
// else cin1, else mma, else tiled, else direct: on an H200 (bf16, batch 8192,
// LeakCNN-64) resident was the fastest on all three layers, forward and
// backward (docs/decisions.md, bench/results/gpu-h200-2026-11-28). An explicit variant that
// refuses a shape falls back to the simpler ones: resident -> cin1 -> mma ->
// tiled -> direct, cin1 -> tiled -> direct, mma -> tiled -> direct. A bf16/f16
// conv that lands on tiled or direct runs in FP32 on CUDA cores and says so
// once.
// Setting it from code, its names and the variant a shape resolves to are for
// the benchmarks and tests: kernels/conv_algo_lab.hpp.
enum class ConvAlgo : int { automatic = 0, direct = 1, tiled = 2, mma = 3, cin1 = 4, resident = 5 };
ConvAlgo conv_relu_pool_algo();

void conv_relu_pool_forward_cuda(const ConvReluPoolDims& d, DType dtype, const void* x, const void* w,
                                 const void* b, void* y, std::uint8_t* code, cudaStream_t stream);
void conv_relu_pool_backward_cuda(const ConvReluPoolDims& d, DType dtype, const void* x, const void* w,
                                  const void* dy, const std::uint8_t* code, void* dx, float* dw,
                                  float* db, cudaStream_t stream);

}  // namespace mf::kernels
