// Dispatch of instance_norm (kernels/ops.hpp; rules in kernels/instance_norm.hpp):
// validate the shape, dtype and devices with errors that name what was
// expected and found, then run the CPU twin or the CUDA kernel by x's device.
#include "engine/cuda_entry.hpp"
#include "engine/error.hpp"
#include "kernels/instance_norm.hpp"
#include "kernels/ops.hpp"

namespace mf::ops {

void instance_norm(const Tensor& x, Tensor& y, cudaStream_t stream) {
  constexpr const char* op = "instance_norm";
  const bool rank3 = x.ndim() == 3, rank4 = x.ndim() == 4 && x.size(3) == 1;
  MF_CHECK(rank3 || rank4, "{}: x must be [B, mels, frames] or [B, mels, frames, 1], found {}", op, x.str());
  MF_CHECK(x.size(2) >= 1 && x.size(2) <= std::int64_t(1) << 30, "{}: x must have 1 to 2^30 frames, found {}", op,
           x.str());
  check_float_dtype(x, op, "x");
  check_shape(y, x.shape(), op, "y (x's shape)");
  check_dtype(y, x.dtype(), op, "y (x's dtype)");
  check_same_device({&x, &y}, op);
  kernels::InstanceNormDims d;
  d.rows = x.size(0) * x.size(1);
  d.frames = int(x.size(2));
  MF_CHECK(d.rows < (std::int64_t(1) << 33), "{}: x {} has {} rows (B * mels); at most 2^33 fit one launch", op,
           x.str(), d.rows);
  if (d.rows == 0) return;
  if (x.is_cuda()) MF_CUDA_ENTRY(kernels::instance_norm_cuda)(d, x.dtype(), x.raw(), y.raw(), stream);
  else kernels::instance_norm_cpu(d, x.dtype(), x.raw(), y.raw(), stream);
}

}  // namespace mf::ops
