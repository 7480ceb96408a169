// Speaker embeddings of a dataset and the cosine scores of trials: what
// `melforge embed` and `melforge verify` output and what validation with a
// metric loss (loss.type != softmax) scores.
//
// A segment's embedding is the model's output before the metric loss / heads
// (TrainStep::forward_eval's `embedding`); a file's embedding is the mean of
// its segments' embeddings, then L2-normalised. Per-segment embeddings are
// L2-normalised too. A trial's score is the cosine of its two files'
// embeddings (the dot product of the normalised rows, on the model's device
// in f32 by ops::trial_scores; the host double version is the reference).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "io/reader.hpp"
#include "model/train_step.hpp"
#include "model/verification.hpp"

namespace mf::train {

struct Embeddings {
  std::int64_t rows = 0, dim = 0;
  std::vector<float> values;  // [rows, dim]
  std::span<const float> row(std::int64_t i) const {
    return {values.data() + i * dim, std::size_t(dim)};
  }
};

// The embeddings of the first `segments` segments (0: all) of the reader's
// dataset in order (the reader must not shuffle and must pad the last batch),
// not normalised. With `shard`, in a data-parallel job each process embeds
// its shard of the batches and all are gathered (train/eval_shard.hpp): the
// same values on every process as one process computes.
Embeddings segment_embeddings(model::TrainStep& ts, io::BatchReader& reader, std::int64_t segments,
                              cudaStream_t stream, bool shard = false);
// Divides each row by its L2 norm (a zero row stays zero).
void normalize_rows(Embeddings& e);
// Mean over each file's `per_file` consecutive segments, normalised: rows =
// segments.rows / per_file files.
Embeddings file_embeddings(const Embeddings& segments, std::int64_t per_file);
// Cosine scores of the trials over normalised rows, on the host in double
// (rounded to f32 once): the reference the device path is tested against.
std::vector<float> cosine_scores(const Embeddings& normalized, std::span<const model::Trial> trials);
// Every row of `a` against every row of `b` (both normalised, same dim):
// [a.rows x b.rows] scores, row-major, on the host by the CPU GEMM
// (kernels::gemm_cpu: f32, every thread, each score one sum in dim order, the
// same bits for any thread count). AS-norm's cohort scores.
std::vector<float> all_pair_scores(const Embeddings& a, const Embeddings& b);
// The same scores on `dev` (ops::trial_scores: f32 products and sums in a
// fixed order, so run-to-run identical and equal to the double version to f32
// rounding; the CPU twin when dev is the CPU): the rows are uploaded once, the
// trials scored `per_launch` per launch. Trial indices are checked on the host
// first (an error names the trial). Returns when the scores are on the host.
inline constexpr std::int64_t kTrialsPerLaunch = std::int64_t(1) << 20;
std::vector<float> cosine_scores(const Embeddings& normalized, std::span<const model::Trial> trials, Device dev,
                                 cudaStream_t stream, std::int64_t per_launch = kTrialsPerLaunch);

// Validation of an embedding model: file embeddings of the whole set, a
// balanced trial list drawn from it (model::make_trials: `per_file` target and
// non-target trials per file, fixed `seed`), their scores and error rates
// (NaN when the files allow only one kind of trial, e.g. a single file per
// class in a --fast-dev-run batch).
struct VerificationRun {
  std::int64_t files = 0;
  std::vector<model::Trial> trials;
  std::vector<float> scores;
  model::ErrorRates rates;  // min_dcf at P_target 0.05 then 0.01
};
// `segments` (0: all) limits it to the first whole files.
VerificationRun verify_dataset(model::TrainStep& ts, io::BatchReader& reader, std::int64_t per_file,
                               std::uint64_t seed, cudaStream_t stream, std::int64_t segments = 0,
                               bool shard = false);

}  // namespace mf::train
