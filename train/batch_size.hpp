// train.batch_size = auto: the micro-batch size from the training set size.
//
// Rule: the largest power of two B with N / (B * grad_accum) >= kMinStepsPerEpoch
// optimizer steps per epoch, clamped to [kMinAutoBatch, the device's cap]
// (kMaxAutoBatchCpu, kMaxAutoBatchGpu), and never more than N / grad_accum,
// so a set smaller than kMinAutoBatch still fills one step. Few steps per epoch is what makes a
// small dataset train badly at a large batch (1,000 segments at 256 are 4 steps
// an epoch); the caps keep a large dataset at a batch each device runs
// efficiently (the CPU gains nothing past a few hundred, a GPU wants thousands).
// Measurements behind the constants: bench/results/cpu-demo-and-batch-rule.md.
#pragma once

#include <cstdint>

namespace mf::train {

inline constexpr std::int64_t kMinStepsPerEpoch = 32;
inline constexpr std::int64_t kMinAutoBatch = 16;
inline constexpr std::int64_t kMaxAutoBatchCpu = 256;
inline constexpr std::int64_t kMaxAutoBatchGpu = 4096;

// train_segments: segments of the training set (>= 0); grad_accum >= 1.
std::int64_t auto_batch_size(std::int64_t train_segments, std::int64_t grad_accum, bool on_gpu);

}  // namespace mf::train
