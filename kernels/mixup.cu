// mixup on the GPU (kernels/mixup.hpp): one block of kMixupThreads per sample
// (grid-stride over samples beyond kMixupMaxBlocks), out of place. Thread 0
// draws the sample's weight (double Gamma variates; a rejection loop, so one
// thread, not a divergent warp) and writes the small per-sample outputs; the
// block then mixes the sample's values. The counter is read from device
// memory, so a replayed graph draws afresh each step. No atomics, no
// reductions: each output element is written by one thread from the same
// f32 operations as the twin.
#include "engine/error.hpp"
#include "kernels/augment.hpp"
#include "kernels/cuda_types.cuh"
#include "kernels/launch.cuh"
#include "kernels/mixup.hpp"

namespace mf::kernels {

namespace {

template <class T>
__global__ void __launch_bounds__(kMixupThreads)
    mixup_kernel(MixupArgs d, const T* __restrict__ x, T* __restrict__ x_out, const std::int32_t* __restrict__ labels,
                 const float* __restrict__ leak, std::int32_t* __restrict__ labels_b, float* __restrict__ lam,
                 float* __restrict__ leak_out, const std::int32_t* __restrict__ counter) {
  __shared__ float shared_lam;
  const std::uint32_t ctr = std::uint32_t(*counter);
  const std::int64_t B = d.batch, n = d.elems, r = mixup_pair_shift(d, ctr);
  for (std::int64_t i = blockIdx.x; i < B; i += gridDim.x) {
    const std::int64_t j = (i + r) % B;
    if (threadIdx.x == 0) {
      const float l = mixup_lambda(d, ctr, d.first_sample + i);
      shared_lam = l;
      labels_b[i] = labels[j];
      lam[i] = l;
      if (leak) leak_out[i] = augment_add(augment_mul(l, leak[i]), augment_mul(1.f - l, leak[j]));
    }
    __syncthreads();
    const float l = shared_lam, o = 1.f - l;
    const T* xi = x + i * n;
    const T* xj = x + j * n;
    T* out = x_out + i * n;
    for (std::int64_t e = threadIdx.x; e < n; e += kMixupThreads)
      out[e] = cuda::store_f32<T>(augment_add(augment_mul(l, cuda::load_f32(xi[e])), augment_mul(o, cuda::load_f32(xj[e]))));
    __syncthreads();  // shared_lam is refilled by the next sample
  }
}

template <class T>
void launch(const MixupArgs& d, const void* x, void* x_out, const std::int32_t* labels, const float* leak,
            std::int32_t* labels_b, float* lam, float* leak_out, const std::int32_t* counter, cudaStream_t stream) {
  const unsigned grid = cuda::grid_for(d.batch, 1, kMixupMaxBlocks);  // a block per sample
  mixup_kernel<T><<<grid, kMixupThreads, 0, stream>>>(d, static_cast<const T*>(x), static_cast<T*>(x_out), labels,
                                                      leak, labels_b, lam, leak_out, counter);
}

}  // namespace

void mixup_cuda(const MixupArgs& d, DType dtype, const void* x, void* x_out, const std::int32_t* labels,
                const float* leak, std::int32_t* labels_b, float* lam, float* leak_out, const std::int32_t* counter,
                cudaStream_t stream) {
  if (d.batch == 0) return;
  switch (dtype) {
    case DType::f32: launch<float>(d, x, x_out, labels, leak, labels_b, lam, leak_out, counter, stream); break;
    case DType::f16: launch<__half>(d, x, x_out, labels, leak, labels_b, lam, leak_out, counter, stream); break;
    case DType::bf16:
      launch<__nv_bfloat16>(d, x, x_out, labels, leak, labels_b, lam, leak_out, counter, stream);
      break;
    default: return;  // ops.cpp validated the dtype
  }
  MF_CUDA_CHECK_LAUNCH();
}

}  // namespace mf::kernels
