// CPU twin of trial_scores (kernels/trial_scores.hpp): the indices checked
// first (an error names the first bad trial; nothing is written), then trials
// split over threads; per trial 32 strided f32 partial sums in E order and
// the same fixed tree as the CUDA kernel's warp reduction.
#include "kernels/trial_scores.hpp"

#include "engine/error.hpp"
#include "engine/parallel.hpp"

namespace mf::kernels {

namespace {

float dot(const float* a, const float* b, std::int64_t E) {
  constexpr int L = kTrialScoreLanes;
  float p[L] = {};
  std::int64_t k = 0;
  for (; k + L <= E; k += L)
    for (int j = 0; j < L; ++j) p[j] += a[k + j] * b[k + j];
  for (int j = 0; k + j < E; ++j) p[j] += a[k + j] * b[k + j];
  for (int s = L / 2; s > 0; s >>= 1)
    for (int j = 0; j < s; ++j) p[j] += p[j + s];
  return p[0];
}

}  // namespace

void trial_scores_cpu(const TrialScoresDims& d, const float* emb, const std::int32_t* pairs, float* scores,
                      cudaStream_t) {
  for (std::int64_t t = 0; t < d.trials; ++t) {
    const std::int32_t a = pairs[2 * t], b = pairs[2 * t + 1];
    MF_CHECK(a >= 0 && a < d.files && b >= 0 && b < d.files,
             "trial_scores: trial {} names files {} and {}, expected indices in 0..{} ({} files)", t, a, b,
             d.files - 1, d.files);
  }
  const std::int64_t E = d.dim;
  parallel_for(d.trials, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t)
      scores[t] = dot(emb + std::int64_t(pairs[2 * t]) * E, emb + std::int64_t(pairs[2 * t + 1]) * E, E);
  }, 256);
}

}  // namespace mf::kernels
