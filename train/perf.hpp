// Performance accounting for the trainer: the FLOP count of a LeakCNN step,
// the peak-throughput table by GPU name, and the end-of-epoch bottleneck
// classifier (input-bound, compute-bound, launch/sync-bound) with a concrete
// suggestion.
#pragma once

#include "model/model_config.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mf::train {

// Dense peak throughput of a GPU, TFLOP/s (no structured sparsity).
struct PeakTflops {
  std::string device;      // the table's name for it
  double bf16 = 0;         // tensor cores, BF16 in, FP32 accumulate (FP16 is the same on these parts)
  double fp32 = 0;         // CUDA cores, non-tensor FP32
  std::string source = "vendor datasheet";
};
// Looks the CUDA device name up ("NVIDIA H100 80GB HBM3", "NVIDIA H200", ...).
std::optional<PeakTflops> peak_tflops(std::string_view device_name);
const std::vector<PeakTflops>& peak_table();

// LeakCNN FLOPs per sample: convs (3x3 "same" conv before each pool), the dense
// layer and the heads (head_outputs: C logits, plus 1 with the leak head); a training step is forward + backward (backward = 2x
// forward, minus the first layer's input gradient, which is never computed).
struct ModelFlops {
  double forward = 0;
  double train = 0;
};
ModelFlops leakcnn_flops(std::int64_t n_mels, std::int64_t frames, const std::vector<std::int64_t>& channels,
                         const std::vector<std::int64_t>& pools, std::int64_t kernel, std::int64_t dense,
                         std::int64_t head_outputs);
// The FLOPs of any model: leakcnn_flops for LeakCNN; for a CNN stack the sum
// of its convs (residual blocks: both convs and the projection), SE and
// attention products, dense layers and heads (elementwise work and batch
// norm not counted); training = 3x forward minus the first conv's dx.
ModelFlops model_flops(const model::ModelConfig& m);

// Where an epoch's training time went (milliseconds; device times from CUDA
// events on a GPU, host clocks on the CPU backend).
struct PhaseTimes {
  double wall_ms = 0;       // host wall time of the epoch's training steps (evaluation excluded)
  double data_wait_ms = 0;  // host blocked waiting for the next batch
  double h2d_ms = 0;        // host-to-device copies (on the copy stream: overlapped when all is well)
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  // The whole step (forward + loss + backward + optimizer) when it is timed as
  // one (a CUDA graph cannot be split); forward/backward/optimizer are then
  // estimates or zero.
  double step_ms = 0;
  double eval_ms = 0;       // evaluation (reported, not part of the step)
  std::int64_t steps = 0, samples = 0;
  double compute_ms() const { return step_ms > 0 ? step_ms : forward_ms + backward_ms + optimizer_ms; }
};

struct BottleneckContext {
  bool on_gpu = false;
  bool resident = false;        // dataset already on the device (gpu cache)
  bool fits_on_gpu = false;     // it would fit (reader.gpu_cache_fraction of free memory)
  int reader_threads = 2;
  int cpu_cores = 1;
  model::Precision precision = model::Precision::fp32;
  bool cuda_graphs = true;
  std::int64_t batch_size = 0;
  std::int64_t log_interval = 0;
  double achieved_tflops = 0;   // 0 when unknown
  double peak_tflops = 0;       // 0 when unknown
};

struct Bottleneck {
  std::string kind;  // "input-bound", "compute-bound", "launch/sync-bound"
  double input_share = 0, compute_share = 0, overhead_share = 0;  // of wall time
  std::string summary;     // the numbers, one line
  std::string suggestion;  // what to do about it, one line
  std::string line() const { return kind + ": " + summary + "; " + suggestion; }
};

Bottleneck classify_bottleneck(const PhaseTimes& t, const BottleneckContext& c);

}  // namespace mf::train
