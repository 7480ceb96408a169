// CPU twin of trial_scores (kernels/trial_scores.hpp): the indices checked
// first (an error names the first bad trial; nothing is written), then trials
// split over threads; per trial 32 strided f32 partial sums in E order and
// the same fixed tree as the CUDA kernel's warp reduction. With the avx512 or
// avx2 CPU kernels the same arithmetic runs vectorised
// (kernels/trial_scores_simd.hpp): the same bits.
#include "kernels/trial_scores.hpp"

#include "engine/cpu_kernels.hpp"
#include "engine/error.hpp"
#include "engine/parallel.hpp"
#include "kernels/trial_scores_simd.hpp"

#include <algorithm>
#include <vector>

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

// Rows per tile side: two tiles of rows (2 x 64 x E floats: 128 KB at E =
// 256, 256 KB at 512) stay in a core's L2.
constexpr std::int64_t kTileRows = 64;

// The trials in tile order (a counting sort by (a / kTileRows, b /
// kTileRows), stable), or empty when the rows fit in the caches anyway or
// there are too few trials per tile to reuse them.
std::vector<std::int64_t> tile_order(const TrialScoresDims& d, const std::int32_t* pairs) {
  const std::int64_t tiles_per_side = (d.files + kTileRows - 1) / kTileRows;
  const std::int64_t tiles = tiles_per_side * tiles_per_side;
  const bool rows_cached = d.files * d.dim * std::int64_t(sizeof(float)) <= (std::int64_t(1) << 20);
  if (rows_cached || d.trials < 4 * tiles || tiles > (std::int64_t(1) << 24)) return {};
  // Trials grouped by their first file (as make_trials writes them: each
  // file's trials in a row) keep that row in L1 across its group, which tile
  // order would break up: a sample of 4096 neighbours decides.
  const std::int64_t step = std::max<std::int64_t>(1, d.trials / 4096);
  std::int64_t same = 0, seen = 0;
  for (std::int64_t t = step; t < d.trials; t += step, ++seen) same += pairs[2 * t] == pairs[2 * (t - 1)];
  if (2 * same >= seen) return {};
  const auto tile_of = [&](std::int64_t t) {
    return std::int64_t(pairs[2 * t]) / kTileRows * tiles_per_side + std::int64_t(pairs[2 * t + 1]) / kTileRows;
  };
  std::vector<std::int64_t> start(std::size_t(tiles + 1), 0);
  for (std::int64_t t = 0; t < d.trials; ++t) ++start[std::size_t(tile_of(t) + 1)];
  for (std::size_t i = 1; i < start.size(); ++i) start[i] += start[i - 1];
  std::vector<std::int64_t> order(std::size_t(d.trials));
  for (std::int64_t t = 0; t < d.trials; ++t) order[std::size_t(start[std::size_t(tile_of(t))]++)] = t;
  return order;
}

}  // namespace

void trial_scores_cpu(const TrialScoresDims& d, const float* emb, const std::int32_t* pairs, float* scores,
                      cudaStream_t) {
  // The first bad trial (the lowest index, whatever the threads) is named.
  const std::int64_t bad = parallel_find_first(d.trials, [&](std::int64_t t) {
    const std::int32_t a = pairs[2 * t], b = pairs[2 * t + 1];
    return !(a >= 0 && a < d.files && b >= 0 && b < d.files);
  });
  if (bad < d.trials)
    MF_THROW("trial_scores: trial {} names files {} and {}, expected indices in 0..{} ({} files)", bad,
             pairs[2 * bad], pairs[2 * bad + 1], d.files - 1, d.files);
  const std::int64_t E = d.dim;
  const CpuKernels isa = active_cpu_kernels();
  // Many trials over rows that do not fit in the caches: scored tile by tile
  // (both rows within the same kTileRows x kTileRows block of files), so a
  // tile's rows are read from memory once and then from L2. Each trial is
  // computed alone either way: the order changes no bit.
  const std::vector<std::int64_t> order = tile_order(d, pairs);
  const std::int32_t* tp = order.empty() ? pairs : nullptr;
  std::vector<std::int32_t> packed;
  std::vector<float> tile_scores;
  if (!order.empty()) {
    packed.resize(std::size_t(2 * d.trials));
    tile_scores.resize(std::size_t(d.trials));
    parallel_for(d.trials, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        packed[std::size_t(2 * i)] = pairs[2 * order[std::size_t(i)]];
        packed[std::size_t(2 * i + 1)] = pairs[2 * order[std::size_t(i)] + 1];
      }
    }, 1 << 16);
    tp = packed.data();
  }
  float* out = order.empty() ? scores : tile_scores.data();
  parallel_for(d.trials, [&](std::int64_t t0, std::int64_t t1) {
    if (isa == CpuKernels::avx512) return avx512::trial_scores_range(emb, E, tp, t0, t1, out);
    if (isa == CpuKernels::avx2) return avx2::trial_scores_range(emb, E, tp, t0, t1, out);
    for (std::int64_t t = t0; t < t1; ++t)
      out[t] = dot(emb + std::int64_t(tp[2 * t]) * E, emb + std::int64_t(tp[2 * t + 1]) * E, E);
  }, 256);
  if (!order.empty())
    parallel_for(d.trials, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) scores[order[std::size_t(i)]] = tile_scores[std::size_t(i)];
    }, 1 << 16);
}

}  // namespace mf::kernels
