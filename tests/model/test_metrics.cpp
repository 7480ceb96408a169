// Evaluation metrics against hand-computed cases. The file-level vote and the
// file metrics read from it: tests/kernels/test_file_vote.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

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
