// trial_scores: the scores of speaker-verification trials (issue 20's
// `melforge verify` and validation with a metric loss; train/embeddings.hpp).
//   scores[t] = sum_k emb[pairs[t][0]][k] * emb[pairs[t][1]][k]
// emb f32 [F, E] (one row per file, L2-normalised by the caller: the op
// computes plain dot products, so the score is the cosine), pairs i32 [T, 2]
// (file indices), scores f32 [T] (overwritten; emb and pairs only read).
// E = 0 gives 0. NaN in a row makes the scores of its trials NaN.
// Indices out of [0, F): the CPU twin throws an error naming the first such
// trial before writing anything; the CUDA kernel cannot report from the device
// (pairs live in GPU memory), so it writes NaN for that trial: a caller on the
// GPU checks the indices on the host before uploading them
// (train::cosine_scores does).
// Precision and order: f32 products and sums in one fixed order per trial, so
// every run gives the same bits. The CPU twin and the CUDA kernel use the same
// order: 32 partial sums, partial j over k = j, j + 32, j + 64, ... in E order,
// then combined by the tree p[i] += p[i + s] for s = 16, 8, 4, 2, 1 (the CUDA
// kernel: one warp per trial, lane j holds partial j, cuda::warp_sum's xor
// tree, whose lane-0 result is that tree). They still agree only to rounding:
// nvcc may fuse the multiply-add into an FMA where the host compiler does not.
// The CPU twin splits trials over threads (each trial computed by one thread):
// identical bits for any thread count.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mf::kernels {

// The partial sums per trial (the warp width on the GPU).
inline constexpr int kTrialScoreLanes = 32;

struct TrialScoresDims {
  std::int64_t files = 0;   // F (< 2^31: the indices are i32)
  std::int64_t dim = 0;     // E
  std::int64_t trials = 0;  // T
};

void trial_scores_cpu(const TrialScoresDims& d, const float* emb, const std::int32_t* pairs, float* scores,
                      cudaStream_t stream);
void trial_scores_cuda(const TrialScoresDims& d, const float* emb, const std::int32_t* pairs, float* scores,
                       cudaStream_t stream);

}  // namespace mf::kernels
