// trial_scores on the GPU, variant 1 (kernels/trial_scores.hpp has the
// contract): one warp per trial, 8 trials per block. Lane j sums the products
// of k = j, j + 32, ... (coalesced reads of both rows, which stay in L2 across
// trials sharing a file), then cuda::warp_sum's fixed xor tree; lane 0 stores.
// An index out of [0, F) gives NaN (the device cannot raise an error; callers
// check on the host).
#include <cmath>

#include "engine/error.hpp"
#include "kernels/block_reduce.cuh"
#include "kernels/launch.cuh"
#include "kernels/trial_scores.hpp"

namespace mf::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kTrialsPerBlock = kThreads / kTrialScoreLanes;
static_assert(kTrialScoreLanes == 32, "one warp per trial");

__global__ void __launch_bounds__(kThreads)
    trial_scores_kernel(TrialScoresDims d, const float* __restrict__ emb, const std::int32_t* __restrict__ pairs,
                        float* __restrict__ scores) {
  const std::int64_t t = std::int64_t(blockIdx.x) * kTrialsPerBlock + threadIdx.x / 32;
  if (t >= d.trials) return;  // uniform over the warp
  const int lane = threadIdx.x % 32;
  const std::int32_t ia = pairs[2 * t], ib = pairs[2 * t + 1];
  if (ia < 0 || ia >= d.files || ib < 0 || ib >= d.files) {
    if (lane == 0) scores[t] = NAN;
    return;
  }
  const float* a = emb + std::int64_t(ia) * d.dim;
  const float* b = emb + std::int64_t(ib) * d.dim;
  float p = 0.f;
  for (std::int64_t k = lane; k < d.dim; k += 32) p += a[k] * b[k];
  p = cuda::warp_sum(p);
  if (lane == 0) scores[t] = p;
}

}  // namespace

void trial_scores_cuda(const TrialScoresDims& d, const float* emb, const std::int32_t* pairs, float* scores,
                       cudaStream_t stream) {
  if (d.trials <= 0) return;
  // blocks < 2^31: the dispatch admits at most 2^33 trials
  trial_scores_kernel<<<cuda::blocks_for(d.trials, kTrialsPerBlock), kThreads, 0, stream>>>(d, emb, pairs, scores);
  MF_CUDA_CHECK_LAUNCH();
}

}  // namespace mf::kernels
