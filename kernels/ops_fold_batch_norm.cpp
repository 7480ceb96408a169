// Dispatch of fold_batch_norm (kernels/ops.hpp; rules in
// kernels/fold_batch_norm.hpp): validate shapes, dtypes and devices with
// errors that name what was expected and found, then run the CPU twin or the
// CUDA kernel by w's device.
#include <cmath>

#include "engine/cuda_entry.hpp"
#include "engine/error.hpp"
#include "kernels/fold_batch_norm.hpp"
#include "kernels/ops.hpp"

namespace mf::ops {

void fold_batch_norm(const Tensor& w, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                     const Tensor& running_var, float eps, Tensor& w_out, Tensor& b_out, const Tensor* b,
                     cudaStream_t stream) {
  constexpr const char* op = "fold_batch_norm";
  MF_CHECK(w.ndim() == 4, "{}: w must be 4-D [Cout, k, k, Cin] (OHWI), found {}", op, w.str());
  check_float_dtype(w, op, "w");
  const std::int64_t cout = w.size(0);
  MF_CHECK(cout >= 1 && cout < (std::int64_t(1) << 30), "{}: w must have 1 <= Cout < 2^30, found {}", op, w.str());
  MF_CHECK(std::isfinite(eps) && eps >= 0.f, "{}: eps must be finite and >= 0, found {}", op, eps);
  const bool with_b = b != nullptr;
  if (with_b) {
    check_shape(*b, {cout}, op, "b ([Cout], Cout = w's first dimension)");
    check_dtype(*b, w.dtype(), op, "b (w's dtype)");
  }
  check_shape(gamma, {cout}, op, "gamma ([Cout])");
  check_dtype(gamma, w.dtype(), op, "gamma (w's dtype)");
  check_shape(beta, {cout}, op, "beta ([Cout])");
  check_dtype(beta, w.dtype(), op, "beta (w's dtype)");
  check_shape(running_mean, {cout}, op, "running_mean ([Cout])");
  check_dtype(running_mean, DType::f32, op, "running_mean");
  check_shape(running_var, {cout}, op, "running_var ([Cout])");
  check_dtype(running_var, DType::f32, op, "running_var");
  check_shape(w_out, w.shape(), op, "w_out (w's shape)");
  check_dtype(w_out, w.dtype(), op, "w_out (w's dtype)");
  check_shape(b_out, {cout}, op, "b_out ([Cout])");
  check_dtype(b_out, w.dtype(), op, "b_out (w's dtype)");
  MF_CHECK(w_out.raw() != w.raw(), "{}: w_out must not be w itself (no in-place folding)", op);
  check_same_device({&w, &gamma, &beta, &running_mean, &running_var, &w_out, &b_out}, op);
  if (with_b) check_same_device({&w, b}, op);
  kernels::FoldBatchNormArgs d;
  d.cout = int(cout);
  d.per = w.numel() / cout;
  d.eps = eps;
  const void* bp = with_b ? b->raw() : nullptr;
  auto fn = w.is_cuda() ? MF_CUDA_ENTRY(kernels::fold_batch_norm_cuda) : kernels::fold_batch_norm_cpu;
  fn(d, w.dtype(), w.raw(), bp, gamma.raw(), beta.raw(), running_mean.data<float>(), running_var.data<float>(),
     w_out.raw(), b_out.raw(), stream);
}

}  // namespace mf::ops
