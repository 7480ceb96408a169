// fold_batch_norm on the GPU, variant 1 (kernels/fold_batch_norm.hpp has the
// contract): one thread per weight element (64-bit index), each recomputing
// its channel's scale (a sqrt and a division: cheaper than a second pass);
// threads 0..Cout-1 also write b'. The products use __fmul_rn so nvcc does not
// contract b' into an FMA (sqrtf and / are IEEE-rounded without fast math):
// the bits then match the CPU twin's.
#include <algorithm>

#include "engine/error.hpp"
#include "kernels/cuda_types.cuh"
#include "kernels/fold_batch_norm.hpp"
#include "kernels/launch.cuh"

namespace mf::kernels {

namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void __launch_bounds__(kThreads)
    fold_batch_norm_kernel(FoldBatchNormArgs d, const T* __restrict__ w, const T* __restrict__ b,
                           const T* __restrict__ gamma, const T* __restrict__ beta, const float* __restrict__ mean,
                           const float* __restrict__ var, T* __restrict__ w_out, T* __restrict__ b_out) {
  const std::int64_t i = std::int64_t(blockIdx.x) * kThreads + threadIdx.x;
  const std::int64_t total = std::int64_t(d.cout) * d.per;
  if (i < d.cout) {
    const float s = __fmul_rn(cuda::load_f32(gamma[i]), 1.f / sqrtf(var[i] + d.eps));
    const float bias = b ? cuda::load_f32(b[i]) : 0.f;
    b_out[i] = cuda::store_f32<T>(__fadd_rn(cuda::load_f32(beta[i]), __fmul_rn(bias - mean[i], s)));
  }
  if (i >= total) return;
  const std::int64_t co = i / d.per;
  const float s = __fmul_rn(cuda::load_f32(gamma[co]), 1.f / sqrtf(var[co] + d.eps));
  w_out[i] = cuda::store_f32<T>(__fmul_rn(cuda::load_f32(w[i]), s));
}

template <class T>
void launch(const FoldBatchNormArgs& d, const void* w, const void* b, const void* gamma, const void* beta,
            const float* mean, const float* var, void* w_out, void* b_out, cudaStream_t stream) {
  using Dt = cuda::device_t<T>;
  const std::int64_t total = std::max<std::int64_t>(std::int64_t(d.cout) * d.per, d.cout);
  fold_batch_norm_kernel<Dt><<<cuda::blocks_for(total, kThreads), kThreads, 0, stream>>>(
      d, static_cast<const Dt*>(w), static_cast<const Dt*>(b), static_cast<const Dt*>(gamma),
      static_cast<const Dt*>(beta), mean, var, static_cast<Dt*>(w_out), static_cast<Dt*>(b_out));
  MF_CUDA_CHECK_LAUNCH();
}

}  // namespace

void fold_batch_norm_cuda(const FoldBatchNormArgs& d, DType dtype, const void* w, const void* b, const void* gamma,
                          const void* beta, const float* running_mean, const float* running_var, void* w_out,
                          void* b_out, cudaStream_t stream) {
  if (d.cout <= 0) return;
  switch (dtype) {
    case DType::f32: return launch<float>(d, w, b, gamma, beta, running_mean, running_var, w_out, b_out, stream);
    case DType::f16: return launch<f16>(d, w, b, gamma, beta, running_mean, running_var, w_out, b_out, stream);
    case DType::bf16: return launch<bf16>(d, w, b, gamma, beta, running_mean, running_var, w_out, b_out, stream);
    default: break;  // the dispatch (ops_fold_batch_norm.cpp) admits only these
  }
}

}  // namespace mf::kernels
