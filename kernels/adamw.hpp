// adamw: the fused optimizer step over one flat f32 parameter buffer.
//
// Buffers (all [n], the ParamBuffer layout, see model/param_buffer.hpp):
//   master f32   FP32 master weights (updated in place)
//   grad   f32   gradients of the loss times the loss scale (read only)
//   m, v   f32   AdamW moments (updated in place)
//   work   T     the working copy the forward reads (bf16/f16), written in the
//                same pass; null when the working copy is the master (fp32)
//   state  AdamWState, one struct in device memory (host memory for the CPU twin)
// Parameters [0, decay_end) take weight decay; [decay_end, n) (biases) do not:
// ParamBuffer puts every weight before every bias for this.
//   frozen u8    optional [n] mask (null: nothing frozen): an element whose
//                byte is nonzero is frozen (train.freeze): its gradient is left
//                out of the norm, the clip and the non-finite check (as
//                PyTorch's clip_grad_norm_ and GradScaler leave out parameters
//                without requires_grad), and pass 3 skips it: master, m, v
//                and the working copy keep their bits (no step, no decay).
//
// Three passes, no host synchronization, no float atomics:
//   1. per-block partial sums of (grad / loss_scale)^2 and non-finite counts
//      over a fixed grid (kAdamWNormBlocks blocks at most);
//   2. one block reduces the partials in a fixed order -> grad norm, found-inf;
//      evaluates the LR schedule at state.iteration; updates the counters and
//      the dynamic loss scale; writes the per-step scalars (coef, step size...);
//   3. the element-wise update (a no-op when the step is skipped).
// The update mirrors torch.optim.AdamW (1.13, single-tensor) after
// GradScaler.unscale_ and clip_grad_norm_(max_norm) (coefficient
// max_norm / (norm + 1e-6), clamped to 1):
//   g = grad * coef          (coef = clip / loss_scale)
//   p *= 1 - lr * wd         (weights only)
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// t counts applied (not skipped) updates; the LR schedule counts every call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/dtype.hpp"

namespace mf::kernels {

enum class LrSchedule : std::int32_t { constant = 0, linear = 1, cosine = 2 };

struct AdamWConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0.01f;
  float max_grad_norm = 0.f;  // <= 0: no clipping
  // Schedule at iteration t (0-based): t < warmup: lr * (t+1) / warmup; then
  // with p = clamp((t - warmup) / max(1, total - warmup), 0, 1):
  // cosine: min_lr + (lr - min_lr) * (1 + cos(pi p)) / 2; linear: lr + (min_lr - lr) p;
  // constant: lr.
  LrSchedule schedule = LrSchedule::constant;
  std::int32_t warmup_steps = 0;
  std::int32_t total_steps = 1;
  float min_lr = 0.f;
  // Dynamic loss scaling (FP16): x backoff on overflow (not below min_scale),
  // x growth after growth_interval clean steps in a row (not above max_scale).
  // Without it the scale stays at its initial value (1 for fp32/bf16).
  bool dynamic_loss_scale = false;
  float growth = 2.f, backoff = 0.5f;
  std::int32_t growth_interval = 2000;
  float min_scale = 1.f, max_scale = 16777216.f;
};

// Device-held optimizer state and the last step's scalars (read by the host
// once per log interval, saved in checkpoints).
struct AdamWState {
  float loss_scale = 1.f;
  float grad_norm = 0.f;        // last step's unscaled global norm (before clipping)
  float lr = 0.f;               // last step's learning rate
  std::int32_t iteration = 0;   // optimizer calls (drives the LR schedule and dropout)
  std::int32_t step = 0;        // applied updates (drives bias correction)
  std::int32_t clean_steps = 0; // finite steps since the last scale change
  std::int32_t skipped_steps = 0;
  std::int32_t found_inf = 0;   // last step had a non-finite gradient
  // Scratch written by pass 2, read by pass 3.
  float coef = 1.f, step_size = 0.f, decay_factor = 1.f, bc2_sqrt = 1.f;
  std::int32_t skip = 0;
  std::int32_t pad_ = 0;
};

inline constexpr int kAdamWNormBlocks = 512;

struct AdamWDims {
  std::int64_t n = 0;
  std::int64_t decay_end = 0;
};

// Scratch bytes for the norm partials (device memory on GPU).
inline std::size_t adamw_scratch_bytes() { return std::size_t(kAdamWNormBlocks) * 12; }  // double + int per block

void adamw_step_cpu(const AdamWDims& d, const AdamWConfig& c, DType work_dtype, float* master,
                    const float* grad, float* m, float* v, void* work, const std::uint8_t* frozen,
                    AdamWState* state, void* scratch, cudaStream_t stream);
void adamw_step_cuda(const AdamWDims& d, const AdamWConfig& c, DType work_dtype, float* master,
                     const float* grad, float* m, float* v, void* work, const std::uint8_t* frozen,
                     AdamWState* state, void* scratch, cudaStream_t stream);

// Gradient accumulation over micro-batches is ops::accumulate (kernels/ops.hpp).
// The benchmark's and the tests' extra entry points: kernels/adamw_lab.hpp.

}  // namespace mf::kernels
