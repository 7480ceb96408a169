// The dispatch point: one function per op taking Tensors. It checks shapes,
// dtypes and devices, then runs the CPU twin or the CUDA kernel according to
// the tensors' device. model/ calls kernels only through here.
#pragma once

#include <cuda_runtime_api.h>

#include "engine/tensor.hpp"

namespace mf::ops {

// dst = src converted to dst's dtype (same shape, same device).
void cast(const Tensor& src, Tensor& dst, cudaStream_t stream = nullptr);

}  // namespace mf::ops
