// The end-of-epoch accounting: where the epoch's training time went (phase
// times from the step's own timers, or a forward probe when the step is one
// CUDA graph), the achieved throughput and the bottleneck verdict, as the
// metrics.jsonl "phases" and "bottleneck" objects and the epoch's line.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/timer.hpp"
#include "train/perf.hpp"

namespace mf::train {

// What the loop measured over one epoch's training steps.
struct EpochMeasurements {
  double wall_s = 0;              // host wall time of the steps (no evaluation, no checkpoint)
  double data_wait_ms = 0;        // host blocked on the reader
  std::int64_t steps = 0;         // optimizer steps timed
  std::int64_t samples = 0;       // training samples of those steps
  std::int64_t micro_batches = 1; // per step (train.grad_accum)
  double train_flops_per_sample = 0;
  double peak_tflops = 0;         // 0 when unknown (CPU, or a GPU not in the table)
};

struct EpochReport {
  PhaseTimes phases;
  Bottleneck bottleneck;
  bool split_per_phase = false;  // eager steps timed per phase (else a probe estimate)
  double samples_per_s = 0;
  double achieved_tflops = 0;    // on a GPU; 0 on the CPU
  nlohmann::json phases_json;    // metrics.jsonl "phases"
  nlohmann::json bottleneck_json;
};

// `timers`: the epoch's EventTimer totals ("h2d", "step", "forward_probe",
// and on eager steps "fwd.*", "bwd.*", "loss", "accumulate", "optimizer").
// `ctx.achieved_tflops` and `ctx.peak_tflops` are filled here.
EpochReport summarize_epoch(const std::map<std::string, TimerStat, std::less<>>& timers, const EpochMeasurements& m,
                            BottleneckContext ctx);

}  // namespace mf::train
