// instance_norm on the GPU, variant 1 (kernels/instance_norm.hpp has the
// contract): one warp per (b, mel) row, 8 rows per block. The lanes stride
// over the row's frames (coalesced); the mean, then the sum of squared
// deviations, each reduced by a fixed xor-shuffle tree (every lane gets the
// same bits); then each lane writes the frames it read. In place is safe: the
// two reductions finish every read of the row before any write, and in the
// last pass each lane reads and writes only its own frames. No restrict
// pointers: x and y may alias.
#include "engine/error.hpp"
#include "kernels/block_reduce.cuh"
#include "kernels/cuda_types.cuh"
#include "kernels/instance_norm.hpp"
#include "kernels/launch.cuh"

namespace mf::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;

using cuda::warp_sum;

template <class T>
__global__ void __launch_bounds__(kThreads) instance_norm_kernel(InstanceNormDims d, const T* x, T* y) {
  const std::int64_t r = std::int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (r >= d.rows) return;  // uniform over the warp
  const int lane = threadIdx.x % 32, F = d.frames;
  const T* xr = x + r * F;
  T* yr = y + r * F;
  const float x0 = cuda::load_f32(xr[0]);  // the shift (instance_norm.cpp says why)
  float sum = 0.f;
  for (int t = lane; t < F; t += 32) sum += cuda::load_f32(xr[t]) - x0;
  const float ms = warp_sum(sum) / float(F);  // mean - x_0
  float ss = 0.f;
  for (int t = lane; t < F; t += 32) {
    const float v = (cuda::load_f32(xr[t]) - x0) - ms;
    ss += v * v;
  }
  const float inv = 1.f / sqrtf(warp_sum(ss) / float(F) + kInstanceNormEps);
  for (int t = lane; t < F; t += 32) yr[t] = cuda::store_f32<T>(((cuda::load_f32(xr[t]) - x0) - ms) * inv);
}

template <class T>
void launch(const InstanceNormDims& d, const void* x, void* y, cudaStream_t stream) {
  using Dt = cuda::device_t<T>;
  instance_norm_kernel<Dt><<<cuda::blocks_for(d.rows, kRowsPerBlock), kThreads, 0, stream>>>(d, static_cast<const Dt*>(x),
                                                                      static_cast<Dt*>(y));
  MF_CUDA_CHECK_LAUNCH();
}

}  // namespace

void instance_norm_cuda(const InstanceNormDims& d, DType dtype, const void* x, void* y, cudaStream_t stream) {
  if (d.rows <= 0) return;
  switch (dtype) {
    case DType::f32: return launch<float>(d, x, y, stream);
    case DType::f16: return launch<f16>(d, x, y, stream);
    case DType::bf16: return launch<bf16>(d, x, y, stream);
    default: break;  // the dispatch (ops_instance_norm.cpp) admits only these
  }
}

}  // namespace mf::kernels
