// conv2d: y = act(conv(x, w) + b), the CNN stack's convolution
// (model/cnn_stack.hpp: residual blocks' 3x3 convs at stride 1 and 2, the 1x1
// stride-2 projection shortcut, the 7x7 stride-2 stem with Cin = 1, and
// bias + ReLU convs).
//
// conv k x k (k odd), stride 1 or 2, zero padding k/2:
//   y[n, oh, ow, co] = act(b[co] + sum_{r, s, ci} x[n, oh*stride + r - k/2, ow*stride + s - k/2, ci]
//                                                  * w[co, r, s, ci])
// (terms outside the image are zero), OH = (H - 1) / stride + 1, OW likewise
// (PyTorch's Conv2d(k, stride, padding=k//2): floor((H + 2*(k/2) - k) / stride) + 1).
// act is ReLU (max(v, 0), NaN passes) or the identity.
//
// Layouts (row-major):
//   x    [N, H, W, Cin]        T (NHWC)
//   w    [Cout, k, k, Cin]     T (OHWI; PyTorch's weight [Cout, Cin, k, k]:
//                                 w[o][i][r][s] -> w[o][r][s][i])
//   b    [Cout]                T, or null (no bias)
//   y    [N, OH, OW, Cout]     T (post-activation)
//   dy   [N, OH, OW, Cout]     T; with relu overwritten in place by the masked
//                              gradient dy * (y > 0) (0 where y is 0 or NaN, as
//                              dense's backward), which the rest of the backward reads
//   dx   [N, H, W, Cin]        T, or null (the first layer)
//   dw   [Cout, k, k, Cin]     f32, overwritten (not accumulated)
//   db   [Cout]                f32, overwritten; or null (no bias)
// Precision: T operands widened to f32, products accumulated in f32, each T
// output rounded once; masking dy is exact. NaN/Inf propagate (x * 0 terms are
// not skipped). T is f32, bf16 or f16 (the `dtype` argument).
// Deterministic: every output element is one f32 sum in an order that depends
// on the shape only (CPU twin: any thread count, same bits; CUDA: run after
// run, same bits; the CPU and CUDA orders differ, so they agree to rounding).
// The CPU's avx512/avx2 kernels (engine/cpu_kernels.hpp, the default where
// the CPU has them) use FMAs and their own order: same bits for any thread
// count, within rounding of the twin. No floating-point atomics.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/dtype.hpp"

namespace mf::kernels {

struct Conv2dDims {
  std::int64_t n = 1;
  int h = 1, w = 1, cin = 1, cout = 1;
  int k = 3;       // odd
  int stride = 1;  // 1 or 2
  bool relu = false;
  constexpr int pad() const { return k / 2; }
  constexpr int oh() const { return (h - 1) / stride + 1; }
  constexpr int ow() const { return (w - 1) / stride + 1; }
};

void conv2d_forward_cpu(const Conv2dDims& d, DType dtype, const void* x, const void* w, const void* b, void* y,
                        cudaStream_t stream);
// scratch: ignored by the CPU twin (may be null); see conv2d_backward_cuda.
void conv2d_backward_cpu(const Conv2dDims& d, DType dtype, const void* x, const void* w, const void* y, void* dy,
                         void* dx, float* dw, float* db, float* scratch, cudaStream_t stream);

// Which CUDA implementation conv2d_*_cuda runs (the CPU twin has one).
// Process-wide; the environment variable MELFORGE_CONV2D_ALGO (auto, direct,
// mma; or 0, 1, 2) sets the initial value.
//   direct  variant 1 (kernels/conv2d.cu): one thread per output element, dw/db
//           by fixed-order chunk partials; any shape and dtype (the fallback).
//   mma     variant 2 (kernels/conv2d_mma.cu): bf16/f16 implicit GEMMs on
//           tensor cores (mma.sync m16n8k16, f32 accumulation) for y, dx and
//           dw/db. Needs Cin and Cout multiples of 16, sm_80+, and 16-byte
//           aligned x, w, dy (the operands it gathers); y and dx 4-byte.
//           Any odd k, stride 1 or 2. Each part (forward, dx, dw/db) that
//           cannot run falls back to direct alone, silently (f32, the Cin = 1
//           stem and odd channel counts always run direct).
// automatic runs direct: a variant becomes the default only after a GPU
// measurement says it wins (docs/decisions.md), and none has run on a GPU yet.
// Both variants are deterministic (same bits run after run) but sum in
// different orders, so their outputs agree to rounding, not bit for bit.
// Setting it from code, its names, the variant a shape resolves to and the
// mma launch count are for the benchmarks and tests: kernels/conv_algo_lab.hpp.
enum class Conv2dAlgo : int { automatic = 0, direct = 1, mma = 2 };
Conv2dAlgo conv2d_algo();

void conv2d_forward_cuda(const Conv2dDims& d, DType dtype, const void* x, const void* w, const void* b, void* y,
                         cudaStream_t stream);
// f32 elements of the scratch conv2d_backward_cuda's dw/db partials use (the
// same for every variant: fixed pixel chunks x Cout x (k*k*Cin + 1); at most
// 16 Mi elements unless one chunk alone is larger). A host function; needs no GPU.
std::int64_t conv2d_scratch_elems(const Conv2dDims& d);
// scratch: device f32 of >= conv2d_scratch_elems(d) elements, or null: then
// one is allocated for the call from the stream-ordered pool (inside a CUDA
// graph capture that becomes an allocation node of the graph; pass a scratch
// made before the capture to keep allocations out of it).
void conv2d_backward_cuda(const Conv2dDims& d, DType dtype, const void* x, const void* w, const void* y, void* dy,
                          void* dx, float* dw, float* db, float* scratch, cudaStream_t stream);

}  // namespace mf::kernels
