#include "train/evaluate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <span>
#include <vector>

#include "engine/error.hpp"
#include "engine/nvtx.hpp"
#include "train/embeddings.hpp"
#include "train/eval_shard.hpp"

namespace mf::train {

namespace {
EvalRun evaluate_embeddings(model::TrainStep& ts, io::BatchReader& reader, const EvalOptions& o,
                            cudaStream_t stream) {
  const auto t0 = std::chrono::steady_clock::now();
  const io::DatasetInfo& info = reader.info();
  std::int64_t n = info.num_segments;
  if (o.max_segments > 0 && o.max_segments < n)
    n = std::max<std::int64_t>(2, o.max_segments / info.segments_per_file) * info.segments_per_file;
  n = std::min(n, info.num_segments);
  const VerificationRun v = verify_dataset(ts, reader, o.trials_per_file, o.trials_seed, stream, n, o.shard);
  EvalRun r;
  r.result.has_class = false;
  r.result.has_verification = true;
  model::VerificationMetrics& m = r.result.verification;
  m.files = v.files;
  m.trials = std::int64_t(v.trials.size());
  m.targets = v.rates.targets;
  m.nontargets = v.rates.nontargets;
  m.eer = v.rates.eer;
  m.eer_threshold = v.rates.eer_threshold;
  m.min_dcf_05 = v.rates.min_dcf[0].value;
  m.min_dcf_01 = v.rates.min_dcf[1].value;
  r.files = v.files;
  r.segments_evaluated = n;
  const double secs = std::max(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1e-9);
  r.result.segments_per_s = double(n) / secs;
  return r;
}
// The class (and leak) probabilities of the first n segments, in order, on
// the host: this process's shard of the batches, gathered when `shard`.
void run_rows(model::TrainStep& ts, io::BatchReader& reader, std::int64_t n, bool shard, std::vector<float>& probs_out,
              std::vector<float>* leak_out, cudaStream_t stream) {
  const Device dev = ts.device();
  const int C = ts.config().model.classes;
  const std::int64_t B = reader.config().batch_size;
  const dist::World& world = dist::World::get();
  const EvalShard s = eval_shard_here(n, B, shard);
  const std::int64_t rows = s.end_row - s.first_row;
  Tensor probs = Tensor::empty({rows, C}, DType::f32, dev, Layout::plain, stream);
  Tensor leak = leak_out ? Tensor::empty({rows}, DType::f32, dev, Layout::plain, stream) : Tensor();
  run_eval_batches(ts, reader, s, stream, [&](const model::EvalOutput& out, std::int64_t row, std::int64_t take) {
    probs.slice(row, row + take).copy_from(out.probs.slice(0, take), stream);
    if (leak_out) leak.slice(row, row + take).copy_from(out.leak_prob.slice(0, take), stream);
  });
  probs_out = probs.to_floats();  // synchronous
  if (shard) probs_out = gather_eval_rows(world, probs_out, n, C, B, "gathering the evaluation's probabilities");
  if (leak_out) {
    *leak_out = leak.to_floats();
    if (shard) *leak_out = gather_eval_rows(world, *leak_out, n, 1, B, "gathering the evaluation's leak outputs");
  }
}

}  // namespace

EvalRun evaluate(model::TrainStep& ts, io::BatchReader& reader, const EvalOptions& o, cudaStream_t stream) {
  MF_NVTX_RANGE("eval");
  // Every metric loss trains an embedding model, evaluated on trials (also
  // softmaxproto, whose class head only serves training).
  if (ts.config().model.loss != model::LossType::softmax) return evaluate_embeddings(ts, reader, o, stream);
  const auto t0 = std::chrono::steady_clock::now();
  const io::DatasetInfo& info = reader.info();
  const Device dev = ts.device();
  const int C = ts.config().model.classes;
  MF_CHECK(info.num_classes <= C, "{}: labels have {} classes but the model has {}", info.path, info.num_classes, C);
  std::int64_t n = info.num_segments;
  // Files to vote over: file-structured data, and whole utterances (each its
  // eval.crops crops).
  const bool has_files = info.layout == io::SegmentLayout::file_structured || info.ragged();
  if (o.max_segments > 0 && o.max_segments < n) {
    n = o.max_segments;
    // Whole files, when there are files and at least one fits.
    if (has_files && n >= info.segments_per_file) n = n / info.segments_per_file * info.segments_per_file;
  }
  const bool has_leak = ts.config().model.leak_head;
  EvalRun r;
  r.segments.classes = C;
  r.segments.has_leak = has_leak;
  run_rows(ts, reader, n, o.shard, r.segments.class_probs, has_leak ? &r.segments.leak_probs : nullptr, stream);
  r.segments.labels.assign(info.labels.begin(), info.labels.begin() + n);
  if (has_leak) r.segments.leak_labels.assign(info.leak.begin(), info.leak.begin() + n);
  // The same loss as training (without label smoothing).
  r.result.loss = model::mean_loss(r.segments, o.class_loss_weight, o.leak_loss_weight);
  r.result.segment = model::segment_metrics(r.segments, o.threshold);
  if (has_files && n >= info.segments_per_file) {
    const std::int64_t F = n / info.segments_per_file;
    const std::int64_t used = F * info.segments_per_file;
    // Voting runs where the model does; its inputs are the host copies.
    const std::span<const float> all_probs(r.segments.class_probs), all_leak(r.segments.leak_probs);
    const Tensor probs = Tensor::from_floats(all_probs.first(std::size_t(used * C)), {used, C});
    const Tensor leak = has_leak ? Tensor::from_floats(all_leak.first(std::size_t(used)), {used}) : Tensor();
    r.vote = model::vote_files(dev.is_cuda() ? probs.to(dev, stream) : probs,
                               has_leak && dev.is_cuda() ? leak.to(dev, stream) : leak, F, info.long_per_file,
                               info.short_per_long, o.threshold, false, stream);
    std::vector<std::int32_t> fl(info.file_labels.begin(), info.file_labels.begin() + F);
    std::vector<std::int32_t> fk(info.file_leak.begin(), info.file_leak.begin() + F);
    r.result.file = model::file_metrics(*r.vote, fl, fk, o.threshold);
    r.result.has_files = true;
    r.files = F;
  }
  const double secs = std::max(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1e-9);
  r.result.segments_per_s = double(n) / secs;
  r.segments_evaluated = n;
  if (r.result.has_files) r.result.files_per_s = double(r.files) / secs;
  return r;
}

}  // namespace mf::train
