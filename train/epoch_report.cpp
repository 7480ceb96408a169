#include "train/epoch_report.hpp"

#include <algorithm>

namespace mf::train {

namespace {

double total_ms(const std::map<std::string, TimerStat, std::less<>>& timers, const char* name) {
  auto it = timers.find(name);
  return it == timers.end() ? 0.0 : it->second.total_ms;
}

// Eager steps (the CPU backend, or train.cuda_graphs=false) are split into
// phases by the step itself; a replayed CUDA graph is not, and then a
// forward-only probe (one micro-batch) splits the step's time into estimates.
bool split_phases(const std::map<std::string, TimerStat, std::less<>>& timers, const EpochMeasurements& m,
                  PhaseTimes& pt) {
  double fwd = 0, bwd = 0;
  std::int64_t opt_count = 0;
  for (const auto& [name, stat] : timers) {
    if (name.rfind("fwd.", 0) == 0) fwd += stat.total_ms;
    if (name.rfind("bwd.", 0) == 0 || name == "loss" || name == "accumulate") bwd += stat.total_ms;
    if (name == "optimizer") opt_count = stat.count;
  }
  const bool split = opt_count == pt.steps && pt.steps > 0;
  if (split) {
    pt.forward_ms = fwd;
    pt.backward_ms = bwd;
    pt.optimizer_ms = total_ms(timers, "optimizer");
    pt.step_ms = 0;  // compute = the phases; the rest of the step is overhead
  } else {
    pt.forward_ms = std::min(pt.step_ms, total_ms(timers, "forward_probe") * double(pt.steps * m.micro_batches));
    pt.backward_ms = pt.step_ms - pt.forward_ms;  // loss + backward + optimizer
  }
  return split;
}

}  // namespace

EpochReport summarize_epoch(const std::map<std::string, TimerStat, std::less<>>& timers, const EpochMeasurements& m,
                            BottleneckContext ctx) {
  EpochReport r;
  PhaseTimes& pt = r.phases;
  pt.wall_ms = 1000.0 * m.wall_s;
  pt.data_wait_ms = m.data_wait_ms;
  pt.h2d_ms = total_ms(timers, "h2d");
  pt.step_ms = total_ms(timers, "step");
  pt.steps = m.steps;
  pt.samples = m.samples;
  r.split_per_phase = split_phases(timers, m, pt);
  const double tflops =
      pt.step_ms > 0 ? m.train_flops_per_sample * double(m.samples) / (pt.step_ms * 1e-3) / 1e12 : 0;
  r.achieved_tflops = ctx.on_gpu ? tflops : 0;
  ctx.achieved_tflops = r.achieved_tflops;
  ctx.peak_tflops = m.peak_tflops;
  r.bottleneck = classify_bottleneck(pt, ctx);
  r.samples_per_s = double(m.samples) / std::max(m.wall_s, 1e-9);
  r.phases_json = {{"wall_ms", pt.wall_ms},
                   {"data_wait_ms", pt.data_wait_ms},
                   {"h2d_ms", pt.h2d_ms},
                   {"step_ms", total_ms(timers, "step")},
                   {"steps", pt.steps},
                   {"split", r.split_per_phase ? "measured per phase (eager steps)"
                                               : "forward estimated by a probe (CUDA graph)"},
                   {"forward_ms", pt.forward_ms},
                   {"backward_ms", pt.backward_ms},
                   {"optimizer_ms", pt.optimizer_ms}};
  if (r.split_per_phase) {
    nlohmann::json per = nlohmann::json::object();
    for (const auto& [name, stat] : timers)
      if (name != "step" && name != "h2d" && name != "forward_probe") per[name] = stat.total_ms;
    r.phases_json["per_layer_ms"] = per;
  }
  const Bottleneck& bn = r.bottleneck;
  r.bottleneck_json = {{"kind", bn.kind},
                       {"input_share", bn.input_share},
                       {"compute_share", bn.compute_share},
                       {"overhead_share", bn.overhead_share},
                       {"summary", bn.summary},
                       {"suggestion", bn.suggestion}};
  return r;
}

}  // namespace mf::train
