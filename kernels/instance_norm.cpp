// CPU twin of instance_norm (kernels/instance_norm.hpp): rows split over
// threads; per row the f32 mean, then the f32 sum of squared deviations, each
// in frame order, then the normalised values (the row is read completely
// before it is written, so y may be x).
#include "kernels/instance_norm.hpp"

#include <cmath>

#include "engine/error.hpp"
#include "engine/parallel.hpp"

namespace mf::kernels {

namespace {

template <class T>
void norm_impl(const InstanceNormDims& d, const T* x, T* y) {
  const int F = d.frames;
  parallel_for(d.rows, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * F;
      T* yr = y + r * F;
      // Everything in coordinates shifted by x_0: x_t - x_0 is small (and
      // exact for values within a factor 2 of x_0) where the row's offset is
      // large (log-mels sit at -80..0 dB), so neither the f32 sum nor the
      // mean's rounding at the offset's scale costs the digits x - mean needs.
      const float x0 = to_f32(xr[0]);
      float sum = 0.f;
      for (int t = 0; t < F; ++t) sum += to_f32(xr[t]) - x0;
      const float ms = sum / float(F);  // mean - x_0
      float ss = 0.f;
      for (int t = 0; t < F; ++t) {
        const float v = (to_f32(xr[t]) - x0) - ms;
        ss += v * v;
      }
      const float inv = 1.f / std::sqrt(ss / float(F) + kInstanceNormEps);
      for (int t = 0; t < F; ++t) yr[t] = from_f32<T>(((to_f32(xr[t]) - x0) - ms) * inv);
    }
  }, 8);
}

}  // namespace

void instance_norm_cpu(const InstanceNormDims& d, DType dtype, const void* x, void* y, cudaStream_t) {
  switch (dtype) {
    case DType::f32: return norm_impl(d, static_cast<const float*>(x), static_cast<float*>(y));
    case DType::f16: return norm_impl(d, static_cast<const f16*>(x), static_cast<f16*>(y));
    case DType::bf16: return norm_impl(d, static_cast<const bf16*>(x), static_cast<bf16*>(y));
    default: break;
  }
  MF_THROW("instance_norm_cpu: unsupported dtype {}", dtype_name(dtype));
}

}  // namespace mf::kernels
