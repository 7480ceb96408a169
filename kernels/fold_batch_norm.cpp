// CPU twin of fold_batch_norm (kernels/fold_batch_norm.hpp): output channels
// split over threads; each element depends only on its own inputs, so any
// thread count gives the same bits (and the CUDA kernel's: same f32 formula).
#include "kernels/fold_batch_norm.hpp"

#include <cmath>

#include "engine/error.hpp"
#include "engine/parallel.hpp"

namespace mf::kernels {

namespace {

template <class T>
void fold_impl(const FoldBatchNormArgs& d, const T* w, const T* b, const T* gamma, const T* beta, const float* mean,
               const float* var, T* w_out, T* b_out) {
  const std::int64_t per = d.per;
  parallel_for(std::int64_t(d.cout), [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t co = c0; co < c1; ++co) {
      const float s = to_f32(gamma[co]) * (1.f / std::sqrt(var[co] + d.eps));
      const float bias = b ? to_f32(b[co]) : 0.f;
      b_out[co] = from_f32<T>(to_f32(beta[co]) + (bias - mean[co]) * s);
      const T* wr = w + co * per;
      T* wo = w_out + co * per;
      for (std::int64_t i = 0; i < per; ++i) wo[i] = from_f32<T>(to_f32(wr[i]) * s);
    }
  }, 1);
}

template <class T>
void fold_typed(const FoldBatchNormArgs& d, const void* w, const void* b, const void* gamma, const void* beta,
                const float* mean, const float* var, void* w_out, void* b_out) {
  fold_impl(d, static_cast<const T*>(w), static_cast<const T*>(b), static_cast<const T*>(gamma),
            static_cast<const T*>(beta), mean, var, static_cast<T*>(w_out), static_cast<T*>(b_out));
}

}  // namespace

void fold_batch_norm_cpu(const FoldBatchNormArgs& d, DType dtype, const void* w, const void* b, const void* gamma,
                         const void* beta, const float* running_mean, const float* running_var, void* w_out,
                         void* b_out, cudaStream_t) {
  switch (dtype) {
    case DType::f32: return fold_typed<float>(d, w, b, gamma, beta, running_mean, running_var, w_out, b_out);
    case DType::f16: return fold_typed<f16>(d, w, b, gamma, beta, running_mean, running_var, w_out, b_out);
    case DType::bf16: return fold_typed<bf16>(d, w, b, gamma, beta, running_mean, running_var, w_out, b_out);
    default: break;
  }
  MF_THROW("fold_batch_norm_cpu: unsupported dtype {}", dtype_name(dtype));
}

}  // namespace mf::kernels
