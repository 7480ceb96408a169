#include "kernels/ops.hpp"

#include "kernels/cast.hpp"

namespace mf::ops {

void cast(const Tensor& src, Tensor& dst, cudaStream_t stream) {
  check_shape(dst, src.shape(), "cast", "dst");
  check_same_device({&src, &dst}, "cast");
  auto fn = src.is_cuda() ? kernels::cast_cuda : kernels::cast_cpu;
  fn(src.raw(), src.dtype(), dst.raw(), dst.dtype(), src.numel(), stream);
}

}  // namespace mf::ops
