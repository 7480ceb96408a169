// Best-checkpoint selection and early stopping (train/early_stopping.hpp): the
// rules on hand-made metric sequences, and resume continuing exactly.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "train/early_stopping.hpp"

using namespace mf::train;

namespace {

struct Step {
  double value;
  bool improved, is_best, stop;
};

// Feeds values at steps 1, 2, ... and checks each verdict.
void run_sequence(EarlyStopping& es, const std::vector<Step>& seq) {
  std::int64_t step = 0;
  for (const Step& s : seq) {
    ++step;
    CAPTURE(step);
    CAPTURE(s.value);
    const Verdict v = es.observe(s.value, step);
    CHECK(v.improved == s.improved);
    CHECK(v.is_best == s.is_best);
    CHECK(v.stop == s.stop);
    CHECK(v.undefined == std::isnan(s.value));
  }
}

}  // namespace

TEST_CASE("early stopping: higher is better, min_delta, patience counts bad evaluations in a row") {
  EarlyStopping es(MetricGoal{true, 0.01, 2});
  run_sequence(es, {{0.50, true, true, false},
                    {0.505, false, false, false},  // not better by more than min_delta
                    {0.60, true, true, false},     // resets the count
                    {0.59, false, false, false},
                    {0.60, false, false, true}});  // second bad one in a row: stop
  CHECK(es.state().value == 0.60);
  CHECK(es.state().step == 3);
  CHECK(es.state().bad_evals == 2);
  CHECK(es.exhausted());
}

TEST_CASE("early stopping: lower is better (a loss)") {
  EarlyStopping es(MetricGoal{false, 0.0, 1});
  run_sequence(es, {{1.0, true, true, false}, {0.8, true, true, false}, {0.8, false, false, true}});
  CHECK(es.state().value == 0.8);
  CHECK(es.state().step == 2);
}

TEST_CASE("early stopping: patience 0 never stops") {
  EarlyStopping es(MetricGoal{true, 0.0, 0});
  run_sequence(es, {{0.9, true, true, false}, {0.1, false, false, false}, {0.1, false, false, false}});
  CHECK(es.state().bad_evals == 2);
  CHECK_FALSE(es.exhausted());
}

TEST_CASE("early stopping: an undefined value never counts and keeps the newest as best until a finite one") {
  EarlyStopping es(MetricGoal{true, 0.0, 1});
  run_sequence(es, {{NAN, false, true, false},   // no finite best yet: newest is the best
                    {NAN, false, true, false},
                    {0.7, true, true, false},    // first finite value improves
                    {NAN, false, false, false},  // undefined after a finite best: neither best nor bad
                    {0.6, false, false, true}});
  CHECK(es.state().value == 0.7);
  CHECK(es.state().step == 3);
}

TEST_CASE("early stopping: an infinite value is a bad evaluation, never a best") {
  EarlyStopping es(MetricGoal{false, 0.0, 3});
  run_sequence(es, {{INFINITY, false, false, false}, {2.0, true, true, false}, {-INFINITY, false, false, false}});
  CHECK(es.state().value == 2.0);
  CHECK(es.state().bad_evals == 1);
}

TEST_CASE("early stopping: without validation every evaluation point is the best") {
  EarlyStopping es(MetricGoal{true, 0.0, 1});
  CHECK(es.observe_unvalidated(10).is_best);
  CHECK(es.observe_unvalidated(20).is_best);
  CHECK(es.state().step == 20);
  CHECK_FALSE(es.exhausted());
}

TEST_CASE("early stopping: a resumed selection continues as the uninterrupted one") {
  const MetricGoal goal{true, 0.0, 2};
  const std::vector<double> values = {0.5, 0.7, 0.6, 0.8, 0.75, 0.74, 0.9};
  EarlyStopping whole(goal);
  std::vector<Verdict> want;
  for (std::size_t i = 0; i < values.size(); ++i) want.push_back(whole.observe(values[i], std::int64_t(i + 1)));
  for (std::size_t cut = 0; cut <= values.size(); ++cut) {
    CAPTURE(cut);
    EarlyStopping first(goal);
    for (std::size_t i = 0; i < cut; ++i) first.observe(values[i], std::int64_t(i + 1));
    EarlyStopping resumed(goal, first.state());  // what a checkpoint carries
    for (std::size_t i = cut; i < values.size(); ++i) {
      const Verdict v = resumed.observe(values[i], std::int64_t(i + 1));
      CHECK(v.is_best == want[i].is_best);
      CHECK(v.stop == want[i].stop);
    }
    CHECK(resumed.state().value == whole.state().value);
    CHECK(resumed.state().step == whole.state().step);
    CHECK(resumed.state().bad_evals == whole.state().bad_evals);
  }
}
