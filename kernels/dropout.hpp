// dropout: y = x * keep / (1 - p), keep = (u >= p) with u in [0, 1) from a
// counter-based hash of (seed, counter, stream, element index): the same mask
// on the CPU and the GPU, reproducible from the seed, recomputed by the
// backward (nothing stored). `counter` points to an i32 that advances every
// optimizer step (AdamWState::iteration, in device memory on the GPU), so a
// captured CUDA graph draws a fresh mask each replay; `stream` separates the
// micro-batches of one step.
// Layout: any contiguous [n]; T is f32, bf16 or f16.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/counter_rng.hpp"
#include "engine/dtype.hpp"
#include "engine/host_device.hpp"

namespace mf::kernels {

struct DropoutArgs {
  std::int64_t n = 0;
  float p = 0.f;
  std::uint64_t seed = 0;
  std::uint32_t stream = 0;
};

// splitmix64's finalizer (engine/counter_rng.hpp) over the element's Weyl
// point seed + gamma * (1 + index), xor the scrambled (counter, stream) key;
// the top 24 bits -> [0, 1), exact in float.
MF_HOST_DEVICE inline float dropout_uniform(std::uint64_t seed, std::uint32_t counter, std::uint32_t stream,
                                            std::uint64_t index) {
  const std::uint64_t key = (std::uint64_t(counter) << 32 | stream) * 0xbf58476d1ce4e5b9ull;
  const std::uint64_t z = splitmix64_finalize((seed + kSplitmix64Gamma * (1 + index)) ^ key);
  return float(std::uint32_t(z >> 40)) * (1.f / 16777216.f);
}

void dropout_forward_cpu(const DropoutArgs& d, DType dtype, const void* x, void* y,
                         const std::int32_t* counter, cudaStream_t stream);
void dropout_backward_cpu(const DropoutArgs& d, DType dtype, const void* dy, void* dx,
                          const std::int32_t* counter, cudaStream_t stream);
void dropout_forward_cuda(const DropoutArgs& d, DType dtype, const void* x, void* y,
                          const std::int32_t* counter, cudaStream_t stream);
void dropout_backward_cuda(const DropoutArgs& d, DType dtype, const void* dy, void* dx,
                           const std::int32_t* counter, cudaStream_t stream);

}  // namespace mf::kernels
