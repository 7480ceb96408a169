#include "kernels/cast.hpp"

#include "engine/error.hpp"
#include "engine/parallel.hpp"

namespace mf::kernels {

namespace {
template <class S, class D>
void cast_loop(const S* src, D* dst, std::int64_t n) {
  parallel_for(n, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) dst[i] = from_f32<D>(to_f32(src[i]));
  }, 1 << 14);
}

template <class S>
void cast_from(const S* src, void* dst, DType dst_type, std::int64_t n) {
  switch (dst_type) {
    case DType::f32: return cast_loop(src, static_cast<float*>(dst), n);
    case DType::f16: return cast_loop(src, static_cast<f16*>(dst), n);
    case DType::bf16: return cast_loop(src, static_cast<bf16*>(dst), n);
    case DType::i32: return cast_loop(src, static_cast<std::int32_t*>(dst), n);
    case DType::u8: return cast_loop(src, static_cast<std::uint8_t*>(dst), n);
  }
}
}  // namespace

void cast_cpu(const void* src, DType src_type, void* dst, DType dst_type, std::int64_t n,
              cudaStream_t) {
  switch (src_type) {
    case DType::f32: return cast_from(static_cast<const float*>(src), dst, dst_type, n);
    case DType::f16: return cast_from(static_cast<const f16*>(src), dst, dst_type, n);
    case DType::bf16: return cast_from(static_cast<const bf16*>(src), dst, dst_type, n);
    case DType::i32: return cast_from(static_cast<const std::int32_t*>(src), dst, dst_type, n);
    case DType::u8: return cast_from(static_cast<const std::uint8_t*>(src), dst, dst_type, n);
  }
  MF_THROW("cast_cpu: unknown source dtype");
}

}  // namespace mf::kernels
