// The trainer behind `melforge train`: one run from a resolved configuration
// to its report. The loop reads as named phases (trainer.cpp, Trainer::run):
//
//   restore_or_init   resume a checkpoint, or initial weights (seed or --init-from)
//   train_epoch       the optimizer steps of one epoch, logging every log.interval
//   report_epoch      phase times, throughput and the bottleneck verdict
//   validate          the validation set; best-checkpoint selection, early stopping
//   checkpoint        the state after the epoch, written atomically
//   report            the test set with the best weights, report.json, plots, summary
//
// Run directory (run.out):
//   config.toml        the resolved configuration (every key)
//   metrics.jsonl      a line per log interval ("train"), per epoch ("epoch":
//                      phase times, bottleneck) and per evaluation ("eval")
//   checkpoints/       ckpt-<step>.h5 (the last checkpoint.keep_last) and best.h5
//                      (contents: train/run_checkpoint.hpp)
//   report.json        the final summary (written at the end, also after SIGINT)
//   loss.svg accuracy.svg throughput.svg
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/run_config.hpp"

namespace mf::train {

struct TrainerOptions {
  // Stop as SIGINT would (checkpoint, report, exit 0) once this process has
  // reached this optimizer step; -1: never. `melforge train --stop-after-steps`.
  std::int64_t stop_after_steps = -1;
  // The configuration keys the user gave (a --config file's keys, flags,
  // --set), as `melforge train` collects them. On resume the run's saved
  // configuration is the default and only these keys override it (each
  // difference named in the log). nullopt: the configuration passed is taken
  // whole (a program that builds it).
  std::optional<std::vector<std::string>> given_keys;
};

class Trainer {
 public:
  // Validates the configuration, opens the data and builds the model; nothing
  // is written before run(). Throws mf::Error on a bad configuration or file.
  explicit Trainer(model::RunConfig cfg, TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains to the end (or to early stopping, SIGINT/SIGTERM, --stop-after-steps)
  // and writes the report; returns the process exit code (0 also when stopped).
  int run();

 private:
  class Run;  // the run's state and phases (trainer.cpp)
  std::unique_ptr<Run> run_;
};

}  // namespace mf::train
