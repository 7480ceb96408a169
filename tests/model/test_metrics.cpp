// Evaluation metrics against hand-computed cases; file-level voting rules
// (majority, a vote tie, a leak tie) through the dispatch point on the CPU.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "engine/parallel.hpp"
#include "engine/tensor.hpp"
#include "model/metrics.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using namespace mf::model;

TEST_CASE("ROC-AUC counts tied scores one half") {
  // Pairs (pos, neg): (.35,.1)=1 (.35,.4)=0 (.8,.1)=1 (.8,.4)=1 (.4,.1)=1 (.4,.4)=1/2 -> 4.5/6.
  const std::vector<float> s{0.1f, 0.4f, 0.35f, 0.8f, 0.4f};
  const std::vector<std::int32_t> y{0, 0, 1, 1, 1};
  CHECK(roc_auc(s, y) == doctest::Approx(0.75).epsilon(1e-12));
  // All scores equal: 0.5.
  const std::vector<float> same(6, 0.3f);
  const std::vector<std::int32_t> y2{0, 1, 0, 1, 1, 0};
  CHECK(roc_auc(same, y2) == 0.5);
  // Perfect and inverted rankings.
  const std::vector<float> s3{0.1f, 0.2f, 0.8f, 0.9f};
  CHECK(roc_auc(s3, std::vector<std::int32_t>{0, 0, 1, 1}) == 1.0);
  CHECK(roc_auc(s3, std::vector<std::int32_t>{1, 1, 0, 0}) == 0.0);
  // One label only: undefined.
  CHECK(std::isnan(roc_auc(s3, std::vector<std::int32_t>{1, 1, 1, 1})));
}

TEST_CASE("ROC-AUC of NaN scores (a diverged model) is NaN, not a hang") {
  const std::vector<std::int32_t> y{0, 1, 0, 1};
  CHECK(std::isnan(roc_auc(std::vector<float>{0.1f, NAN, 0.3f, 0.9f}, y)));
  CHECK(std::isnan(roc_auc(std::vector<float>(4, NAN), y)));
}

TEST_CASE("class metrics match a hand-computed 3-class case") {
  const std::vector<std::int32_t> t{0, 0, 1, 1, 2, 2}, p{0, 1, 1, 1, 2, 0};
  const std::vector<std::int32_t> leak_y{0, 0, 1, 1, 1, 1}, leak_d{0, 1, 1, 0, 1, 1};
  const std::vector<float> leak_s{0.1f, 0.6f, 0.9f, 0.3f, 0.7f, 0.8f};
  const ClassMetrics m = compute_metrics(t, p, leak_y, leak_s, leak_d, 3, 0.5);
  CHECK(m.confusion == std::vector<std::vector<std::int64_t>>{{1, 1, 0}, {0, 2, 0}, {1, 0, 1}});
  CHECK(m.accuracy == doctest::Approx(4.0 / 6));
  CHECK(m.recall == std::vector<double>{0.5, 1.0, 0.5});
  CHECK(m.precision[0] == doctest::Approx(0.5));
  CHECK(m.precision[1] == doctest::Approx(2.0 / 3));
  CHECK(m.precision[2] == doctest::Approx(1.0));
  CHECK(m.f1[1] == doctest::Approx(0.8));
  CHECK(m.f1[2] == doctest::Approx(2.0 / 3));
  CHECK(m.balanced_accuracy == doctest::Approx(2.0 / 3));
  CHECK(m.macro_f1 == doctest::Approx((0.5 + 0.8 + 2.0 / 3) / 3));
  CHECK(m.support == std::vector<std::int64_t>{2, 2, 2});
  // Leak: negatives {0.1 (no), 0.6 (yes)} -> false alarm 1/2; positives 4, 3 detected.
  CHECK(m.false_alarm_rate == doctest::Approx(0.5));
  CHECK(m.detection_rate == doctest::Approx(0.75));
  CHECK(m.leak_precision == doctest::Approx(0.75));
  // AUC: positives .9 .3 .7 .8 vs negatives .1 .6: 1+1 + 1+0 + 1+1 + 1+1 = 7/8.
  CHECK(m.leak_auc == doctest::Approx(7.0 / 8));
  const auto j = to_json(m, {"normal", "leak_a", "leak_b"});
  CHECK(j["per_class"][1]["class"] == "leak_a");
  CHECK(j["confusion_matrix"][2][0] == 1);
  CHECK(j["leak"]["false_alarm_rate"] == doctest::Approx(0.5));
}

TEST_CASE("a class never predicted has precision 0; absent classes stay out of the averages") {
  const std::vector<std::int32_t> t{0, 0, 1, 1}, p{0, 0, 0, 0}, z(4, 0);
  const std::vector<float> s(4, 0.f);
  const ClassMetrics m = compute_metrics(t, p, z, s, z, 4, 0.5);  // classes 2, 3 never occur
  CHECK(m.precision[1] == 0.0);
  CHECK(m.recall[1] == 0.0);
  CHECK(m.balanced_accuracy == doctest::Approx(0.5));              // mean over classes 0, 1
  CHECK(m.macro_f1 == doctest::Approx((2 * 0.5 / 1.5 + 0) / 2));  // F1 of class 0 is 2/3
  CHECK(std::isnan(m.leak_auc));
  CHECK(to_json(m)["leak"]["roc_auc"].is_null());
  CHECK(std::isnan(m.detection_rate));
}

namespace {
// F=3 files, L=4 long segments, S=2 short segments (both shorts equal, so the
// means are exact), C=3 classes.
struct VoteCase {
  std::vector<float> cls, leak;
};
VoteCase vote_case() {
  const float long_probs[3][4][3] = {
      {{0.6f, 0.25f, 0.15f}, {0.6f, 0.25f, 0.15f}, {0.1f, 0.8f, 0.1f}, {0.2f, 0.2f, 0.6f}},  // votes 0,0,1,2 -> 0
      {{0.1f, 0.5f, 0.4f}, {0.1f, 0.5f, 0.4f}, {0.1f, 0.2f, 0.7f}, {0.1f, 0.2f, 0.7f}},      // 1,1,2,2: tie -> 2
      {{0.4f, 0.4f, 0.2f}, {0.4f, 0.4f, 0.2f}, {0.25f, 0.5f, 0.25f}, {0.4f, 0.4f, 0.2f}}};   // 0,0,1,0 -> 0
  const float long_leak[3][4] = {{0.75f, 0.75f, 0.25f, 0.125f},  // 2 of 4, mean .46875 -> no leak
                                 {0.75f, 0.5f, 0.25f, 0.5f},     // 3 of 4 -> leak
                                 {1.0f, 0.875f, 0.0f, 0.25f}};   // 2 of 4, mean .53125 -> leak
  VoteCase v;
  for (int f = 0; f < 3; ++f)
    for (int l = 0; l < 4; ++l)
      for (int s = 0; s < 2; ++s) {
        for (int c = 0; c < 3; ++c) v.cls.push_back(long_probs[f][l][c]);
        v.leak.push_back(long_leak[f][l]);
      }
  return v;
}
}  // namespace

TEST_CASE("file vote: majority, a class tie broken by mean probability, leak ties by mean leak probability") {
  const VoteCase vc = vote_case();
  const Tensor cls = Tensor::from_floats(vc.cls, {24, 3});
  const Tensor leak = Tensor::from_floats(vc.leak, {24});
  const FileVote v = vote_files(cls, leak, 3, 4, 2, 0.5, false);
  CHECK(v.klass == std::vector<std::int32_t>{0, 2, 0});
  CHECK(v.leak == std::vector<std::int32_t>{0, 1, 1});
  CHECK(v.leak_prob[0] == 0.46875f);
  CHECK(v.leak_prob[2] == 0.53125f);
  CHECK(v.probs[1 * 3 + 2] == doctest::Approx(0.55f));
  CHECK(v.probs[1 * 3 + 1] == doctest::Approx(0.35f));
  // File metrics from the vote.
  const std::vector<std::int32_t> fl{0, 2, 1}, fleak{0, 1, 1};
  const ClassMetrics m = file_metrics(v, fl, fleak, 0.5);
  CHECK(m.accuracy == doctest::Approx(2.0 / 3));
  CHECK(m.detection_rate == 1.0);
  CHECK(m.false_alarm_rate == 0.0);
  // A lower threshold flips file 0 (2 of 4 at .5 -> with .2: all four vote leak).
  CHECK(vote_files(cls, leak, 3, 4, 2, 0.2, false).leak[0] == 1);
}

TEST_CASE("file vote from logits equals the vote from host-computed probabilities") {
  const std::int64_t F = 37, L = 5, S = 3, C = 4, N = F * L * S;
  auto logits = testing::random_floats(std::size_t(N * C), 11, -3.f, 3.f);
  auto leak_logits = testing::random_floats(std::size_t(N), 12, -4.f, 4.f);
  std::vector<float> probs(logits.size()), leak(leak_logits.size());
  for (std::int64_t i = 0; i < N; ++i) {
    float mx = logits[std::size_t(i * C)];
    for (std::int64_t c = 1; c < C; ++c) mx = std::max(mx, logits[std::size_t(i * C + c)]);
    float z = 0;
    for (std::int64_t c = 0; c < C; ++c) z += std::exp(logits[std::size_t(i * C + c)] - mx);
    for (std::int64_t c = 0; c < C; ++c) probs[std::size_t(i * C + c)] = std::exp(logits[std::size_t(i * C + c)] - mx) / z;
    leak[std::size_t(i)] = 1.f / (1.f + std::exp(-leak_logits[std::size_t(i)]));
  }
  const FileVote a = vote_files(Tensor::from_floats(logits, {N, C}), Tensor::from_floats(leak_logits, {N}), F, L, S,
                                0.5, true);
  const FileVote b = vote_files(Tensor::from_floats(probs, {N, C}), Tensor::from_floats(leak, {N}), F, L, S, 0.5, false);
  CHECK(a.klass == b.klass);
  CHECK(a.leak == b.leak);
  CHECK(testing::rel_l2(a.probs, b.probs) < 1e-6);
}

TEST_CASE("file vote against a naive reference on random data, for any thread count") {
  const std::int64_t F = 301, L = 3, S = 4, C = 5, N = F * L * S;
  auto p = testing::random_floats(std::size_t(N * C), 21, 0.f, 1.f);
  // Coarse values make ties frequent.
  for (float& x : p) x = std::round(x * 4.f) / 4.f;
  auto q = testing::random_floats(std::size_t(N), 22, 0.f, 1.f);
  for (float& x : q) x = std::round(x * 4.f) / 4.f;
  const Tensor cls = Tensor::from_floats(p, {N, C}), leak = Tensor::from_floats(q, {N});
  set_cpu_threads(1);
  const FileVote one = vote_files(cls, leak, F, L, S, 0.5, false);
  set_cpu_threads(0);
  const FileVote all = vote_files(cls, leak, F, L, S, 0.5, false);
  CHECK(one.probs == all.probs);
  CHECK(one.klass == all.klass);
  for (std::int64_t f = 0; f < F; ++f) {
    std::vector<double> mean(C, 0);
    std::vector<int> votes(C, 0);
    double leak_mean = 0;
    int leak_votes = 0;
    for (std::int64_t l = 0; l < L; ++l) {
      std::vector<double> lm(C, 0);
      double ql = 0;
      for (std::int64_t s = 0; s < S; ++s) {
        const std::int64_t row = (f * L + l) * S + s;
        for (std::int64_t c = 0; c < C; ++c) lm[std::size_t(c)] += p[std::size_t(row * C + c)] / double(S);
        ql += q[std::size_t(row)] / double(S);
      }
      ++votes[std::size_t(std::max_element(lm.begin(), lm.end()) - lm.begin())];
      for (std::int64_t c = 0; c < C; ++c) mean[std::size_t(c)] += lm[std::size_t(c)] / double(L);
      leak_mean += ql / double(L);
      leak_votes += ql >= 0.5;
    }
    int want = 0;
    for (int c = 1; c < C; ++c)
      if (votes[std::size_t(c)] > votes[std::size_t(want)] ||
          (votes[std::size_t(c)] == votes[std::size_t(want)] && mean[std::size_t(c)] > mean[std::size_t(want)] + 1e-9))
        want = c;
    const int want_leak = 2 * leak_votes > L ? 1 : (2 * leak_votes < L ? 0 : (leak_mean >= 0.5 - 1e-9 ? 1 : 0));
    CHECK_MESSAGE(all.klass[std::size_t(f)] == want, "file ", f);
    CHECK_MESSAGE(all.leak[std::size_t(f)] == want_leak, "file ", f);
  }
}

TEST_CASE("file_vote rejects mismatched shapes with the op's name") {
  const Tensor cls = Tensor::zeros({10, 3}, DType::f32), leak = Tensor::zeros({10}, DType::f32);
  CHECK_THROWS_WITH_AS(vote_files(cls, leak, 3, 2, 2, 0.5, false), doctest::Contains("file_vote"), Error);
}

TEST_CASE("metric_value reads named metrics, file level falling back to segments") {
  EvalResult r;
  r.loss = 0.25;
  r.segment.macro_f1 = 0.5;
  r.file.macro_f1 = 0.75;
  CHECK(metric_value(r, "val.loss") == 0.25);
  CHECK(metric_value(r, "val.file.macro_f1") == 0.5);  // no files: the segment value
  r.has_files = true;
  CHECK(metric_value(r, "val.file.macro_f1") == 0.75);
  CHECK(metric_value(r, "val.segment.macro_f1") == 0.5);
}
