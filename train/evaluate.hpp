// One evaluation pass of a model over a dataset: segment metrics on the host,
// the file vote on the model's device in one launch. Shared by training
// (validation, test) and `melforge eval` / `predict`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>

#include "io/reader.hpp"
#include "model/metrics.hpp"
#include "model/train_step.hpp"

namespace mf::train {

// Everything an evaluation pass produces.
struct EvalRun {
  model::EvalResult result;
  model::SegmentOutputs segments;
  std::optional<model::FileVote> vote;  // file-structured data only
  std::int64_t files = 0;               // files voted on
  std::int64_t segments_evaluated = 0;  // segments the model ran on (either kind of model)
};

struct EvalOptions {
  double threshold = 0.5;
  double class_loss_weight = 1.0, leak_loss_weight = 1.0;
  std::int64_t max_segments = 0;  // 0: all; else the first N (whole files when the data has files)
  // An embedding model (no class head): trials drawn per file (target and
  // non-target each) and their seed (train/embeddings.hpp).
  std::int64_t trials_per_file = 10;
  std::uint64_t trials_seed = 0;
  // In a data-parallel job: each process evaluates its shard of the batches,
  // and the outputs are gathered (train/eval_shard.hpp); every process then
  // holds one process's metrics. Every process must call evaluate.
  bool shard = false;
};

// Runs the model over `reader` (its position is reset; it must not shuffle and
// must pad the last batch) in dataset order. An embedding model (any metric
// loss, softmaxproto included) is evaluated by the error rates of trials
// drawn from the set.
EvalRun evaluate(model::TrainStep& ts, io::BatchReader& reader, const EvalOptions& o, cudaStream_t stream);

}  // namespace mf::train
