// fold_batch_norm: a conv followed by an inference-mode batch norm is one conv
// with folded weights (model/cnn_stack.cpp's forward_eval):
//   s[co]  = gamma[co] * (1 / sqrt(running_var[co] + eps))
//   w'[co] = w[co] * s[co]                       (every k*k*Cin weight of co)
//   b'[co] = beta[co] + (b[co] - running_mean[co]) * s[co]   (b = 0 without a bias)
// so conv(x, w') + b' = gamma * (conv(x, w) + b - mean) * invstd + beta.
//
// Layouts (row-major):
//   w, w_out        [Cout, per]  T   (per = k*k*Cin: the OHWI conv weight)
//   b               [Cout]       T   or null (a conv without bias)
//   gamma, beta     [Cout]       T   (the working copy of the parameters)
//   running_mean/var [Cout]      f32
//   b_out           [Cout]       T
// Precision: s is computed in f32 exactly as batch_norm_eval_forward's scale
// (gamma * (1 / sqrt(var + eps)), IEEE sqrt and division on both sides), the
// products and b' in f32, each output rounded once to T; the CPU twin and the
// CUDA kernel give the same bits. w_out may not alias w (no in-place folding:
// the caller keeps the unfolded weights). NaN propagates per channel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/dtype.hpp"

namespace mf::kernels {

struct FoldBatchNormArgs {
  int cout = 1;           // output channels
  std::int64_t per = 1;   // weights per output channel (k * k * Cin)
  float eps = 1e-5f;
};

void fold_batch_norm_cpu(const FoldBatchNormArgs& d, DType dtype, const void* w, const void* b, const void* gamma,
                         const void* beta, const float* running_mean, const float* running_var, void* w_out,
                         void* b_out, cudaStream_t stream);
void fold_batch_norm_cuda(const FoldBatchNormArgs& d, DType dtype, const void* w, const void* b, const void* gamma,
                          const void* beta, const float* running_mean, const float* running_var, void* w_out,
                          void* b_out, cudaStream_t stream);

}  // namespace mf::kernels
