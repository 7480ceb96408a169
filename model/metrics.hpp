// Evaluation metrics for LeakCNN: the class head (C classes) and, when the
// model has one (model.heads = class+leak, model/heads.hpp), the leak head (one
// probability, a decision at a threshold), at segment level and at file level
// (kernels/file_vote.hpp aggregates segments into files on the device). A
// model without the leak head has no leak metric anywhere: has_leak is false,
// the leak fields are not computed and the JSON has no "leak" object.
//
// Conventions (those of scikit-learn, so numbers can be checked there):
// - confusion[t][p] counts samples of true class t predicted as p;
// - precision of a class never predicted, and recall of a class never present,
//   are 0; macro F1 averages F1 over the classes present in the labels or the
//   predictions; balanced accuracy averages recall over the classes present in
//   the labels;
// - ROC-AUC of the leak probability is the Mann-Whitney statistic with tied
//   scores counted one half (midranks); NaN when only one leak label occurs
//   or a score is NaN;
// - false-alarm rate: share of non-leak samples decided "leak" (NaN without
//   non-leak samples); detection rate: share of leak samples decided "leak".
// NaN is written as null in JSON.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "engine/tensor.hpp"

namespace mf::model {

struct ClassMetrics {
  std::int64_t count = 0;
  int classes = 0;
  double accuracy = 0, balanced_accuracy = 0, macro_f1 = 0;
  std::vector<double> precision, recall, f1;
  std::vector<std::int64_t> support;
  std::vector<std::vector<std::int64_t>> confusion;  // [true][pred]
  // Leak head (the fields below are meaningful only when has_leak).
  bool has_leak = true;
  double threshold = 0.5;
  double leak_auc = 0, false_alarm_rate = 0, detection_rate = 0, leak_precision = 0, leak_accuracy = 0;
};

// ROC-AUC with midranks for ties. labels are 0/1.
double roc_auc(std::span<const float> scores, std::span<const std::int32_t> labels);

// Metrics from predictions. leak_scores are probabilities; leak_decisions 0/1.
ClassMetrics compute_metrics(std::span<const std::int32_t> labels, std::span<const std::int32_t> predictions,
                             std::span<const std::int32_t> leak_labels, std::span<const float> leak_scores,
                             std::span<const std::int32_t> leak_decisions, int classes, double threshold);
// The class metrics alone (a model without the leak head): has_leak false.
ClassMetrics compute_metrics(std::span<const std::int32_t> labels, std::span<const std::int32_t> predictions,
                             int classes);

// {count, accuracy, balanced_accuracy, macro_f1, per_class, confusion_matrix}
// plus, with has_leak, "leak": {threshold, roc_auc, false_alarm_rate,
// detection_rate, precision, accuracy}.
nlohmann::json to_json(const ClassMetrics& m, const std::vector<std::string>& class_names = {});

// Per-segment outputs of an evaluation pass, on the host, in dataset order.
struct SegmentOutputs {
  int classes = 0;
  bool has_leak = true;            // false: leak_probs and leak_labels are empty (no leak head)
  std::vector<float> class_probs;  // [N, C] softmax probabilities
  std::vector<float> leak_probs;   // [N]
  std::vector<std::int32_t> labels, leak_labels;  // [N]
  std::int64_t size() const { return std::int64_t(labels.size()); }
};

// Argmax (lowest class on a tie) and leak >= threshold, per segment.
ClassMetrics segment_metrics(const SegmentOutputs& s, double threshold);

// The mean loss of the segments as training weighs it, without label
// smoothing or class weights: class_loss_weight * CE + leak_loss_weight * BCE
// (probabilities clamped to [1e-12, 1 - 1e-12]); CE alone without the leak
// head. NaN for no segments.
double mean_loss(const SegmentOutputs& s, double class_loss_weight, double leak_loss_weight);

// File-level results of the vote (host copies).
struct FileVote {
  std::int64_t files = 0;
  int classes = 0;
  bool has_leak = true;              // false: leak_prob and leak are empty (no leak head)
  std::vector<float> probs;          // [F, C]
  std::vector<std::int32_t> klass;   // [F]
  std::vector<float> leak_prob;      // [F]
  std::vector<std::int32_t> leak;    // [F]
  double seconds = 0;                // time of the vote itself (launch to results on the host)
};

// Votes over a file-structured [F, L, S] set of segment outputs held in
// tensors on any device: one ops::file_vote launch for all files, then one
// copy of the per-file results to the host. class_in [F*L*S, C], leak_in
// [F*L*S] f32, probabilities or (logits=true) logits. leak_in undefined (a
// model without the leak head): the class vote alone, has_leak false.
FileVote vote_files(const Tensor& class_in, const Tensor& leak_in, std::int64_t files, std::int64_t longs,
                    std::int64_t shorts, double threshold, bool logits, cudaStream_t stream = nullptr);

// Metrics of a vote given each file's label and leak label (not read when the
// vote has no leak: the class metrics alone).
ClassMetrics file_metrics(const FileVote& v, std::span<const std::int32_t> file_labels,
                          std::span<const std::int32_t> file_leak_labels, double threshold);

// Speaker verification's figures (an embedding model: a metric loss without
// a class head): trials drawn from the evaluated set, scored by cosine
// (model/verification.hpp has the definitions).
struct VerificationMetrics {
  std::int64_t files = 0, trials = 0, targets = 0, nontargets = 0;
  double eer = 0, eer_threshold = 0;
  double min_dcf_05 = 0, min_dcf_01 = 0;  // normalised minDCF at P_target 0.05 and 0.01
};

// Everything one evaluation reports.
struct EvalResult {
  // false for an embedding model: no loss, segment or file class metrics,
  // only `verification`.
  bool has_class = true;
  bool has_verification = false;
  VerificationMetrics verification;
  double loss = 0;  // mean loss over segments (NaN when not computed)
  ClassMetrics segment;
  bool has_files = false;
  ClassMetrics file;
  // Throughput of the whole evaluation (read, forward, copies, vote) in wall time.
  double segments_per_s = 0;
  double files_per_s = 0;  // files voted on / the same time (has_files only)
  // Whether the model has the leak head (the segment metrics say so).
  bool has_leak() const { return segment.has_leak; }
};

// {loss, segment, segments_per_s} plus, with files, {file, files_per_s};
// an embedding model: {verification: {eer, eer_threshold, min_dcf_0.05,
// min_dcf_0.01, files, trials, targets, nontargets}, segments_per_s};
// each metrics object as to_json(ClassMetrics): no "leak" key anywhere
// without the leak head.
nlohmann::json to_json(const EvalResult& r, const std::vector<std::string>& class_names = {});

// The value of a named metric ("val.file.macro_f1", see
// model::metric_names(); "val.eer" and "val.min_dcf" (P_target 0.05) of an
// embedding model); falls back from file to segment metrics when the data has
// no files. NaN when undefined. A leak metric of a result without
// the leak head is an error (mf::Error naming the metric and model.heads).
double metric_value(const EvalResult& r, const std::string& name);

}  // namespace mf::model
