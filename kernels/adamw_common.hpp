// Scalar logic of adamw shared by the CPU twin and the CUDA kernels (host and
// device): the LR schedule and pass 2's bookkeeping. No fmt: included by .cu.
#pragma once

#include <cmath>

#include "engine/host_device.hpp"
#include "kernels/adamw.hpp"

namespace mf::kernels::detail {

// The math calls valid in both host and device code.
MF_HOST_DEVICE inline bool finite_d(double x) {
#ifdef __CUDA_ARCH__
  return isfinite(x);
#else
  return std::isfinite(x);
#endif
}
MF_HOST_DEVICE inline double sqrt_d(double x) {
#ifdef __CUDA_ARCH__
  return sqrt(x);
#else
  return std::sqrt(x);
#endif
}
MF_HOST_DEVICE inline double pow_d(double x, double y) {
#ifdef __CUDA_ARCH__
  return pow(x, y);
#else
  return std::pow(x, y);
#endif
}
MF_HOST_DEVICE inline double cos_d(double x) {
#ifdef __CUDA_ARCH__
  return cos(x);
#else
  return std::cos(x);
#endif
}
MF_HOST_DEVICE inline float sqrt_f(float x) {
#ifdef __CUDA_ARCH__
  return sqrtf(x);
#else
  return std::sqrt(x);
#endif
}

MF_HOST_DEVICE inline double schedule_lr(const AdamWConfig& c, std::int64_t t) {
  const double base = c.lr;
  if (t < c.warmup_steps) return base * double(t + 1) / double(c.warmup_steps);
  const std::int64_t span = c.total_steps - c.warmup_steps > 1 ? c.total_steps - c.warmup_steps : 1;
  double p = double(t - c.warmup_steps) / double(span);
  p = p < 0 ? 0 : (p > 1 ? 1 : p);
  switch (c.schedule) {
    case LrSchedule::cosine: return c.min_lr + (base - c.min_lr) * 0.5 * (1.0 + cos_d(3.14159265358979323846 * p));
    case LrSchedule::linear: return base + (c.min_lr - base) * p;
    case LrSchedule::constant: break;
  }
  return base;
}

// Pass 2 after the reduction: sumsq of the unscaled gradients, nonfinite count.
MF_HOST_DEVICE inline void finalize_step(const AdamWConfig& c, AdamWState& s, double sumsq, long long nonfinite) {
  const double norm = sqrt_d(sumsq);
  const bool found = nonfinite > 0 || !finite_d(norm);
  const double lr = schedule_lr(c, s.iteration);
  s.lr = float(lr);
  s.grad_norm = float(norm);
  s.iteration += 1;
  s.found_inf = found ? 1 : 0;
  const float inv_scale = 1.f / s.loss_scale;  // the scale the gradients carry
  if (found) {
    s.skip = 1;
    s.skipped_steps += 1;
    s.clean_steps = 0;
    if (c.dynamic_loss_scale) {
      const float ns = s.loss_scale * c.backoff;
      s.loss_scale = ns < c.min_scale ? c.min_scale : ns;
    }
    return;
  }
  s.skip = 0;
  s.step += 1;
  float clip = 1.f;
  if (c.max_grad_norm > 0.f) {
    const float coef = float(double(c.max_grad_norm) / (norm + 1e-6));
    clip = coef < 1.f ? coef : 1.f;
  }
  s.coef = inv_scale * clip;
  const double bc1 = 1.0 - pow_d(double(c.beta1), double(s.step));
  const double bc2 = 1.0 - pow_d(double(c.beta2), double(s.step));
  s.step_size = float(lr / bc1);
  s.bc2_sqrt = float(sqrt_d(bc2));
  s.decay_factor = float(1.0 - lr * double(c.weight_decay));
  if (c.dynamic_loss_scale) {
    s.clean_steps += 1;
    if (s.clean_steps >= c.growth_interval) {
      const float ns = s.loss_scale * c.growth;
      s.loss_scale = ns > c.max_scale ? c.max_scale : ns;
      s.clean_steps = 0;
    }
  }
}

// Pass 3 for one element.
MF_HOST_DEVICE inline void update_element(const AdamWConfig& c, const AdamWState& s, bool decay, float& p,
                                 float g, float& m, float& v) {
  g *= s.coef;
  if (decay) p *= s.decay_factor;
  m = c.beta1 * m + (1.f - c.beta1) * g;
  v = c.beta2 * v + (1.f - c.beta2) * (g * g);
  p -= s.step_size * (m / (sqrt_f(v) / s.bc2_sqrt + c.eps));
}

}  // namespace mf::kernels::detail
