// Best-checkpoint selection and early stopping: a small pure type, fed one
// validation metric value per evaluation. It holds no clock, file or device:
// the trainer saves its state in checkpoints and acts on its verdicts.
//
// Rules:
// - a finite value improves when there is no finite best yet, or when it beats
//   the best by more than min_delta (higher or lower, per the metric);
// - an undefined value (NaN: e.g. a leak AUC on a set with one leak label)
//   says nothing about progress: it never counts toward patience, and while no
//   finite best exists the newest evaluation is kept as the best (so a test
//   set never falls back to the final weights for want of a best checkpoint);
// - any other value (not better, or infinite) is a bad evaluation; patience > 0
//   consecutive bad evaluations stop the run; patience 0 never stops;
// - without a validation set, every evaluation point's weights are the best.
#pragma once

#include <cmath>
#include <cstdint>

namespace mf::train {

struct MetricGoal {
  bool higher_is_better = true;
  double min_delta = 0;        // an improvement must exceed this
  std::int64_t patience = 0;   // bad evaluations in a row that stop the run; 0: never
};

// What a checkpoint records of the selection (resume continues it exactly).
struct BestState {
  double value = NAN;          // best finite metric value so far (NaN: none yet)
  std::int64_t step = -1;      // optimizer step of the best weights (-1: none)
  std::int64_t bad_evals = 0;  // consecutive evaluations without improvement
};

struct Verdict {
  bool improved = false;   // a new best finite value
  bool undefined = false;  // the value was NaN
  bool is_best = false;    // these weights become the best checkpoint
  bool stop = false;       // patience is exhausted: stop training
};

class EarlyStopping {
 public:
  explicit EarlyStopping(MetricGoal goal, BestState state = {}) : goal_(goal), state_(state) {}

  // One validation result of the weights after optimizer step `step`.
  Verdict observe(double value, std::int64_t step);
  // An evaluation point without a validation set: the newest weights are the best.
  Verdict observe_unvalidated(std::int64_t step);
  // Patience was already used up (a resumed run that had stopped early).
  bool exhausted() const { return goal_.patience > 0 && state_.bad_evals >= goal_.patience; }

  const BestState& state() const { return state_; }
  const MetricGoal& goal() const { return goal_; }

 private:
  MetricGoal goal_;
  BestState state_;
};

}  // namespace mf::train
