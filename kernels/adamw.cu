// adamw on the GPU: three launches (norm partials over a fixed grid, a
// one-block finalize, the element-wise update), all reading the device-held
// AdamWState, so a captured graph needs no host value. Memory-bound: the update
// reads grad, master, m, v (16 B) and writes master, m, v and the working copy
// (12 + 2 B) per parameter; the norm pass reads the gradients once more (4 B).
#include "engine/error.hpp"
#include "kernels/adamw.hpp"
#include "kernels/adamw_common.hpp"
#include "kernels/adamw_lab.hpp"
#include "kernels/cuda_types.cuh"

namespace mf::kernels {

namespace {

unsigned norm_blocks(std::int64_t n) {
  const std::int64_t b = (n + std::int64_t(kAdamWBlock) * 8 - 1) / (std::int64_t(kAdamWBlock) * 8);
  return unsigned(b < 1 ? 1 : (b > kAdamWNormBlocks ? kAdamWNormBlocks : b));
}

// Tree-sums (acc, nb) over the block into sh[0] / shb[0], in a fixed order
// (deterministic). Every thread of the block must call it.
template <class A, class C>
__device__ __forceinline__ void block_sum_pair(A* sh, C* shb, A acc, C nb) {
  sh[threadIdx.x] = acc;
  shb[threadIdx.x] = nb;
  __syncthreads();
  for (int s = kAdamWBlock / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      sh[threadIdx.x] += sh[threadIdx.x + s];
      shb[threadIdx.x] += shb[threadIdx.x + s];
    }
    __syncthreads();
  }
}

__global__ void __launch_bounds__(kAdamWBlock) norm_partials(std::int64_t n, const float* __restrict__ grad,
                                                             const AdamWState* __restrict__ state,
                                                             double* __restrict__ part, int* __restrict__ bad) {
  // Squares summed in double: the clip coefficient scales every gradient, so
  // its relative error reaches every parameter (f32 partials were ~1e-6 off
  // the CPU twin's double sums, found by the CUDA emulator's run of the suite).
  __shared__ double sh[kAdamWBlock];
  __shared__ int shb[kAdamWBlock];
  const float inv_scale = 1.f / state->loss_scale;
  double acc = 0.0;
  int nb = 0;
  for (std::int64_t i = blockIdx.x * std::int64_t(kAdamWBlock) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * kAdamWBlock) {
    const float g = grad[i] * inv_scale;
    if (!isfinite(g)) ++nb;
    else acc += double(g) * double(g);
  }
  block_sum_pair(sh, shb, acc, nb);
  if (threadIdx.x == 0) {
    part[blockIdx.x] = sh[0];
    bad[blockIdx.x] = shb[0];
  }
}

__global__ void __launch_bounds__(kAdamWBlock) finalize(AdamWConfig c, int blocks, const double* __restrict__ part,
                                                        const int* __restrict__ bad, AdamWState* state) {
  __shared__ double sh[kAdamWBlock];
  __shared__ long long shb[kAdamWBlock];
  double acc = 0;
  long long nb = 0;
  for (int i = threadIdx.x; i < blocks; i += kAdamWBlock) {
    acc += part[i];
    nb += bad[i];
  }
  block_sum_pair(sh, shb, acc, nb);
  if (threadIdx.x == 0) detail::finalize_step(c, *state, sh[0], shb[0]);
}

template <class T>
__global__ void update(AdamWConfig c, std::int64_t begin, std::int64_t end, std::int64_t decay_end,
                       float* __restrict__ master, const float* __restrict__ grad, float* __restrict__ m,
                       float* __restrict__ v, T* __restrict__ work, const AdamWState* __restrict__ state) {
  const AdamWState s = *state;
  if (s.skip) return;
  for (std::int64_t i = begin + blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < end;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    float p = master[i], mi = m[i], vi = v[i];
    detail::update_element(c, s, i < decay_end, p, grad[i], mi, vi);
    master[i] = p;
    m[i] = mi;
    v[i] = vi;
    if (work) work[i] = cuda::store_f32<T>(p);
  }
}

void norm_and_finalize(const AdamWDims& d, const AdamWConfig& c, const float* grad, AdamWState* state,
                       void* scratch, cudaStream_t stream) {
  const unsigned nb = norm_blocks(d.n);
  double* part = static_cast<double*>(scratch);
  int* bad = reinterpret_cast<int*>(part + kAdamWNormBlocks);
  norm_partials<<<nb, kAdamWBlock, 0, stream>>>(d.n, grad, state, part, bad);
  MF_CUDA_CHECK_LAUNCH();
  finalize<<<1, kAdamWBlock, 0, stream>>>(c, int(nb), part, bad, state);
  MF_CUDA_CHECK_LAUNCH();
}

void launch_update(const AdamWConfig& c, std::int64_t begin, std::int64_t end, std::int64_t decay_end,
                   DType work_dtype, float* master, const float* grad, float* m, float* v, void* work,
                   const AdamWState* state, cudaStream_t stream) {
  if (end <= begin) return;
  const unsigned grid = cuda::grid_for(end - begin, 256, 132 * 16);
  switch (work ? work_dtype : DType::f32) {
    case DType::f16:
      update<__half><<<grid, 256, 0, stream>>>(c, begin, end, decay_end, master, grad, m, v,
                                               static_cast<__half*>(work), state);
      break;
    case DType::bf16:
      update<__nv_bfloat16><<<grid, 256, 0, stream>>>(c, begin, end, decay_end, master, grad, m, v,
                                                      static_cast<__nv_bfloat16*>(work), state);
      break;
    default:
      update<float><<<grid, 256, 0, stream>>>(c, begin, end, decay_end, master, grad, m, v,
                                              static_cast<float*>(work), state);
      break;
  }
  MF_CUDA_CHECK_LAUNCH();
}

}  // namespace

void adamw_step_cuda(const AdamWDims& d, const AdamWConfig& c, DType work_dtype, float* master,
                     const float* grad, float* m, float* v, void* work, AdamWState* state, void* scratch,
                     cudaStream_t stream) {
  norm_and_finalize(d, c, grad, state, scratch, stream);
  launch_update(c, 0, d.n, d.decay_end, work_dtype, master, grad, m, v, work, state, stream);
}

void adamw_step_per_tensor_cuda(const AdamWDims& d, const AdamWConfig& c, DType work_dtype, float* master,
                                const float* grad, float* m, float* v, void* work, AdamWState* state,
                                void* scratch, const std::int64_t* ranges, int count, cudaStream_t stream) {
  norm_and_finalize(d, c, grad, state, scratch, stream);
  for (int r = 0; r < count; ++r)
    launch_update(c, ranges[2 * r], ranges[2 * r + 1], d.decay_end, work_dtype, master, grad, m, v, work, state,
                  stream);
}

}  // namespace mf::kernels
