#include "train/evaluate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/error.hpp"
#include "engine/nvtx.hpp"
#include "train/embeddings.hpp"

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
  const VerificationRun v = verify_dataset(ts, reader, o.trials_per_file, o.trials_seed, stream, n);
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
  if (o.max_segments > 0 && o.max_segments < n) {
    n = o.max_segments;
    // Whole files, when there are files and at least one fits.
    if (info.layout == io::SegmentLayout::file_structured && n >= info.segments_per_file)
      n = n / info.segments_per_file * info.segments_per_file;
  }
  const bool has_leak = ts.config().model.leak_head;
  Tensor probs = Tensor::empty({n, C}, DType::f32, dev, Layout::plain, stream);
  Tensor leak = has_leak ? Tensor::empty({n}, DType::f32, dev, Layout::plain, stream) : Tensor();
  reader.restore({0, 0});
  std::int64_t done = 0;
  while (done < n) {
    io::Batch b = reader.next(stream);
    MF_CHECK(b.valid > 0, "evaluation: the reader returned an empty batch at segment {}", done);
    const model::EvalOutput out = ts.forward_eval(b.x, stream);
    const std::int64_t take = std::min(b.valid, n - done);
    probs.slice(done, done + take).copy_from(out.probs.slice(0, take), stream);
    if (has_leak) leak.slice(done, done + take).copy_from(out.leak_prob.slice(0, take), stream);
    done += take;
  }
  EvalRun r;
  r.segments.classes = C;
  r.segments.has_leak = has_leak;
  {
    const Tensor hp = dev.is_cuda() ? probs.to(Device::cpu(), stream) : probs;
    const Tensor hl = has_leak && dev.is_cuda() ? leak.to(Device::cpu(), stream) : leak;
    if (dev.is_cuda()) MF_CUDA_CHECK(cudaStreamSynchronize(stream));
    r.segments.class_probs.assign(hp.data<float>(), hp.data<float>() + n * C);
    if (has_leak) r.segments.leak_probs.assign(hl.data<float>(), hl.data<float>() + n);
  }
  r.segments.labels.assign(info.labels.begin(), info.labels.begin() + n);
  if (has_leak) r.segments.leak_labels.assign(info.leak.begin(), info.leak.begin() + n);
  // The same loss as training (without label smoothing).
  r.result.loss = model::mean_loss(r.segments, o.class_loss_weight, o.leak_loss_weight);
  r.result.segment = model::segment_metrics(r.segments, o.threshold);
  if (info.layout == io::SegmentLayout::file_structured && n >= info.segments_per_file) {
    const std::int64_t F = n / info.segments_per_file;
    const std::int64_t used = F * info.segments_per_file;
    const Tensor leak_used = has_leak ? leak.slice(0, used) : Tensor();
    r.vote = model::vote_files(probs.slice(0, used), leak_used, F, info.long_per_file, info.short_per_long,
                               o.threshold, false, stream);
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
