#include "train/embeddings.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/error.hpp"
#include "engine/nvtx.hpp"
#include "engine/parallel.hpp"
#include "kernels/dense.hpp"
#include "kernels/ops.hpp"
#include "train/eval_shard.hpp"

namespace mf::train {

Embeddings segment_embeddings(model::TrainStep& ts, io::BatchReader& reader, std::int64_t segments,
                              cudaStream_t stream, bool shard) {
  MF_NVTX_RANGE("embed");
  const io::DatasetInfo& info = reader.info();
  const std::int64_t n = segments > 0 ? std::min(segments, info.num_segments) : info.num_segments;
  const Device dev = ts.device();
  const std::int64_t E = ts.config().model.features();
  const dist::World& world = dist::World::get();
  const std::int64_t B = reader.config().batch_size;
  const EvalShard s = eval_shard_here(n, B, shard);
  Tensor mine = Tensor::empty({s.end_row - s.first_row, E}, DType::f32, dev, Layout::plain, stream);
  run_eval_batches(ts, reader, s, stream, [&](const model::EvalOutput& out, std::int64_t row, std::int64_t take) {
    Tensor dst = mine.slice(row, row + take);
    ops::cast(out.embedding.slice(0, take), dst, stream);
  });
  Embeddings e;
  e.rows = n;
  e.dim = E;
  e.values = mine.to_floats();  // synchronous
  if (shard) e.values = gather_eval_rows(world, e.values, n, E, B, "gathering the evaluation's embeddings");
  return e;
}

void normalize_rows(Embeddings& e) {
  for (std::int64_t i = 0; i < e.rows; ++i) {
    float* r = e.values.data() + i * e.dim;
    double ss = 0;
    for (std::int64_t k = 0; k < e.dim; ++k) ss += double(r[k]) * r[k];
    if (ss == 0) continue;
    const double inv = 1.0 / std::sqrt(ss);
    for (std::int64_t k = 0; k < e.dim; ++k) r[k] = float(r[k] * inv);
  }
}

Embeddings file_embeddings(const Embeddings& seg, std::int64_t per_file) {
  MF_CHECK(per_file >= 1 && seg.rows % per_file == 0, "file_embeddings: {} segments are not whole files of {}",
           seg.rows, per_file);
  Embeddings f;
  f.rows = seg.rows / per_file;
  f.dim = seg.dim;
  f.values.assign(std::size_t(f.rows * f.dim), 0.f);
  std::vector<double> acc(std::size_t(f.dim));
  for (std::int64_t i = 0; i < f.rows; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (std::int64_t s = 0; s < per_file; ++s) {
      const auto r = seg.row(i * per_file + s);
      for (std::int64_t k = 0; k < f.dim; ++k) acc[std::size_t(k)] += r[std::size_t(k)];
    }
    for (std::int64_t k = 0; k < f.dim; ++k) f.values[std::size_t(i * f.dim + k)] = float(acc[std::size_t(k)] / double(per_file));
  }
  normalize_rows(f);
  return f;
}

namespace {

void check_trials(const Embeddings& e, std::span<const model::Trial> trials) {
  // The first bad trial (the lowest index, whatever the threads) is named.
  const std::int64_t t = parallel_find_first(std::int64_t(trials.size()), [&](std::int64_t i) {
    const model::Trial& tr = trials[std::size_t(i)];
    return !(tr.a >= 0 && tr.a < e.rows && tr.b >= 0 && tr.b < e.rows);
  });
  if (t < std::int64_t(trials.size())) {
    const model::Trial& tr = trials[std::size_t(t)];
    MF_THROW("cosine_scores: trial {} names files {} and {}, expected 0..{}", t, tr.a, tr.b, e.rows - 1);
  }
}

}  // namespace

std::vector<float> all_pair_scores(const Embeddings& a, const Embeddings& b) {
  MF_CHECK(a.dim == b.dim, "all_pair_scores: embeddings of {} and {} values", a.dim, b.dim);
  std::vector<float> out(std::size_t(a.rows * b.rows));
  if (out.empty()) return out;
  // B(k, j) = b's row j, value k.
  kernels::gemm_cpu(a.rows, b.rows, a.dim, DType::f32, a.values.data(), a.dim, 1, b.values.data(), 1, b.dim,
                    out.data());
  return out;
}

std::vector<float> cosine_scores(const Embeddings& e, std::span<const model::Trial> trials) {
  check_trials(e, trials);
  std::vector<float> s(trials.size());
  for (std::size_t t = 0; t < trials.size(); ++t) {
    const auto a = e.row(trials[t].a), b = e.row(trials[t].b);
    double d = 0;
    for (std::int64_t k = 0; k < e.dim; ++k) d += double(a[std::size_t(k)]) * b[std::size_t(k)];
    s[t] = float(d);
  }
  return s;
}

std::vector<float> cosine_scores(const Embeddings& e, std::span<const model::Trial> trials, Device dev,
                                 cudaStream_t stream, std::int64_t per_launch) {
  MF_NVTX_RANGE("trial scores");
  MF_CHECK(per_launch >= 1, "cosine_scores: {} trials per launch, expected >= 1", per_launch);
  // Indices checked here, on the host: the GPU kernel could only write NaN.
  check_trials(e, trials);
  MF_CHECK(e.rows <= std::numeric_limits<std::int32_t>::max(), "cosine_scores: {} files; i32 indices reach 2^31 - 1",
           e.rows);
  const auto T = std::int64_t(trials.size());
  std::vector<float> out(trials.size());
  if (T == 0) return out;
  const Tensor emb_host = Tensor::from_floats(e.values, {e.rows, e.dim});
  const Tensor emb = dev.is_cpu() ? emb_host : emb_host.to(dev, stream);  // uploaded once
  const std::int64_t B = std::min(T, per_launch);
  Tensor pairs_host = Tensor::empty({B, 2}, DType::i32), scores_host = Tensor::empty({B}, DType::f32);
  Tensor pairs = dev.is_cpu() ? pairs_host : Tensor::empty({B, 2}, DType::i32, dev, Layout::plain, stream);
  Tensor scores = dev.is_cpu() ? scores_host : Tensor::empty({B}, DType::f32, dev, Layout::plain, stream);
  for (std::int64_t t0 = 0; t0 < T; t0 += B) {
    const std::int64_t n = std::min(B, T - t0);
    std::int32_t* p = pairs_host.data<std::int32_t>();
    parallel_for(n, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        p[2 * i] = std::int32_t(trials[std::size_t(t0 + i)].a);
        p[2 * i + 1] = std::int32_t(trials[std::size_t(t0 + i)].b);
      }
    }, 1 << 16);
    Tensor pd = pairs.slice(0, n), sd = scores.slice(0, n), sh = scores_host.slice(0, n);
    if (!dev.is_cpu()) pd.copy_from(pairs_host.slice(0, n), stream);  // pageable: staged before it returns
    ops::trial_scores(emb, pd, sd, stream);
    if (!dev.is_cpu()) sh.copy_from(sd, stream);  // synchronises the stream
    std::copy_n(sh.data<float>(), n, out.begin() + t0);
  }
  return out;
}

VerificationRun verify_dataset(model::TrainStep& ts, io::BatchReader& reader, std::int64_t per_file,
                               std::uint64_t seed, cudaStream_t stream, std::int64_t segments, bool shard) {
  const io::DatasetInfo& info = reader.info();
  const Embeddings seg = segment_embeddings(ts, reader, segments, stream, shard);
  const Embeddings files = file_embeddings(seg, info.segments_per_file);
  VerificationRun v;
  v.files = files.rows;
  const std::vector<std::int32_t> file_labels(info.file_labels.begin(), info.file_labels.begin() + files.rows);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const bool two_classes = std::any_of(file_labels.begin(), file_labels.end(),
                                       [&](std::int32_t c) { return c != file_labels.front(); });
  if (!two_classes && segments > 0) {
    // A cut-down evaluation (--fast-dev-run) that holds one class: no
    // non-target trial exists, the rates are undefined (NaN).
    v.rates.eer = v.rates.eer_threshold = nan;
    v.rates.min_dcf = {{0.05, nan, nan}, {0.01, nan, nan}};
    return v;
  }
  v.trials = model::make_trials(file_labels, per_file, seed);
  MF_CHECK(!v.trials.empty(), "{}: no trials can be drawn from {} files (a verification set needs at least two "
           "classes)", info.path, files.rows);
  v.scores = cosine_scores(files, v.trials, ts.device(), stream);
  const std::vector<std::int32_t> labels = model::trial_labels(v.trials);
  const auto targets = std::count(labels.begin(), labels.end(), 1);
  if (targets == 0 || targets == std::int64_t(labels.size())) {
    // Too few files (e.g. --fast-dev-run's one batch) for both kinds of
    // trials: the rates are undefined (NaN), as a metric without examples.
    v.rates.targets = targets;
    v.rates.nontargets = std::int64_t(labels.size()) - targets;
    v.rates.eer = v.rates.eer_threshold = nan;
    v.rates.min_dcf = {{0.05, nan, nan}, {0.01, nan, nan}};
    return v;
  }
  v.rates = model::error_rates(v.scores, labels, {0.05, 0.01});
  return v;
}

}  // namespace mf::train
