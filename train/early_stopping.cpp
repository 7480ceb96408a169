#include "train/early_stopping.hpp"

namespace mf::train {

Verdict EarlyStopping::observe(double value, std::int64_t step) {
  Verdict v;
  v.undefined = std::isnan(value);
  const bool have_best = std::isfinite(state_.value);
  v.improved = std::isfinite(value) &&
               (!have_best || (goal_.higher_is_better ? value > state_.value + goal_.min_delta
                                                      : value < state_.value - goal_.min_delta));
  if (v.improved) {
    state_.value = value;
    state_.step = step;
    state_.bad_evals = 0;
    v.is_best = true;
  } else if (v.undefined) {
    if (!have_best) {
      state_.step = step;
      v.is_best = true;
    }
  } else {
    ++state_.bad_evals;
  }
  v.stop = exhausted();
  return v;
}

Verdict EarlyStopping::observe_unvalidated(std::int64_t step) {
  state_.step = step;
  Verdict v;
  v.is_best = true;
  return v;
}

}  // namespace mf::train
