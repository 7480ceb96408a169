// CPU twin of adamw. The norm is summed in fixed chunks (one per would-be GPU
// block) then over chunks in order, so it does not depend on the thread count.
#include "kernels/adamw.hpp"

#include <cmath>
#include <vector>

#include "engine/error.hpp"
#include "engine/parallel.hpp"
#include "kernels/adamw_common.hpp"

namespace mf::kernels {

double lr_at(const AdamWConfig& c, std::int64_t iteration) { return detail::schedule_lr(c, iteration); }

namespace {
template <class T>
void update_loop(const AdamWDims& d, const AdamWConfig& c, const AdamWState& s, float* master,
                 const float* grad, float* m, float* v, T* work) {
  parallel_for(d.n, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
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
                    const float* grad, float* m, float* v, void* work, AdamWState* state, void*,
                    cudaStream_t) {
  AdamWState& s = *state;
  const float inv_scale = 1.f / s.loss_scale;
  constexpr std::int64_t kChunk = 1 << 14;
  const std::int64_t chunks = (d.n + kChunk - 1) / kChunk;
  std::vector<double> part(std::size_t(chunks), 0.0);
  std::vector<long long> bad(std::size_t(chunks), 0);
  parallel_for(chunks, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t ch = c0; ch < c1; ++ch) {
      double acc = 0.0;  // double, like the CUDA partials: the clip coefficient scales every gradient
      long long nb = 0;
      const std::int64_t e = std::min(d.n, (ch + 1) * kChunk);
      for (std::int64_t i = ch * kChunk; i < e; ++i) {
        const float g = grad[i] * inv_scale;
        if (!std::isfinite(g)) ++nb;
        else acc += double(g) * double(g);
      }
      part[std::size_t(ch)] = acc;
      bad[std::size_t(ch)] = nb;
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
  switch (work ? work_dtype : DType::f32) {
    case DType::f32: return update_loop<float>(d, c, s, master, grad, m, v, static_cast<float*>(work));
    case DType::f16: return update_loop<f16>(d, c, s, master, grad, m, v, static_cast<f16*>(work));
    case DType::bf16: return update_loop<bf16>(d, c, s, master, grad, m, v, static_cast<bf16*>(work));
    default: break;
  }
  MF_THROW("adamw_step_cpu: unsupported working dtype {}", dtype_name(work_dtype));
}

void accumulate_f32_cpu(std::int64_t n, const float* src, float* dst, cudaStream_t) {
  parallel_for(n, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) dst[i] += src[i];
  }, 1 << 15);
}

}  // namespace mf::kernels
