// cast on the GPU (kernels/cast.hpp): dst[i] = src[i] converted, for every pair
// of f32, f16, bf16, i32 and u8 (flat buffers of n elements, any shape).
// Each element goes through f32: load_f32 widens the source exactly (an i32
// above 2^24 rounds to the nearest f32), store_f32 rounds to the destination
// once (f16/bf16 round to nearest even; i32/u8 truncate toward zero as C++
// does, the caller keeping values in range).
// One grid-stride loop, one element per thread per iteration
// (cuda::kElementwiseThreads, kernels/launch.cuh); any grid gives the same
// bits. Memory-bound: reads sizeof(S) and writes sizeof(D) bytes per element.
// The only variant.
#include "kernels/cast.hpp"

#include "engine/error.hpp"
#include "kernels/cuda_types.cuh"
#include "kernels/launch.cuh"

namespace mf::kernels {

namespace {
template <class S, class D>
__global__ void cast_kernel(const S* __restrict__ src, D* __restrict__ dst, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    dst[i] = cuda::store_f32<D>(cuda::load_f32(src[i]));
}

template <class S, class D>
void launch(const void* src, void* dst, std::int64_t n, cudaStream_t stream) {
  using SD = cuda::device_t<S>;
  using DD = cuda::device_t<D>;
  constexpr unsigned threads = cuda::kElementwiseThreads;
  cast_kernel<SD, DD><<<cuda::grid_for(n, threads), threads, 0, stream>>>(
      static_cast<const SD*>(src), static_cast<DD*>(dst), n);
  MF_CUDA_CHECK_LAUNCH();
}

template <class S>
void launch_from(const void* src, void* dst, DType dst_type, std::int64_t n, cudaStream_t stream) {
  switch (dst_type) {
    case DType::f32: return launch<S, float>(src, dst, n, stream);
    case DType::f16: return launch<S, f16>(src, dst, n, stream);
    case DType::bf16: return launch<S, bf16>(src, dst, n, stream);
    case DType::i32: return launch<S, std::int32_t>(src, dst, n, stream);
    case DType::u8: return launch<S, std::uint8_t>(src, dst, n, stream);
  }
}
}  // namespace

void cast_cuda(const void* src, DType src_type, void* dst, DType dst_type, std::int64_t n,
               cudaStream_t stream) {
  if (n == 0) return;
  switch (src_type) {
    case DType::f32: return launch_from<float>(src, dst, dst_type, n, stream);
    case DType::f16: return launch_from<f16>(src, dst, dst_type, n, stream);
    case DType::bf16: return launch_from<bf16>(src, dst, dst_type, n, stream);
    case DType::i32: return launch_from<std::int32_t>(src, dst, dst_type, n, stream);
    case DType::u8: return launch_from<std::uint8_t>(src, dst, dst_type, n, stream);
  }
}

}  // namespace mf::kernels
