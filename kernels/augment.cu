// augment on the GPU (kernels/augment.hpp): one block of kAugmentThreads
// threads per sample (grid-stride over samples), in place.
//   pass A (noise on): the sums of P_x (of the shifted, gained values, read
//     straight from x: nothing is written yet) and of P_n, one block
//     reduction;
//   pass B: whole rows of the sample are staged in shared memory (as f32),
//     kAugmentStageFloats at a time, so the circular shift never reads a value
//     another thread already overwrote; each thread computes and stores its
//     elements and adds them to its lane of the mean;
//   pass C (masks on): the mean (block reduction) is stored to the masked
//     elements; a thread writes only elements it wrote in pass B.
// Thread t owns the indices e = t mod kAugmentThreads in every pass and adds
// them in increasing e, then the block halves the lanes pairwise: the order
// the CPU twin replays (no atomics). The counter is read from device memory,
// so a replayed graph draws afresh each step.
#include "engine/error.hpp"
#include "kernels/augment.hpp"
#include "kernels/block_reduce.cuh"
#include "kernels/cuda_types.cuh"
#include "kernels/launch.cuh"

namespace mf::kernels {

namespace {

template <class T>
__global__ void __launch_bounds__(kAugmentThreads)
    augment_kernel(AugmentArgs d, T* __restrict__ x, const float* __restrict__ noise,
                   const std::int32_t* __restrict__ counter) {
  __shared__ float stage[kAugmentStageFloats];
  __shared__ float red_x[kAugmentThreads], red_n[kAugmentThreads];  // the trees of P_x (then the mean), P_n
  __shared__ int mask_lo[2 * kAugmentMaxMasks], mask_hi[2 * kAugmentMaxMasks];
  const std::uint32_t ctr = std::uint32_t(*counter);
  const int t = int(threadIdx.x);
  const int M = int(d.mels), F = int(d.frames), N = M * F;
  const int rows_per_stage = kAugmentStageFloats / F;
  const int masks = d.freq_masks + d.time_masks;
  const bool gain = d.gain_db > 0;
  const float kp = augment_kp(d);
  for (std::int64_t b = blockIdx.x; b < d.batch; b += gridDim.x) {
    T* xs = x + b * N;
    const std::int64_t sample = d.first_sample + b;
    const AugmentDraws a = augment_draws(d, ctr, sample);
    for (int i = t; i < masks; i += kAugmentThreads) {  // read after pass B's barriers
      const AugmentMask mk = augment_mask(d, ctr, sample, i);
      mask_lo[i] = mk.start;
      mask_hi[i] = mk.start + mk.width;
    }
    const float* nz = a.noise >= 0 ? noise + a.noise * N : nullptr;
    float scale = 0.f;
    if (nz) {  // pass A
      float px = 0.f, pn = 0.f;
      for (int e = t; e < N; e += kAugmentThreads) {
        const int m = e / F, c = e - m * F;
        const int src = c >= a.rotation ? c - a.rotation : c - a.rotation + F;
        const float v = cuda::load_f32(xs[m * F + src]);
        px += augment_power(gain ? v + a.offset : v, kp);
        pn += augment_power(nz[e], kp);
      }
      cuda::block_reduce_all<kAugmentThreads>(cuda::Add{}, cuda::reduced(px, red_x), cuda::reduced(pn, red_n));
      scale = augment_noise_scale(px, pn, a.snr_ratio);
    }
    float acc = 0.f;
    for (int r0 = 0; r0 < M; r0 += rows_per_stage) {  // pass B
      const int rows = M - r0 < rows_per_stage ? M - r0 : rows_per_stage, e0 = r0 * F, e1 = e0 + rows * F;
      for (int j = t; j < rows * F; j += kAugmentThreads) stage[j] = cuda::load_f32(xs[e0 + j]);
      __syncthreads();
      // the first e >= e0 with e mod kAugmentThreads == t
      for (int e = e0 + (t - e0 % kAugmentThreads + kAugmentThreads) % kAugmentThreads; e < e1;
           e += kAugmentThreads) {
        const int m = e / F, c = e - m * F;
        const int src = c >= a.rotation ? c - a.rotation : c - a.rotation + F;
        float v = stage[(m - r0) * F + src];
        if (gain) v = v + a.offset;
        if (nz) v = augment_mix(v, nz[e], scale, kp);
        acc += v;
        xs[e] = cuda::store_f32<T>(v);
      }
      __syncthreads();  // the stage is refilled next
    }
    if (masks > 0) {  // pass C
      const float mean = cuda::block_reduce<kAugmentThreads>(acc, red_x, cuda::Add{}) / float(N);
      const T fill = cuda::store_f32<T>(mean);
      for (int e = t; e < N; e += kAugmentThreads) {
        const int m = e / F, c = e - m * F;
        bool masked = false;
        for (int i = 0; i < masks; ++i) {
          const int pos = i < d.freq_masks ? m : c;
          masked |= pos >= mask_lo[i] && pos < mask_hi[i];
        }
        if (masked) xs[e] = fill;
      }
    }
    __syncthreads();  // the mask ranges are refilled by the next sample
  }
}

template <class T>
void launch(const AugmentArgs& d, void* x, const float* noise, const std::int32_t* counter, cudaStream_t stream) {
  const unsigned grid = cuda::grid_for(d.batch, 1, kAugmentMaxBlocks);  // a block per sample
  augment_kernel<<<grid, kAugmentThreads, 0, stream>>>(d, static_cast<T*>(x), noise, counter);
}

}  // namespace

void augment_cuda(const AugmentArgs& d, DType dtype, void* x, const float* noise, const std::int32_t* counter,
                  cudaStream_t stream) {
  if (!d.any() || d.batch == 0) return;
  switch (dtype) {
    case DType::f32: launch<float>(d, x, noise, counter, stream); break;
    case DType::f16: launch<__half>(d, x, noise, counter, stream); break;
    case DType::bf16: launch<__nv_bfloat16>(d, x, noise, counter, stream); break;
    default: return;  // ops.cpp validated the dtype
  }
  MF_CUDA_CHECK_LAUNCH();
}

}  // namespace mf::kernels
