// Speaker verification metrics, AS-norm and trial lists: the contracts are in
// verification.hpp (decision rule, ties, EER interpolation, minDCF, formats).
#include "model/verification.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <istream>
#include <limits>
#include <numeric>
#include <unordered_set>
#include <utility>

#include "engine/atomic_file.hpp"
#include "engine/counter_rng.hpp"
#include "engine/error.hpp"

namespace mf::model {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

template <class T>
RocCurve roc_curve_impl(std::span<const T> scores, std::span<const std::int32_t> labels) {
  MF_CHECK(scores.size() == labels.size(), "verification: {} scores but {} labels", scores.size(), labels.size());
  std::vector<std::pair<double, std::int32_t>> sorted(scores.size());
  std::int64_t targets = 0;
  for (std::size_t i = 0; i < scores.size(); ++i) {
    MF_CHECK(labels[i] == 0 || labels[i] == 1, "verification: trial {} has label {}; expected 1 (target) or 0",
             i, labels[i]);
    MF_CHECK(std::isfinite(double(scores[i])), "verification: trial {} has the score {}; scores must be finite", i,
             double(scores[i]));
    sorted[i] = {double(scores[i]), labels[i]};
    targets += labels[i];
  }
  const std::int64_t nontargets = std::int64_t(scores.size()) - targets;
  MF_CHECK(targets > 0 && nontargets > 0,
           "verification: the error rates need both kinds of trials; found {} targets and {} non-targets", targets,
           nontargets);
  // Only the score order matters; within a tie group the label order is irrelevant.
  std::sort(sorted.begin(), sorted.end());
  RocCurve roc;
  std::int64_t t_below = 0, n_below = 0;  // targets / non-targets with score < the current value
  for (std::size_t p = 0; p < sorted.size();) {
    const double u = sorted[p].first;
    roc.threshold.push_back(u);
    roc.miss.push_back(double(t_below) / double(targets));
    roc.fa.push_back(double(nontargets - n_below) / double(nontargets));
    for (; p < sorted.size() && sorted[p].first == u; ++p) (sorted[p].second == 1 ? t_below : n_below) += 1;
  }
  roc.threshold.push_back(kInf);
  roc.miss.push_back(1.0);
  roc.fa.push_back(0.0);
  return roc;
}

template <class T>
ErrorRates error_rates_impl(std::span<const T> scores, std::span<const std::int32_t> labels,
                            const std::vector<double>& p_targets) {
  const RocCurve roc = roc_curve_impl(scores, labels);
  std::int64_t targets = 0;
  for (const std::int32_t y : labels) targets += y;
  return error_rates(roc, targets, std::int64_t(labels.size()) - targets, p_targets);
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r' || c == '\n'; }

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t p = 0;
  while (p < line.size()) {
    while (p < line.size() && is_space(line[p])) ++p;
    const std::size_t start = p;
    while (p < line.size() && !is_space(line[p])) ++p;
    if (p > start) out.push_back(line.substr(start, p - start));
  }
  return out;
}

std::string shown(std::string_view text) {
  constexpr std::size_t kMax = 200;
  return text.size() <= kMax ? fmt::format("'{}'", text) : fmt::format("'{}...'", text.substr(0, kMax));
}

// Uniform in [0, m) from 64 random bits (m < 2^53).
std::int64_t below(std::uint64_t bits, std::int64_t m) {
  return std::min(std::int64_t(unit_double(bits) * double(m)), m - 1);
}

// The files grouped by class: order[] sorted by (label, index), and for each
// file its class's range [lo, hi) in order[] and its own position there.
struct ClassGroups {
  std::vector<std::int64_t> order, lo, hi, pos;
  std::int64_t classes = 0;
};

ClassGroups group_classes(std::span<const std::int32_t> labels) {
  const std::int64_t n = std::int64_t(labels.size());
  ClassGroups g;
  g.order.resize(std::size_t(n));
  std::iota(g.order.begin(), g.order.end(), std::int64_t{0});
  std::stable_sort(g.order.begin(), g.order.end(),
                   [&](std::int64_t x, std::int64_t y) { return labels[std::size_t(x)] < labels[std::size_t(y)]; });
  g.lo.resize(std::size_t(n));
  g.hi.resize(std::size_t(n));
  g.pos.resize(std::size_t(n));
  for (std::int64_t s = 0; s < n;) {
    std::int64_t e = s;
    const std::int32_t c = labels[std::size_t(g.order[std::size_t(s)])];
    while (e < n && labels[std::size_t(g.order[std::size_t(e)])] == c) ++e;
    for (std::int64_t q = s; q < e; ++q) {
      const std::size_t f = std::size_t(g.order[std::size_t(q)]);
      g.lo[f] = s;
      g.hi[f] = e;
      g.pos[f] = q;
    }
    ++g.classes;
    s = e;
  }
  return g;
}

// Draws partners for file i without replacement from m candidates (a sparse
// Fisher-Yates shuffle of [0, m) driven by one splitmix64 stream), maps each
// draw to a file with `partner`, and keeps it when the unordered pair is new,
// until `want` are kept or the candidates run out.
template <class Partner>
void draw_partners(std::int64_t i, int kind, std::int64_t m, std::int64_t want, std::uint64_t seed,
                   std::int64_t n, Partner partner, std::unordered_set<std::uint64_t>& used,
                   std::vector<Trial>& out) {
  std::uint64_t state = splitmix64_hash(seed ^ splitmix64_hash(std::uint64_t(i) * 2 + std::uint64_t(kind)));
  std::unordered_map<std::int64_t, std::int64_t> moved;  // the shuffled array's entries that differ from identity
  auto at = [&](std::int64_t k) {
    const auto it = moved.find(k);
    return it == moved.end() ? k : it->second;
  };
  std::int64_t kept = 0;
  for (std::int64_t s = 0; s < m && kept < want; ++s) {
    const std::int64_t j = s + below(splitmix64_next(state), m - s);
    const std::int64_t drawn = at(j);
    moved[j] = at(s);
    const std::int64_t b = partner(drawn);
    const std::uint64_t key = std::uint64_t(std::min(i, b)) * std::uint64_t(n) + std::uint64_t(std::max(i, b));
    if (!used.insert(key).second) continue;
    out.push_back({i, b, kind == 0 ? 1 : 0});
    ++kept;
  }
}

}  // namespace

RocCurve roc_curve(std::span<const float> scores, std::span<const std::int32_t> labels) {
  return roc_curve_impl(scores, labels);
}
RocCurve roc_curve(std::span<const double> scores, std::span<const std::int32_t> labels) {
  return roc_curve_impl(scores, labels);
}
ErrorRates error_rates(std::span<const float> scores, std::span<const std::int32_t> labels,
                       const std::vector<double>& p_targets) {
  return error_rates_impl(scores, labels, p_targets);
}
ErrorRates error_rates(std::span<const double> scores, std::span<const std::int32_t> labels,
                       const std::vector<double>& p_targets) {
  return error_rates_impl(scores, labels, p_targets);
}

ErrorRates error_rates(const RocCurve& roc, std::int64_t targets, std::int64_t nontargets,
                       const std::vector<double>& p_targets) {
  const std::size_t n = roc.threshold.size();
  MF_CHECK(n >= 2 && roc.miss.size() == n && roc.fa.size() == n,
           "verification: a ROC needs at least 2 points and as many miss/fa rates as thresholds; found {}, {}, {}", n,
           roc.miss.size(), roc.fa.size());
  for (const double p : p_targets)
    MF_CHECK(p > 0 && p < 1, "verification: P_target must lie in (0, 1); found {}", p);
  ErrorRates r;
  r.targets = targets;
  r.nontargets = nontargets;
  // EER: the first point k with P_miss >= P_fa, interpolated with the point before.
  std::size_t k = 0;
  while (k < n && roc.miss[k] - roc.fa[k] < 0) ++k;
  MF_CHECK(k > 0 && k < n, "verification: a ROC must start at P_miss < P_fa and end at P_miss >= P_fa");
  const double d0 = roc.miss[k - 1] - roc.fa[k - 1], d1 = roc.miss[k] - roc.fa[k];
  const double t = d0 / (d0 - d1);
  r.eer = roc.miss[k - 1] + t * (roc.miss[k] - roc.miss[k - 1]);
  r.eer_threshold = t > 0.5 ? roc.threshold[k] : roc.threshold[k - 1];
  for (const double p : p_targets) {
    MinDcf m{p, kInf, kInf};
    for (std::size_t j = 0; j < n; ++j) {
      const double c = roc.miss[j] * p + roc.fa[j] * (1 - p);
      if (c < m.value) m = {p, c, roc.threshold[j]};
    }
    m.value /= std::min(p, 1 - p);
    r.min_dcf.push_back(m);
  }
  return r;
}

CohortStats cohort_stats(std::span<const float> cohort_scores, std::int64_t top_n) {
  const std::int64_t m = std::int64_t(cohort_scores.size());
  MF_CHECK(top_n >= 2 && top_n <= m, "AS-norm: the top-N size must lie in [2, {}] (the cohort's size); found {}", m,
           top_n);
  for (std::int64_t c = 0; c < m; ++c)
    MF_CHECK(!std::isnan(cohort_scores[std::size_t(c)]), "AS-norm: cohort score {} is NaN", c);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(m));
  std::iota(idx.begin(), idx.end(), std::int64_t{0});
  std::partial_sort(idx.begin(), idx.begin() + top_n, idx.end(), [&](std::int64_t x, std::int64_t y) {
    const float sx = cohort_scores[std::size_t(x)], sy = cohort_scores[std::size_t(y)];
    return sx > sy || (sx == sy && x < y);
  });
  double sum = 0;
  for (std::int64_t q = 0; q < top_n; ++q) sum += double(cohort_scores[std::size_t(idx[std::size_t(q)])]);
  const double mean = sum / double(top_n);
  double ss = 0;
  for (std::int64_t q = 0; q < top_n; ++q) {
    const double d = double(cohort_scores[std::size_t(idx[std::size_t(q)])]) - mean;
    ss += d * d;
  }
  const double sd = std::sqrt(ss / double(top_n));
  MF_CHECK(sd > 0, "AS-norm: the top {} cohort scores are all equal ({}); their standard deviation is 0", top_n, mean);
  return {mean, sd};
}

std::vector<CohortStats> cohort_stats_rows(std::span<const float> scores, std::int64_t rows, std::int64_t cols,
                                           std::int64_t top_n) {
  MF_CHECK(rows >= 0 && cols >= 0 && std::uint64_t(rows) * std::uint64_t(cols) == scores.size(),
           "AS-norm: a [{}, {}] cohort score matrix needs {} scores; found {}", rows, cols, rows * cols, scores.size());
  std::vector<CohortStats> out(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    try {
      out[std::size_t(r)] = cohort_stats(scores.subspan(std::size_t(r * cols), std::size_t(cols)), top_n);
    } catch (const mf::Error& e) {
      MF_THROW("{} (file {})", e.message(), r);
    }
  }
  return out;
}

double as_norm(double score, const CohortStats& a, const CohortStats& b) {
  return 0.5 * ((score - a.mean) / a.std + (score - b.mean) / b.std);
}

std::vector<double> as_norm(std::span<const float> scores, std::span<const Trial> trials,
                            std::span<const CohortStats> stats) {
  MF_CHECK(scores.size() == trials.size(), "AS-norm: {} scores for {} trials", scores.size(), trials.size());
  const std::int64_t files = std::int64_t(stats.size());
  std::vector<double> out(scores.size());
  for (std::size_t t = 0; t < trials.size(); ++t) {
    const Trial& tr = trials[t];
    MF_CHECK(tr.a >= 0 && tr.a < files && tr.b >= 0 && tr.b < files,
             "AS-norm: trial {} names files {} and {}; cohort statistics exist for files 0..{}", t, tr.a, tr.b,
             files - 1);
    out[t] = as_norm(double(scores[t]), stats[std::size_t(tr.a)], stats[std::size_t(tr.b)]);
  }
  return out;
}

NameIndex index_names(std::span<const std::string> names) {
  NameIndex index;
  index.reserve(names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    MF_CHECK(!names[i].empty(), "entry {} is an empty name: trial lists name each file", i);
    const auto [it, fresh] = index.emplace(names[i], std::int64_t(i));
    MF_CHECK(fresh, "entries {} and {} are the same name {}: trial lists need unique names", it->second, i,
             shown(names[i]));
  }
  return index;
}

std::vector<Trial> parse_trials(std::istream& in, const NameIndex& names, std::string_view source) {
  std::vector<Trial> trials;
  std::string line;
  for (std::int64_t number = 1; std::getline(in, line); ++number) {
    const std::vector<std::string_view> f = split_fields(line);
    if (f.empty()) continue;
    MF_CHECK(f.size() == 3, "{}:{}: expected 3 fields 'LABEL NAME_A NAME_B', found {}: {}", source, number, f.size(),
             shown(line));
    MF_CHECK(f[0] == "0" || f[0] == "1", "{}:{}: the label must be 1 (same speaker) or 0, found {}", source, number,
             shown(f[0]));
    Trial t;
    t.label = f[0] == "1" ? 1 : 0;
    for (int side = 0; side < 2; ++side) {
      const auto it = names.find(std::string(f[std::size_t(side) + 1]));
      MF_CHECK(it != names.end(), "{}:{}: the file {} is not in the data ({} files)", source, number,
               shown(f[std::size_t(side) + 1]), names.size());
      (side == 0 ? t.a : t.b) = it->second;
    }
    trials.push_back(t);
  }
  MF_CHECK(!in.bad(), "{}: a read error after {} trials", source, trials.size());
  return trials;
}

std::vector<Trial> parse_trials(const std::filesystem::path& path, const NameIndex& names) {
  std::ifstream in(path);
  MF_CHECK(in.is_open(), "trials: cannot open {}", path.string());
  return parse_trials(in, names, path.string());
}

std::vector<std::int32_t> trial_labels(std::span<const Trial> trials) {
  std::vector<std::int32_t> y(trials.size());
  for (std::size_t t = 0; t < trials.size(); ++t) y[t] = trials[t].label;
  return y;
}

std::vector<Trial> make_trials(std::span<const std::int32_t> labels, std::int64_t per_file, std::uint64_t seed) {
  MF_CHECK(per_file >= 1, "trials: per_file must be at least 1; found {}", per_file);
  const std::int64_t n = std::int64_t(labels.size());
  for (std::int64_t i = 0; i < n; ++i)
    MF_CHECK(labels[std::size_t(i)] >= 0, "trials: file {} has the negative class {}", i, labels[std::size_t(i)]);
  const ClassGroups g = group_classes(labels);
  MF_CHECK(g.classes >= 2, "trials: non-target trials need at least two classes; found {}", g.classes);
  std::unordered_set<std::uint64_t> used;
  std::vector<Trial> out;
  out.reserve(std::size_t(n * per_file * 2));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::size_t f = std::size_t(i);
    const std::int64_t lo = g.lo[f], hi = g.hi[f], self = g.pos[f];
    // Targets: the other members of the class (order[lo, hi) without position self).
    draw_partners(i, 0, hi - lo - 1, per_file, seed, n,
                  [&](std::int64_t r) { return g.order[std::size_t(lo + (lo + r < self ? r : r + 1))]; }, used, out);
    // Non-targets: every file outside order[lo, hi).
    draw_partners(i, 1, n - (hi - lo), per_file, seed, n,
                  [&](std::int64_t r) { return g.order[std::size_t(r < lo ? r : r + (hi - lo))]; }, used, out);
  }
  return out;
}

void write_trials(const std::filesystem::path& path, std::span<const Trial> trials,
                  std::span<const std::string> names) {
  const std::int64_t files = std::int64_t(names.size());
  for (std::size_t i = 0; i < names.size(); ++i)
    MF_CHECK(!names[i].empty() && std::none_of(names[i].begin(), names[i].end(), is_space),
             "trials: file {} has the name {}, which is empty or contains whitespace: a trial list could not be "
             "read back",
             i, shown(names[i]));
  std::string text;
  for (std::size_t t = 0; t < trials.size(); ++t) {
    const Trial& tr = trials[t];
    MF_CHECK(tr.a >= 0 && tr.a < files && tr.b >= 0 && tr.b < files && (tr.label == 0 || tr.label == 1),
             "trials: trial {} is ({}, {}, label {}); files are 0..{} and labels 0 or 1", t, tr.a, tr.b, tr.label,
             files - 1);
    text += fmt::format("{} {} {}\n", tr.label, names[std::size_t(tr.a)], names[std::size_t(tr.b)]);
  }
  write_text_atomic(path, text);
}

}  // namespace mf::model
