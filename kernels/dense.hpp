// dense: a fully connected layer, y = act(x W^T + b), and its backward.
//
// Layouts (row-major):
//   x   [M, K]   T   (M = batch rows, K = input features)
//   w   [N, K]   T   (PyTorch's nn.Linear weight layout [out, in], unchanged)
//   b   [N]      T
//   y   [M, N]   T   (post-activation when relu)
//   dy  [M, N]   T, with relu overwritten by the masked gradient dy * (y > 0)
//                (the layer's pre-activation gradient; saves a scratch buffer)
//   dx  [M, K]   T, may be null (no input gradient wanted)
//   dw  [N, K]   f32, overwritten (not accumulated)
//   db  [N]      f32, overwritten
// With relu the backward masks dy by (y > 0), PyTorch's ReLU gradient (0 at 0).
// Precision: T operands, f32 accumulation, each output rounded once to its type
// (masking dy is exact in T).
// Deterministic: every output element is one fixed-order f32 sum (CPU twin);
// cuBLASLt with a fixed heuristic choice and no atomics-based reduction on GPU.
// T is f32, bf16 or f16 (`dtype`).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/dtype.hpp"

namespace mf::kernels {

struct DenseDims {
  std::int64_t m = 1;  // rows (batch)
  int k = 1;           // input features
  int n = 1;           // output features
  bool relu = false;
};

void dense_forward_cpu(const DenseDims& d, DType dtype, const void* x, const void* w, const void* b,
                       void* y, cudaStream_t stream);
void dense_backward_cpu(const DenseDims& d, DType dtype, const void* x, const void* w, const void* y,
                        void* dy, void* dx, float* dw, float* db, cudaStream_t stream);

void dense_forward_cuda(const DenseDims& d, DType dtype, const void* x, const void* w, const void* b,
                        void* y, cudaStream_t stream);
void dense_backward_cuda(const DenseDims& d, DType dtype, const void* x, const void* w, const void* y,
                         void* dy, void* dx, float* dw, float* db, cudaStream_t stream);

// The CPU GEMM the twin is built on (also used by model code on the CPU):
// C[M,N] (f32, row-major, overwritten) = sum_k A(m,k) B(k,n), where A(m,k) =
// a[m*a_rs + k*a_cs] and B(k,n) = b[k*b_rs + n*b_cs], both of `dtype`.
// Threaded over blocks of C; cache-blocked; each C element is one f32 sum over k
// in increasing order (bit-identical for any thread count): s += a*b with the
// twin kernels, s = fma(a, b, s) with avx512 (engine/cpu_kernels.hpp).
void gemm_cpu(std::int64_t m, std::int64_t n, std::int64_t k, DType dtype, const void* a,
              std::int64_t a_rs, std::int64_t a_cs, const void* b, std::int64_t b_rs,
              std::int64_t b_cs, float* c);

}  // namespace mf::kernels
