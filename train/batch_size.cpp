#include "train/batch_size.hpp"

#include <algorithm>

namespace mf::train {

std::int64_t auto_batch_size(std::int64_t train_segments, std::int64_t grad_accum, bool on_gpu) {
  const std::int64_t cap = on_gpu ? kMaxAutoBatchGpu : kMaxAutoBatchCpu;
  const std::int64_t per_step = std::max<std::int64_t>(1, grad_accum) * kMinStepsPerEpoch;
  std::int64_t b = kMinAutoBatch;
  while (b * 2 <= cap && b * 2 * per_step <= train_segments) b *= 2;
  // A set too small for one step of the smallest batch: one step an epoch
  // that takes every segment (nothing dropped).
  const std::int64_t one_step = std::max<std::int64_t>(1, train_segments / std::max<std::int64_t>(1, grad_accum));
  return std::min(b, one_step);
}

}  // namespace mf::train
