// CPU twin of mixup (kernels/mixup.hpp): parallel over samples, each sample's
// weight and values a pure function of its index, so the thread count changes
// nothing. The f32 arithmetic is augment_mul/augment_add's (no contraction),
// as in the kernel.
#include "kernels/mixup.hpp"

#include "engine/error.hpp"
#include "engine/parallel.hpp"
#include "kernels/augment.hpp"

namespace mf::kernels {

namespace {

template <class T>
void mixup_all(const MixupArgs& d, const T* x, T* x_out, const std::int32_t* labels, const float* leak,
               std::int32_t* labels_b, float* lam, float* leak_out, std::uint32_t ctr) {
  const std::int64_t B = d.batch, n = d.elems, r = mixup_pair_shift(d, ctr);
  parallel_for(B, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t i = b0; i < b1; ++i) {
      const std::int64_t j = (i + r) % B;
      const float l = mixup_lambda(d, ctr, d.first_sample + i), o = 1.f - l;
      const T* xi = x + i * n;
      const T* xj = x + j * n;
      T* out = x_out + i * n;
      for (std::int64_t e = 0; e < n; ++e)
        out[e] = from_f32<T>(augment_add(augment_mul(l, to_f32(xi[e])), augment_mul(o, to_f32(xj[e]))));
      labels_b[i] = labels[j];
      lam[i] = l;
      if (leak) leak_out[i] = augment_add(augment_mul(l, leak[i]), augment_mul(o, leak[j]));
    }
  }, 1);
}

}  // namespace

void mixup_cpu(const MixupArgs& d, DType dtype, const void* x, void* x_out, const std::int32_t* labels,
               const float* leak, std::int32_t* labels_b, float* lam, float* leak_out, const std::int32_t* counter,
               cudaStream_t) {
  if (d.batch == 0) return;
  const std::uint32_t ctr = std::uint32_t(*counter);
  switch (dtype) {
    case DType::f32:
      return mixup_all(d, static_cast<const float*>(x), static_cast<float*>(x_out), labels, leak, labels_b, lam,
                       leak_out, ctr);
    case DType::f16:
      return mixup_all(d, static_cast<const f16*>(x), static_cast<f16*>(x_out), labels, leak, labels_b, lam,
                       leak_out, ctr);
    case DType::bf16:
      return mixup_all(d, static_cast<const bf16*>(x), static_cast<bf16*>(x_out), labels, leak, labels_b, lam,
                       leak_out, ctr);
    default: break;
  }
  MF_THROW("mixup: unsupported dtype {}", dtype_name(dtype));
}

}  // namespace mf::kernels
