// CPU twin of dropout (forward and backward apply the same mask and scale).
#include "kernels/dropout.hpp"

#include "engine/error.hpp"
#include "engine/parallel.hpp"

namespace mf::kernels {

namespace {
template <class T>
void apply(const DropoutArgs& d, const T* x, T* y, std::uint32_t counter) {
  const float keep_scale = 1.f / (1.f - d.p);
  parallel_for(d.n, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const bool keep = dropout_uniform(d.seed, counter, d.stream, std::uint64_t(i)) >= d.p;
      y[i] = from_f32<T>(keep ? to_f32(x[i]) * keep_scale : 0.f);
    }
  }, 1 << 14);
}

void run(const DropoutArgs& d, DType dtype, const void* x, void* y, const std::int32_t* counter) {
  const std::uint32_t ctr = std::uint32_t(*counter);
  switch (dtype) {
    case DType::f32: return apply(d, static_cast<const float*>(x), static_cast<float*>(y), ctr);
    case DType::f16: return apply(d, static_cast<const f16*>(x), static_cast<f16*>(y), ctr);
    case DType::bf16: return apply(d, static_cast<const bf16*>(x), static_cast<bf16*>(y), ctr);
    default: break;
  }
  MF_THROW("dropout: unsupported dtype {}", dtype_name(dtype));
}
}  // namespace

void dropout_forward_cpu(const DropoutArgs& d, DType dtype, const void* x, void* y,
                         const std::int32_t* counter, cudaStream_t) {
  run(d, dtype, x, y, counter);
}
void dropout_backward_cpu(const DropoutArgs& d, DType dtype, const void* dy, void* dx,
                          const std::int32_t* counter, cudaStream_t) {
  run(d, dtype, dy, dx, counter);
}

}  // namespace mf::kernels
