// The dispatch point: one function per op taking Tensors. It checks shapes,
// dtypes and devices, then runs the CPU twin or the CUDA kernel according to
// the tensors' device. model/ calls kernels only through here.
#pragma once

#include <cuda_runtime_api.h>

#include "engine/tensor.hpp"

namespace mf::ops {

// dst = src converted to dst's dtype (same shape, same device).
void cast(const Tensor& src, Tensor& dst, cudaStream_t stream = nullptr);

// Fused conv + bias + ReLU + max pool (kernels/conv_relu_pool.hpp has the
// layouts). x [N,H,W,Cin] nhwc; w [Cout,k,k,Cin]; b [Cout]; y [N,H/p,W/p,Cout];
// code (u8, same shape as y) may be undefined when no backward follows.
void conv_relu_pool_forward(const Tensor& x, const Tensor& w, const Tensor& b, int pool, Tensor& y,
                            Tensor* code, cudaStream_t stream = nullptr);
// dx may be null (first layer); dw and db are f32 and overwritten.
void conv_relu_pool_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& code,
                             int pool, Tensor* dx, Tensor& dw, Tensor& db, cudaStream_t stream = nullptr);

// File-level voting (kernels/file_vote.hpp has the rules). class_in [F*L*S, C]
// and leak_in [F*L*S] f32 (probabilities, or logits when `logits`); outputs
// file_probs [F, C] f32, file_class [F] i32, file_leak_prob [F] f32,
// file_leak [F] i32, all on the inputs' device. One launch for all files.
void file_vote(const Tensor& class_in, const Tensor& leak_in, std::int64_t files, std::int64_t longs,
               std::int64_t shorts, float threshold, bool logits, Tensor& file_probs, Tensor& file_class,
               Tensor& file_leak_prob, Tensor& file_leak, cudaStream_t stream = nullptr);

}  // namespace mf::ops
