// CPU twin of adamw. The norm is summed in fixed chunks, each as 8 double
// lanes (lane l takes every 8th element from l on, the lanes then added in
// order: the order of an 8-lane vector loop), then over chunks in order, so
// it does not depend on the thread count. With the avx512 CPU kernels both
// passes run as AVX-512 loops that give the same bits
// (kernels/adamw_cpu_avx512.hpp); with a frozen mask (train.freeze) the
// portable loops run (the AVX-512 ones take no mask; the bits are the same).
#include "kernels/adamw.hpp"

#include <cfloat>
#include <cmath>
#include <vector>

#include "engine/cpu_kernels.hpp"
#include "engine/error.hpp"
#include "engine/float_convert.hpp"
#include "engine/parallel.hpp"
#include "kernels/adamw_common.hpp"
#include "kernels/adamw_lab.hpp"
#include "kernels/adamw_cpu_avx512.hpp"

namespace mf::kernels {

double lr_at(const AdamWConfig& c, std::int64_t iteration) { return detail::schedule_lr(c, iteration); }

namespace {
// The AVX-512 update, then the working copy converted from master (the bits
// of from_f32, which convert_floats reproduces).
void update_avx512(const AdamWDims& d, const AdamWConfig& c, const AdamWState& s, float* master, const float* grad,
                   float* m, float* v, DType work_dtype, void* work) {
  const AdamWLaneScalars ls{s.coef,           s.decay_factor, c.beta1,     1.f - c.beta1, c.beta2,
                            1.f - c.beta2,    s.step_size,    s.bc2_sqrt,  c.eps};
  parallel_for(d.n, [&](std::int64_t b, std::int64_t e) {
    adamw_update_avx512(ls, b, e, d.decay_end, master, grad, m, v);
    if (work)
      convert_floats(master + b, DType::f32, static_cast<char*>(work) + b * std::int64_t(dtype_size(work_dtype)),
                     work_dtype, e - b, false);
  }, 1 << 14);
}

// One chunk of the norm pass: sum of squares (8 double lanes) and non-finite
// count, frozen elements (frozen may be null) left out.
void chunk_sumsq(const float* grad, const std::uint8_t* frozen, std::int64_t n, float inv_scale, double* sumsq,
                 long long* nonfinite) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  long long nb = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (frozen && frozen[i]) continue;
    const float g = grad[i] * inv_scale;
    const bool finite = std::abs(g) <= FLT_MAX;  // false for Inf and NaN
    nb += !finite;
    lane[i % 8] += finite ? double(g) * double(g) : 0.0;
  }
  double acc = lane[0];
  for (int l = 1; l < 8; ++l) acc += lane[l];
  *sumsq = acc;
  *nonfinite = nb;
}

template <class T>
void update_loop(const AdamWDims& d, const AdamWConfig& c, const AdamWState& s, float* master,
                 const float* grad, float* m, float* v, T* work, const std::uint8_t* frozen) {
  parallel_for(d.n, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      if (frozen && frozen[i]) continue;
      float p = master[i], mi = m[i], vi = v[i];
      detail::update_element(c, s, i < d.decay_end, p, grad[i], mi, vi);
      master[i] = p;
      m[i] = mi;
      v[i] = vi;
      if (work) work[i] = from_f32<T>(p);
    }
  }, 1 << 14);
}
}  // namespace

void adamw_step_cpu(const AdamWDims& d, const AdamWConfig& c, DType work_dtype, float* master,
                    const float* grad, float* m, float* v, void* work, const std::uint8_t* frozen,
                    AdamWState* state, void*, cudaStream_t) {
  AdamWState& s = *state;
  const float inv_scale = 1.f / s.loss_scale;
  constexpr std::int64_t kChunk = 1 << 14;
  const std::int64_t chunks = (d.n + kChunk - 1) / kChunk;
  std::vector<double> part(std::size_t(chunks), 0.0);
  std::vector<long long> bad(std::size_t(chunks), 0);
  const bool avx512 = active_cpu_kernels() == CpuKernels::avx512 && !frozen;
  parallel_for(chunks, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t ch = c0; ch < c1; ++ch) {
      // double, like the CUDA partials: the clip coefficient scales every gradient
      const std::int64_t b = ch * kChunk, len = std::min(d.n, b + kChunk) - b;
      if (avx512)
        adamw_sumsq_avx512(grad + b, len, inv_scale, &part[std::size_t(ch)], &bad[std::size_t(ch)]);
      else
        chunk_sumsq(grad + b, frozen ? frozen + b : nullptr, len, inv_scale, &part[std::size_t(ch)],
                    &bad[std::size_t(ch)]);
    }
  });
  double sumsq = 0;
  long long nonfinite = 0;
  for (std::int64_t ch = 0; ch < chunks; ++ch) {
    sumsq += part[std::size_t(ch)];
    nonfinite += bad[std::size_t(ch)];
  }
  detail::finalize_step(c, s, sumsq, nonfinite);
  if (s.skip) return;
  if (avx512) return update_avx512(d, c, s, master, grad, m, v, work ? work_dtype : DType::f32, work);
  switch (work ? work_dtype : DType::f32) {
    case DType::f32: return update_loop<float>(d, c, s, master, grad, m, v, static_cast<float*>(work), frozen);
    case DType::f16: return update_loop<f16>(d, c, s, master, grad, m, v, static_cast<f16*>(work), frozen);
    case DType::bf16: return update_loop<bf16>(d, c, s, master, grad, m, v, static_cast<bf16*>(work), frozen);
    default: break;
  }
  MF_THROW("adamw_step_cpu: unsupported working dtype {}", dtype_name(work_dtype));
}

}  // namespace mf::kernels
