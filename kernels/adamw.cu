// adamw on the GPU (the contract and the update's formula: kernels/adamw.hpp):
// one flat f32 parameter buffer [n] with its moments m, v, the gradients and an
// optional bf16/f16 working copy, all [n]; AdamWState in device memory. Three
// launches, all reading the device-held state, so a captured graph needs no
// host value:
//   norm_partials  a fixed grid (at most kAdamWNormBlocks blocks of
//                  kNormThreads) sums (grad / loss_scale)^2 in double and counts
//                  non-finite gradients, one block tree each (block_reduce.cuh);
//   finalize       one block adds the partials in a fixed tree and runs
//                  detail::finalize_step (the CPU twin's code): norm, clip
//                  coefficient, LR schedule, loss scale, skip;
//   update         the element-wise step, grid-stride (a no-op when skipped).
// The per-tensor form runs one update launch per [begin, end) range. A frozen
// mask (u8 [n], train.freeze) is read by the norm and update passes: frozen
// elements count in neither (the CPU twin's rule).
// Memory-bound: the update reads grad, master, m, v (16 B) and writes master,
// m, v and the working copy (12 + 2 B) per parameter; the norm pass reads the
// gradients once more (4 B). The only variant.
#include "engine/error.hpp"
#include "kernels/adamw.hpp"
#include "kernels/adamw_common.hpp"
#include "kernels/adamw_lab.hpp"
#include "kernels/block_reduce.cuh"
#include "kernels/cuda_types.cuh"
#include "kernels/launch.cuh"

namespace mf::kernels {

namespace {

// The norm pass's threads per block (the width of its block tree) and the
// elements each thread takes before the grid reaches kAdamWNormBlocks blocks.
constexpr int kNormThreads = 256;
constexpr int kNormElemsPerThread = 8;
// The finalize pass: one block, the width of its tree over the norm partials.
constexpr int kFinalizeThreads = 256;
// The element-wise update pass (grid-stride; any size gives
// the same bits).
constexpr unsigned kUpdateThreads = cuda::kElementwiseThreads;

unsigned norm_blocks(std::int64_t n) {
  return cuda::grid_for(n, kNormThreads * kNormElemsPerThread, kAdamWNormBlocks);
}

__global__ void __launch_bounds__(kNormThreads) norm_partials(std::int64_t n, const float* __restrict__ grad,
                                                             const std::uint8_t* __restrict__ frozen,
                                                             const AdamWState* __restrict__ state,
                                                             double* __restrict__ part, int* __restrict__ bad) {
  // Squares summed in double: the clip coefficient scales every gradient, so
  // its relative error reaches every parameter (f32 partials were ~1e-6 off
  // the CPU twin's double sums, found by the CUDA emulator's run of the suite).
  __shared__ double sh[kNormThreads];
  __shared__ int shb[kNormThreads];
  const float inv_scale = 1.f / state->loss_scale;
  double acc = 0.0;
  int nb = 0;
  for (std::int64_t i = blockIdx.x * std::int64_t(kNormThreads) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * kNormThreads) {
    if (frozen && frozen[i]) continue;
    const float g = grad[i] * inv_scale;
    if (!isfinite(g)) ++nb;
    else acc += double(g) * double(g);
  }
  cuda::block_reduce_all<kNormThreads>(cuda::Add{}, cuda::reduced(acc, sh), cuda::reduced(nb, shb));
  if (threadIdx.x == 0) {
    part[blockIdx.x] = acc;
    bad[blockIdx.x] = nb;
  }
}

__global__ void __launch_bounds__(kFinalizeThreads) finalize(AdamWConfig c, int blocks,
                                                             const double* __restrict__ part,
                                                             const int* __restrict__ bad, AdamWState* state) {
  __shared__ double sh[kFinalizeThreads];
  __shared__ long long shb[kFinalizeThreads];
  double acc = 0;
  long long nb = 0;
  for (int i = threadIdx.x; i < blocks; i += kFinalizeThreads) {
    acc += part[i];
    nb += bad[i];
  }
  cuda::block_reduce_all<kFinalizeThreads>(cuda::Add{}, cuda::reduced(acc, sh), cuda::reduced(nb, shb));
  if (threadIdx.x == 0) detail::finalize_step(c, *state, acc, nb);
}

template <class T>
__global__ void update(AdamWConfig c, std::int64_t begin, std::int64_t end, std::int64_t decay_end,
                       float* __restrict__ master, const float* __restrict__ grad, float* __restrict__ m,
                       float* __restrict__ v, T* __restrict__ work, const std::uint8_t* __restrict__ frozen,
                       const AdamWState* __restrict__ state) {
  const AdamWState s = *state;
  if (s.skip) return;
  for (std::int64_t i = begin + blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < end;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    if (frozen && frozen[i]) continue;
    float p = master[i], mi = m[i], vi = v[i];
    detail::update_element(c, s, i < decay_end, p, grad[i], mi, vi);
    master[i] = p;
    m[i] = mi;
    v[i] = vi;
    if (work) work[i] = cuda::store_f32<T>(p);
  }
}

void norm_and_finalize(const AdamWDims& d, const AdamWConfig& c, const float* grad, const std::uint8_t* frozen,
                       AdamWState* state, void* scratch, cudaStream_t stream) {
  const unsigned nb = norm_blocks(d.n);
  double* part = static_cast<double*>(scratch);
  int* bad = reinterpret_cast<int*>(part + kAdamWNormBlocks);
  norm_partials<<<nb, kNormThreads, 0, stream>>>(d.n, grad, frozen, state, part, bad);
  MF_CUDA_CHECK_LAUNCH();
  finalize<<<1, kFinalizeThreads, 0, stream>>>(c, int(nb), part, bad, state);
  MF_CUDA_CHECK_LAUNCH();
}

void launch_update(const AdamWConfig& c, std::int64_t begin, std::int64_t end, std::int64_t decay_end,
                   DType work_dtype, float* master, const float* grad, float* m, float* v, void* work,
                   const std::uint8_t* frozen, const AdamWState* state, cudaStream_t stream) {
  if (end <= begin) return;
  const unsigned grid = cuda::grid_for(end - begin, kUpdateThreads, cuda::kFillGpuBlocks);
  switch (work ? work_dtype : DType::f32) {
    case DType::f16:
      update<__half><<<grid, kUpdateThreads, 0, stream>>>(c, begin, end, decay_end, master, grad, m, v,
                                                          static_cast<__half*>(work), frozen, state);
      break;
    case DType::bf16:
      update<__nv_bfloat16><<<grid, kUpdateThreads, 0, stream>>>(c, begin, end, decay_end, master, grad, m,
                                                                 v, static_cast<__nv_bfloat16*>(work), frozen,
                                                                 state);
      break;
    default:
      update<float><<<grid, kUpdateThreads, 0, stream>>>(c, begin, end, decay_end, master, grad, m, v,
                                                         static_cast<float*>(work), frozen, state);
      break;
  }
  MF_CUDA_CHECK_LAUNCH();
}

}  // namespace

void adamw_step_cuda(const AdamWDims& d, const AdamWConfig& c, DType work_dtype, float* master,
                     const float* grad, float* m, float* v, void* work, const std::uint8_t* frozen,
                     AdamWState* state, void* scratch, cudaStream_t stream) {
  norm_and_finalize(d, c, grad, frozen, state, scratch, stream);
  launch_update(c, 0, d.n, d.decay_end, work_dtype, master, grad, m, v, work, frozen, state, stream);
}

void adamw_step_per_tensor_cuda(const AdamWDims& d, const AdamWConfig& c, DType work_dtype, float* master,
                                const float* grad, float* m, float* v, void* work, AdamWState* state,
                                void* scratch, const std::int64_t* ranges, int count, cudaStream_t stream) {
  norm_and_finalize(d, c, grad, nullptr, state, scratch, stream);
  for (int r = 0; r < count; ++r)
    launch_update(c, ranges[2 * r], ranges[2 * r + 1], d.decay_end, work_dtype, master, grad, m, v, work, nullptr,
                  state, stream);
}

}  // namespace mf::kernels
