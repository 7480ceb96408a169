// Progress display of `melforge train`: on a terminal, one live line redrawn
// in place (epoch, step, loss, samples/s, ETA, GPU utilization and memory);
// otherwise (a pipe, a log file, CI) a plain line per log interval.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "model/run_config.hpp"

namespace mf::train {

struct ProgressState {
  std::int64_t epoch = 0, epochs = 0;              // 1-based epoch for display
  std::int64_t step_in_epoch = 0, steps_per_epoch = 0;
  std::int64_t global_step = 0;
  double loss = NAN, accuracy = NAN, lr = 0;
  double samples_per_s = 0, eta_s = -1;
  bool gpu = false;
  double gpu_util_pct = 0;
  double gpu_mem_gib = 0, gpu_mem_total_gib = 0;
};

// "1h02m", "3m05s", "12s"
std::string format_duration(double seconds);
// The line itself (without terminal control), for both modes.
std::string progress_line(const ProgressState& s);

class Progress {
 public:
  enum class Mode { tty, plain, off };
  // "auto" picks tty when `stream` is a terminal, else plain. A null stream:
  // nothing is printed (the processes of a job other than rank 0).
  explicit Progress(model::ProgressMode mode, std::FILE* stream = stderr);
  ~Progress();
  Mode mode() const { return mode_; }

  // Every step: redraws the live line (at most ~8 times a second); no-op in plain mode.
  void tick(const ProgressState& s);
  // Every log interval: in plain mode prints the line; in tty mode redraws it.
  void log(const ProgressState& s);
  // A message of its own (evaluation results, warnings): clears the live line
  // first, then prints `text` and a newline.
  void message(const std::string& text);
  // Ends the live line (keeps the last state visible).
  void finish();

 private:
  void draw(const ProgressState& s);
  Mode mode_ = Mode::plain;
  std::FILE* out_;
  bool line_open_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace mf::train
