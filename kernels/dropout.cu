// dropout on the GPU (kernels/dropout.hpp): y[i] = keep(i) ? x[i] * (1 / (1 - p)) : 0
// over a flat buffer of n elements (any layout), forward and backward alike
// (backward applies the same mask to dy; nothing is stored between them).
// keep(i) = dropout_uniform(seed, counter, stream, i) >= p, the counter-based
// hash shared with the CPU twin, so the mask is a function of (seed, counter,
// stream, i) only: the same on CPU and GPU, whatever the grid. The
// counter is read from device memory, so a replayed graph draws a new mask
// every step.
// One element per thread per grid-stride iteration
// (cuda::kElementwiseThreads, kernels/launch.cuh). The only variant.
#include "engine/error.hpp"
#include "kernels/cuda_types.cuh"
#include "kernels/dropout.hpp"
#include "kernels/launch.cuh"

namespace mf::kernels {

namespace {
template <class T>
__global__ void dropout_kernel(DropoutArgs d, const T* __restrict__ x, T* __restrict__ y,
                               const std::int32_t* __restrict__ counter) {
  const std::uint32_t ctr = std::uint32_t(*counter);
  const float keep_scale = 1.f / (1.f - d.p);
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < d.n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const bool keep = dropout_uniform(d.seed, ctr, d.stream, std::uint64_t(i)) >= d.p;
    y[i] = cuda::store_f32<T>(keep ? cuda::load_f32(x[i]) * keep_scale : 0.f);
  }
}

void run(const DropoutArgs& d, DType dtype, const void* x, void* y, const std::int32_t* counter,
         cudaStream_t stream) {
  if (d.n == 0) return;
  constexpr unsigned threads = cuda::kElementwiseThreads;
  const unsigned grid = cuda::grid_for(d.n, threads);
  switch (dtype) {
    case DType::f32:
      dropout_kernel<<<grid, threads, 0, stream>>>(d, static_cast<const float*>(x), static_cast<float*>(y), counter);
      break;
    case DType::f16:
      dropout_kernel<<<grid, threads, 0, stream>>>(d, static_cast<const __half*>(x), static_cast<__half*>(y), counter);
      break;
    case DType::bf16:
      dropout_kernel<<<grid, threads, 0, stream>>>(d, static_cast<const __nv_bfloat16*>(x),
                                               static_cast<__nv_bfloat16*>(y), counter);
      break;
    default: return;
  }
  MF_CUDA_CHECK_LAUNCH();
}
}  // namespace

void dropout_forward_cuda(const DropoutArgs& d, DType dtype, const void* x, void* y,
                          const std::int32_t* counter, cudaStream_t stream) {
  run(d, dtype, x, y, counter, stream);
}
void dropout_backward_cuda(const DropoutArgs& d, DType dtype, const void* dy, void* dx,
                           const std::int32_t* counter, cudaStream_t stream) {
  run(d, dtype, dy, dx, counter, stream);
}

}  // namespace mf::kernels
