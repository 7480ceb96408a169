// Speaker verification on the host: the error rates of a list of scored trials
// (EER, normalised minDCF), adaptive score normalisation (AS-norm) from cohort
// scores, and trial lists (the VoxCeleb text format: parse, make, write).
// Scores are computed elsewhere (cosine scores on the device); everything here
// is O(n log n) host work in double. docs/verification.md states the same
// definitions for users comparing with other toolkits.
//
// Decision rule: a trial is accepted ("same speaker") when score >= threshold.
// Ties: trials with equal scores are always on the same side of a threshold,
// so the ROC has one point per DISTINCT score value u_1 < ... < u_m (the
// threshold u_j accepts every trial with score >= u_j), plus the point of
// threshold +inf (accepts nothing). Point j has
//   P_miss(u_j) = #targets with score < u_j / #targets,
//   P_fa(u_j)   = #non-targets with score >= u_j / #non-targets;
// the first point (u_1) is (P_miss 0, P_fa 1), the last (+inf) is (1, 0).
// These are exactly scikit-learn's roc_curve points (drop_intermediate=False).
//
// EER: the ROC points are joined by straight lines (the piecewise linear curve
// plotting tools draw); the EER is where that curve crosses
// P_miss = P_fa. With d_j = P_miss - P_fa (non-decreasing in j, -1 at the first
// point, +1 at the last), k is the first point with d_k >= 0 and
//   t = d_{k-1} / (d_{k-1} - d_k) in (0, 1],
//   EER = P_miss(k-1) + t * (P_miss(k) - P_miss(k-1))   (= the same for P_fa).
// This is the value of brentq(lambda x: 1 - x - interp1d(fpr, tpr)(x), 0, 1) on
// sklearn's curve. eer_threshold is the threshold of the bracketing point
// nearer the crossing: u_k when t > 1/2 (so an exact crossing, t = 1, gives its
// own threshold), u_{k-1} otherwise; it is always finite. voxceleb_trainer's
// tuneThresholdfromScore reports max(P_fa, P_miss) at the point nearest the
// diagonal instead (no interpolation): at most one ROC step above this EER.
//
// minDCF (C_miss = C_fa = 1), for each P_target in (0, 1):
//   min over all ROC points (both end points included) of
//     (P_miss * P_target + P_fa * (1 - P_target)) / min(P_target, 1 - P_target),
// so it is at most 1; its threshold is the lowest one reaching the minimum,
// +infinity when only "accept nothing" reaches it.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mf::model {

// ---- Error rates ----------------------------------------------------------

// The ROC at the distinct score values, thresholds ascending (see above):
// threshold.size() == miss.size() == fa.size() == distinct scores + 1, the last
// threshold +infinity.
struct RocCurve {
  std::vector<double> threshold, miss, fa;
};

struct MinDcf {
  double p_target = 0;
  double value = 0;      // normalised minimum detection cost, in [0, 1]
  double threshold = 0;  // lowest threshold reaching it; +inf = accept nothing
};

struct ErrorRates {
  std::int64_t targets = 0, nontargets = 0;
  double eer = 0;            // in [0, 1] (not percent)
  double eer_threshold = 0;  // finite
  std::vector<MinDcf> min_dcf;  // one per requested P_target, in the order given
};

// labels: 1 = target (same speaker), 0 = non-target; any other value, a NaN
// score, sizes that differ, no targets or no non-targets are errors naming the
// trial index or the counts. P_target values must lie in (0, 1).
RocCurve roc_curve(std::span<const float> scores, std::span<const std::int32_t> labels);
RocCurve roc_curve(std::span<const double> scores, std::span<const std::int32_t> labels);
ErrorRates error_rates(std::span<const float> scores, std::span<const std::int32_t> labels,
                       const std::vector<double>& p_targets = {0.05, 0.01});
ErrorRates error_rates(std::span<const double> scores, std::span<const std::int32_t> labels,
                       const std::vector<double>& p_targets = {0.05, 0.01});
// The EER and minDCF of a ROC made by roc_curve (the same rules as above).
ErrorRates error_rates(const RocCurve& roc, std::int64_t targets, std::int64_t nontargets,
                       const std::vector<double>& p_targets = {0.05, 0.01});

// ---- Adaptive score normalisation (AS-norm) ---------------------------------
//
// For a file x with cosine scores c_1..c_M against a cohort of M embeddings,
// mean/std are those of its top-N scores (the N largest; population standard
// deviation, divisor N, as numpy.std in the published AS-norm recipes, e.g.
// WeSpeaker's score_norm.py), and a trial (a, b) with raw score s becomes
//   s' = 0.5 * ((s - mean_a) / std_a + (s - mean_b) / std_b).
// Which of several equal scores enter the top N does not change the values; the
// selection is a partial sort by (score descending, index ascending) and the
// sums run in that order, so the result is deterministic.

struct CohortStats {
  double mean = 0, std = 0;
};

// The top-N statistics of one file's cohort scores. Errors: top_n < 2 (one
// score has no spread) or > scores.size(), a NaN score (its cohort index), and
// a zero standard deviation (the top N all equal: the normalisation divides by it).
CohortStats cohort_stats(std::span<const float> cohort_scores, std::int64_t top_n);
// The same for each row of a row-major [rows, cols] score matrix (file x
// cohort); errors name the row.
std::vector<CohortStats> cohort_stats_rows(std::span<const float> scores, std::int64_t rows,
                                           std::int64_t cols, std::int64_t top_n);
double as_norm(double score, const CohortStats& a, const CohortStats& b);

// ---- Trials -----------------------------------------------------------------

// One trial: two file indices in the evaluated data and 1 (same speaker) or 0.
struct Trial {
  std::int64_t a = 0, b = 0;
  std::int32_t label = 0;
  bool operator==(const Trial&) const = default;
};

// Raw scores -> AS-norm scores for a list of trials, `stats` indexed by file.
std::vector<double> as_norm(std::span<const float> scores, std::span<const Trial> trials,
                            std::span<const CohortStats> stats);

// File name -> index, as stored in a dataset's /files (names compared exactly).
using NameIndex = std::unordered_map<std::string, std::int64_t>;
// Errors: an empty name, or a name given twice (both indices named).
NameIndex index_names(std::span<const std::string> names);

// The VoxCeleb trial format: one trial per line, "LABEL NAME_A NAME_B" with
// LABEL 1 (same speaker) or 0, fields separated by whitespace (space, tab, \v,
// \f, \r: Python's str.split()); blank lines are skipped. Any other line (a bad label, a
// missing or extra field) or a name not in `names` is an error naming `source`,
// the line number and what was found.
std::vector<Trial> parse_trials(std::istream& in, const NameIndex& names, std::string_view source = "trials");
std::vector<Trial> parse_trials(const std::filesystem::path& path, const NameIndex& names);
// The labels of the trials, in order (for error_rates).
std::vector<std::int32_t> trial_labels(std::span<const Trial> trials);

// A balanced trial list for a held-out set, `labels[i]` the class (speaker) of
// file i (any non-negative integers). For each file i in order: up to
// `per_file` target trials (i, j) with j another file of i's class, then
// `per_file` non-target trials (i, j) with j of another class; partners are
// drawn without replacement, uniformly, from splitmix64 streams keyed by (seed,
// i, kind) (engine/counter_rng.hpp), so the list depends only on the labels,
// per_file and seed. A pair already in the list in either order is skipped,
// never repeated, and no trial pairs a file with itself: a file gets fewer
// than per_file trials of a kind only when fewer unused partners exist (a class
// with one file has no target trials). Errors: per_file < 1, a negative label,
// fewer than two classes.
std::vector<Trial> make_trials(std::span<const std::int32_t> labels, std::int64_t per_file, std::uint64_t seed);

// Writes trials in the format parse_trials reads ("1 name_a name_b\n"),
// atomically (engine/atomic_file.hpp). Errors: an index outside `names`, a name
// that is empty or contains whitespace (it could not be read back).
void write_trials(const std::filesystem::path& path, std::span<const Trial> trials,
                  std::span<const std::string> names);

}  // namespace mf::model
