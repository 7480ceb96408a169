#include "model/metrics.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/ranges.h>

#include "engine/error.hpp"
#include "engine/stream.hpp"
#include "kernels/ops.hpp"
#include "model/run_config.hpp"

namespace mf::model {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
}  // namespace

double roc_auc(std::span<const float> scores, std::span<const std::int32_t> labels) {
  MF_CHECK(scores.size() == labels.size(), "roc_auc: {} scores but {} labels", scores.size(), labels.size());
  const std::size_t n = scores.size();
  // A NaN score has no rank (and would break the sort's ordering and the tie
  // scan below): the AUC is undefined.
  for (float v : scores)
    if (std::isnan(v)) return kNaN;
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return scores[a] < scores[b]; });
  // Sum of the (1-based, mid-) ranks of the positives.
  double rank_sum = 0;
  std::int64_t pos = 0;
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double mid = (double(i + 1) + double(j)) / 2.0;  // ranks i+1..j
    for (std::size_t k = i; k < j; ++k)
      if (labels[order[k]] != 0) {
        rank_sum += mid;
        ++pos;
      }
    i = j;
  }
  const std::int64_t neg = std::int64_t(n) - pos;
  if (pos == 0 || neg == 0) return kNaN;
  return (rank_sum - double(pos) * double(pos + 1) / 2.0) / (double(pos) * double(neg));
}

ClassMetrics compute_metrics(std::span<const std::int32_t> labels, std::span<const std::int32_t> predictions,
                             int classes) {
  const std::size_t n = labels.size();
  MF_CHECK(predictions.size() == n, "metrics: expected {} predictions, found {}", n, predictions.size());
  MF_CHECK(classes >= 1, "metrics: expected at least one class, found {}", classes);
  ClassMetrics m;
  m.has_leak = false;
  m.threshold = m.leak_auc = m.false_alarm_rate = m.detection_rate = m.leak_precision = m.leak_accuracy = kNaN;
  m.count = std::int64_t(n);
  m.classes = classes;
  m.confusion.assign(std::size_t(classes), std::vector<std::int64_t>(std::size_t(classes), 0));
  std::int64_t correct = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const int t = labels[i], p = predictions[i];
    MF_CHECK(t >= 0 && t < classes && p >= 0 && p < classes,
             "metrics: sample {}: label {} or prediction {} outside 0..{}", i, t, p, classes - 1);
    ++m.confusion[std::size_t(t)][std::size_t(p)];
    correct += t == p;
  }
  m.accuracy = n ? double(correct) / double(n) : kNaN;
  m.precision.assign(std::size_t(classes), 0);
  m.recall.assign(std::size_t(classes), 0);
  m.f1.assign(std::size_t(classes), 0);
  m.support.assign(std::size_t(classes), 0);
  double recall_sum = 0, f1_sum = 0;
  int present = 0, seen = 0;
  for (int c = 0; c < classes; ++c) {
    std::int64_t tp = m.confusion[std::size_t(c)][std::size_t(c)], actual = 0, predicted = 0;
    for (int k = 0; k < classes; ++k) {
      actual += m.confusion[std::size_t(c)][std::size_t(k)];
      predicted += m.confusion[std::size_t(k)][std::size_t(c)];
    }
    const auto cc = std::size_t(c);
    m.support[cc] = actual;
    m.precision[cc] = predicted ? double(tp) / double(predicted) : 0.0;
    m.recall[cc] = actual ? double(tp) / double(actual) : 0.0;
    const double ps = m.precision[cc] + m.recall[cc];
    m.f1[cc] = ps > 0 ? 2 * m.precision[cc] * m.recall[cc] / ps : 0.0;
    if (actual) {
      recall_sum += m.recall[cc];
      ++present;
    }
    if (actual || predicted) {
      f1_sum += m.f1[cc];
      ++seen;
    }
  }
  m.balanced_accuracy = present ? recall_sum / present : kNaN;
  m.macro_f1 = seen ? f1_sum / seen : kNaN;
  return m;
}

ClassMetrics compute_metrics(std::span<const std::int32_t> labels, std::span<const std::int32_t> predictions,
                             std::span<const std::int32_t> leak_labels, std::span<const float> leak_scores,
                             std::span<const std::int32_t> leak_decisions, int classes, double threshold) {
  const std::size_t n = labels.size();
  MF_CHECK(predictions.size() == n && leak_labels.size() == n && leak_scores.size() == n &&
               leak_decisions.size() == n,
           "metrics: expected {} predictions, leak labels, scores and decisions, found {}, {}, {}, {}", n,
           predictions.size(), leak_labels.size(), leak_scores.size(), leak_decisions.size());
  ClassMetrics m = compute_metrics(labels, predictions, classes);
  m.has_leak = true;
  m.threshold = threshold;
  std::int64_t tp = 0, fp = 0, tn = 0, fn = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const bool y = leak_labels[i] != 0, d = leak_decisions[i] != 0;
    tp += y && d;
    fp += !y && d;
    tn += !y && !d;
    fn += y && !d;
  }
  m.leak_auc = roc_auc(leak_scores, leak_labels);
  m.false_alarm_rate = fp + tn ? double(fp) / double(fp + tn) : kNaN;
  m.detection_rate = tp + fn ? double(tp) / double(tp + fn) : kNaN;
  m.leak_precision = tp + fp ? double(tp) / double(tp + fp) : kNaN;
  m.leak_accuracy = n ? double(tp + tn) / double(n) : kNaN;
  return m;
}

nlohmann::json to_json(const ClassMetrics& m, const std::vector<std::string>& class_names) {
  nlohmann::json j;
  j["count"] = m.count;
  j["accuracy"] = num(m.accuracy);
  j["balanced_accuracy"] = num(m.balanced_accuracy);
  j["macro_f1"] = num(m.macro_f1);
  nlohmann::json per = nlohmann::json::array();
  for (int c = 0; c < m.classes; ++c) {
    const auto cc = std::size_t(c);
    per.push_back({{"class", cc < class_names.size() ? class_names[cc] : std::to_string(c)},
                   {"precision", num(m.precision[cc])},
                   {"recall", num(m.recall[cc])},
                   {"f1", num(m.f1[cc])},
                   {"support", m.support[cc]}});
  }
  j["per_class"] = per;
  j["confusion_matrix"] = m.confusion;
  if (!m.has_leak) return j;
  j["leak"] = {{"threshold", m.threshold},
               {"roc_auc", num(m.leak_auc)},
               {"false_alarm_rate", num(m.false_alarm_rate)},
               {"detection_rate", num(m.detection_rate)},
               {"precision", num(m.leak_precision)},
               {"accuracy", num(m.leak_accuracy)}};
  return j;
}

ClassMetrics segment_metrics(const SegmentOutputs& s, double threshold) {
  const std::int64_t n = s.size();
  const int C = s.classes;
  MF_CHECK(std::int64_t(s.class_probs.size()) == n * C, "segment_metrics: {} class probabilities for {} x {}",
           s.class_probs.size(), n, C);
  std::vector<std::int32_t> pred(static_cast<std::size_t>(n)), dec;
  for (std::int64_t i = 0; i < n; ++i) {
    const float* p = s.class_probs.data() + i * C;
    int best = 0;
    for (int c = 1; c < C; ++c)
      if (p[c] > p[best]) best = c;
    pred[std::size_t(i)] = best;
  }
  if (!s.has_leak) return compute_metrics(s.labels, pred, C);
  MF_CHECK(s.size() == std::int64_t(s.leak_probs.size()), "segment_metrics: {} leak probabilities for {} segments",
           s.leak_probs.size(), s.size());
  for (std::int64_t i = 0; i < n; ++i) dec.push_back(s.leak_probs[std::size_t(i)] >= float(threshold) ? 1 : 0);
  return compute_metrics(s.labels, pred, s.leak_labels, s.leak_probs, dec, C, threshold);
}

double mean_loss(const SegmentOutputs& s, double class_loss_weight, double leak_loss_weight) {
  const std::int64_t n = s.size();
  const int C = s.classes;
  MF_CHECK(std::int64_t(s.class_probs.size()) == n * C, "mean_loss: {} class probabilities for {} x {}",
           s.class_probs.size(), n, C);
  MF_CHECK(!s.has_leak || (std::int64_t(s.leak_probs.size()) == n && std::int64_t(s.leak_labels.size()) == n),
           "mean_loss: {} leak probabilities and {} leak labels for {} segments", s.leak_probs.size(),
           s.leak_labels.size(), n);
  double loss = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = std::size_t(i);
    const double p = std::max(double(s.class_probs[std::size_t(i * C + s.labels[k])]), 1e-12);
    loss += class_loss_weight * -std::log(p);
    if (!s.has_leak) continue;
    const double q = std::clamp(double(s.leak_probs[k]), 1e-12, 1.0 - 1e-12);
    const double y = s.leak_labels[k] ? 1.0 : 0.0;
    loss += leak_loss_weight * -(y * std::log(q) + (1 - y) * std::log(1 - q));
  }
  return n ? loss / double(n) : kNaN;
}

FileVote vote_files(const Tensor& class_in, const Tensor& leak_in, std::int64_t files, std::int64_t longs,
                    std::int64_t shorts, double threshold, bool logits, cudaStream_t stream) {
  const auto t0 = std::chrono::steady_clock::now();
  const Device dev = class_in.device();
  MF_CHECK(class_in.ndim() == 2, "vote_files: class outputs must be [segments, classes], found {}", class_in.str());
  const std::int64_t C = class_in.size(1);
  const bool has_leak = leak_in.defined();
  Tensor probs = Tensor::empty({files, C}, DType::f32, dev, Layout::plain, stream);
  Tensor klass = Tensor::empty({files}, DType::i32, dev, Layout::plain, stream);
  Tensor leak_prob, leak;  // undefined without the leak head
  if (has_leak) {
    leak_prob = Tensor::empty({files}, DType::f32, dev, Layout::plain, stream);
    leak = Tensor::empty({files}, DType::i32, dev, Layout::plain, stream);
  }
  ops::file_vote(class_in, files, longs, shorts, float(threshold), logits, probs, klass, has_leak ? &leak_in : nullptr,
                 has_leak ? &leak_prob : nullptr, has_leak ? &leak : nullptr, stream);
  FileVote v;
  v.files = files;
  v.classes = int(C);
  v.has_leak = has_leak;
  auto host = [&](const Tensor& t) { return dev.is_cuda() ? t.to(Device::cpu(), stream) : t; };
  const Tensor hp = host(probs), hk = host(klass);
  const Tensor hlp = has_leak ? host(leak_prob) : Tensor(), hl = has_leak ? host(leak) : Tensor();
  if (dev.is_cuda()) MF_CUDA_CHECK(cudaStreamSynchronize(stream));
  v.probs.assign(hp.data<float>(), hp.data<float>() + files * C);
  v.klass.assign(hk.data<std::int32_t>(), hk.data<std::int32_t>() + files);
  if (has_leak) {
    v.leak_prob.assign(hlp.data<float>(), hlp.data<float>() + files);
    v.leak.assign(hl.data<std::int32_t>(), hl.data<std::int32_t>() + files);
  }
  v.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return v;
}

ClassMetrics file_metrics(const FileVote& v, std::span<const std::int32_t> file_labels,
                          std::span<const std::int32_t> file_leak_labels, double threshold) {
  if (!v.has_leak) return compute_metrics(file_labels, v.klass, v.classes);
  return compute_metrics(file_labels, v.klass, file_leak_labels, v.leak_prob, v.leak, v.classes, threshold);
}

nlohmann::json to_json(const EvalResult& r, const std::vector<std::string>& class_names) {
  nlohmann::json j;
  if (r.has_verification) {
    const VerificationMetrics& v = r.verification;
    j["verification"] = {{"eer", num(v.eer)},         {"eer_threshold", num(v.eer_threshold)},
                         {"min_dcf_0.05", num(v.min_dcf_05)}, {"min_dcf_0.01", num(v.min_dcf_01)},
                         {"files", v.files},          {"trials", v.trials},
                         {"targets", v.targets},      {"nontargets", v.nontargets}};
  }
  j["segments_per_s"] = num(r.segments_per_s);
  if (!r.has_class) return j;
  j["loss"] = num(r.loss);
  j["segment"] = to_json(r.segment, class_names);
  if (r.has_files) {
    j["file"] = to_json(r.file, class_names);
    j["files_per_s"] = num(r.files_per_s);
  }
  return j;
}

double metric_value(const EvalResult& r, const std::string& name) {
  std::string n = name;
  if (n.rfind("val.", 0) == 0) n = n.substr(4);
  if (n == "eer" || n == "min_dcf") {
    MF_CHECK(r.has_verification, "metric '{}' is of an embedding model (a metric loss); this evaluation has none",
             name);
    return n == "eer" ? r.verification.eer : r.verification.min_dcf_05;
  }
  MF_CHECK(r.has_class, "metric '{}' needs the class head, and this model is an embedding model: use val.eer or "
           "val.min_dcf", name);
  if (n == "loss") return r.loss;
  const bool file = n.rfind("file.", 0) == 0;
  MF_CHECK(file || n.rfind("segment.", 0) == 0, "unknown metric '{}'", name);
  const ClassMetrics& m = file && r.has_files ? r.file : r.segment;
  const std::string leaf = n.substr(n.find('.') + 1);
  if (leaf == "accuracy") return m.accuracy;
  if (leaf == "balanced_accuracy") return m.balanced_accuracy;
  if (leaf == "macro_f1") return m.macro_f1;
  if (leaf == "leak_auc") {
    MF_CHECK(m.has_leak, "metric '{}' is of the leak head, and this model has none (model.heads = class): "
             "choose one of {}", name, fmt::join(metric_names(false), ", "));
    return m.leak_auc;
  }
  MF_THROW("unknown metric '{}'", name);
}

}  // namespace mf::model
