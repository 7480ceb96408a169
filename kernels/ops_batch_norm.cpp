// Dispatch of batch_norm_train_forward / batch_norm_eval_forward /
// batch_norm_backward (kernels/ops.hpp; layouts and rules in
// kernels/batch_norm.hpp): validate shapes, dtypes and devices with errors
// that name what was expected and found, then run the CPU twin or the CUDA
// kernels by the tensors' device. x [..., C] is flattened to [M, C].
#include <cmath>

#include "engine/cuda_entry.hpp"
#include "engine/error.hpp"
#include "kernels/batch_norm.hpp"
#include "kernels/op_scratch.hpp"
#include "kernels/ops.hpp"

namespace mf::ops {

namespace {

// Checks that t has x's shape, dtype and device.
void check_like_x(const Tensor& t, const Tensor& x, const char* op, const char* what) {
  MF_CHECK(t.shape() == x.shape(), "{}: {} must have x's shape {}, found {}", op, what, shape_str(x.shape()),
           t.str());
  MF_CHECK(t.dtype() == x.dtype(), "{}: {} must have x's dtype {}, found {}", op, what, dtype_name(x.dtype()),
           t.str());
  check_same_device({&x, &t}, op);
}

// Validates x, gamma and eps; returns the dims they imply.
kernels::BatchNormArgs bn_dims(const Tensor& x, const Tensor& gamma, float eps, bool relu, const char* op) {
  MF_CHECK(x.ndim() >= 2, "{}: x must be [..., C] with at least 2 dimensions (nhwc [N, H, W, C]), found {}", op,
           x.str());
  check_float_dtype(x, op, "x");
  const std::int64_t C = x.size(x.ndim() - 1);
  MF_CHECK(C >= 1 && C <= (1 << 20), "{}: x must have 1..{} channels (its last dimension), found {}", op, 1 << 20,
           x.str());
  MF_CHECK(std::isfinite(eps) && eps >= 0.f, "{}: eps must be finite and >= 0, found {}", op, eps);
  check_shape(gamma, {C}, op, "gamma ([C], C = x's last dimension)");
  check_dtype(gamma, x.dtype(), op, "gamma (same dtype as x)");
  check_same_device({&x, &gamma}, op);
  kernels::BatchNormArgs d;
  d.m = x.numel() / C;
  d.c = int(C);
  d.eps = eps;
  d.relu = relu;
  return d;
}

// The forwards' beta, residual and y.
void check_forward_io(const kernels::BatchNormArgs& d, const Tensor& x, const Tensor& beta, const Tensor* residual,
                      const Tensor& y, const char* op) {
  check_shape(beta, {d.c}, op, "beta ([C], C = x's last dimension)");
  check_dtype(beta, x.dtype(), op, "beta (same dtype as x)");
  check_same_device({&x, &beta}, op);
  if (residual) check_like_x(*residual, x, op, "residual");
  check_like_x(y, x, op, "y");
}

void check_stat(const Tensor& t, std::int64_t c, const Tensor& x, const char* op, const char* what) {
  check_shape(t, {c}, op, what);
  check_dtype(t, DType::f32, op, what);
  check_same_device({&x, &t}, op);
}

void check_training_rows(const kernels::BatchNormArgs& d, const Tensor& x, const char* op) {
  MF_CHECK(d.m >= 2,
           "{}: expected more than 1 value per channel when training (M = N*H*W = {} rows in x {}); "
           "PyTorch refuses this too: use a batch of at least 2 or eval mode",
           op, d.m, x.str());
}

// The f32 scratch of the CUDA path (kernels/op_scratch.hpp).
float* cuda_scratch(const kernels::BatchNormArgs& d, const Tensor& x, Tensor* scratch, Tensor& owned,
                    cudaStream_t stream, const char* op) {
  const auto sizing = [&] { return fmt::format("batch_norm_scratch_elems(M = {}, C = {})",
                                            d.m, d.c); };
  return scratch_or_per_call(scratch, kernels::batch_norm_scratch_elems(d.m, d.c), sizing, x, owned,
                             stream, op);
}

}  // namespace

void batch_norm_train_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                              Tensor& running_var, float eps, float momentum, bool relu, Tensor& save_mean,
                              Tensor& save_invstd, Tensor& y, const Tensor* residual, Tensor* scratch,
                              cudaStream_t stream) {
  constexpr const char* op = "batch_norm_train_forward";
  kernels::BatchNormArgs d = bn_dims(x, gamma, eps, relu, op);
  check_forward_io(d, x, beta, residual, y, op);
  MF_CHECK(std::isfinite(momentum) && momentum >= 0.f && momentum <= 1.f,
           "{}: momentum must be in [0, 1], found {}", op, momentum);
  d.momentum = momentum;
  check_stat(running_mean, d.c, x, op, "running_mean (f32 [C])");
  check_stat(running_var, d.c, x, op, "running_var (f32 [C])");
  check_stat(save_mean, d.c, x, op, "save_mean (f32 [C])");
  check_stat(save_invstd, d.c, x, op, "save_invstd (f32 [C])");
  check_training_rows(d, x, op);
  const void* res = residual ? residual->raw() : nullptr;
  float* rm = static_cast<float*>(running_mean.raw());
  float* rv = static_cast<float*>(running_var.raw());
  float* sm = static_cast<float*>(save_mean.raw());
  float* si = static_cast<float*>(save_invstd.raw());
  if (x.is_cuda()) {
    Tensor owned;
    float* s = cuda_scratch(d, x, scratch, owned, stream, op);
    MF_CUDA_ENTRY(kernels::batch_norm_train_forward_cuda)(d, x.dtype(), x.raw(), gamma.raw(), beta.raw(), res, rm, rv, sm, si,
                                           y.raw(), s, stream);
  } else {
    kernels::batch_norm_train_forward_cpu(d, x.dtype(), x.raw(), gamma.raw(), beta.raw(), res, rm, rv, sm, si,
                                          y.raw(), nullptr, stream);
  }
}

void batch_norm_eval_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                             const Tensor& running_var, float eps, bool relu, Tensor& y, const Tensor* residual,
                             cudaStream_t stream) {
  constexpr const char* op = "batch_norm_eval_forward";
  const kernels::BatchNormArgs d = bn_dims(x, gamma, eps, relu, op);
  check_forward_io(d, x, beta, residual, y, op);
  check_stat(running_mean, d.c, x, op, "running_mean (f32 [C])");
  check_stat(running_var, d.c, x, op, "running_var (f32 [C])");
  auto fn = x.is_cuda() ? MF_CUDA_ENTRY(kernels::batch_norm_eval_forward_cuda) : kernels::batch_norm_eval_forward_cpu;
  fn(d, x.dtype(), x.raw(), gamma.raw(), beta.raw(), residual ? residual->raw() : nullptr,
     static_cast<const float*>(running_mean.raw()), static_cast<const float*>(running_var.raw()), y.raw(), stream);
}

void batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd,
                         Tensor& dy, bool relu, Tensor& dx, Tensor& dgamma, Tensor& dbeta, const Tensor* y,
                         Tensor* scratch, cudaStream_t stream) {
  constexpr const char* op = "batch_norm_backward";
  const kernels::BatchNormArgs d = bn_dims(x, gamma, 0.f, relu, op);
  check_like_x(dy, x, op, "dy");
  check_like_x(dx, x, op, "dx");
  if (relu) {
    MF_CHECK(y != nullptr, "{}: y (the forward's output, read with relu) must be given, found null", op);
    check_like_x(*y, x, op, "y (read with relu)");
  }
  check_stat(save_mean, d.c, x, op, "save_mean (f32 [C])");
  check_stat(save_invstd, d.c, x, op, "save_invstd (f32 [C])");
  check_stat(dgamma, d.c, x, op, "dgamma (f32 [C])");
  check_stat(dbeta, d.c, x, op, "dbeta (f32 [C])");
  check_training_rows(d, x, op);
  const void* yp = relu ? y->raw() : nullptr;
  const float* sm = static_cast<const float*>(save_mean.raw());
  const float* si = static_cast<const float*>(save_invstd.raw());
  float* dg = static_cast<float*>(dgamma.raw());
  float* db = static_cast<float*>(dbeta.raw());
  if (x.is_cuda()) {
    Tensor owned;
    float* s = cuda_scratch(d, x, scratch, owned, stream, op);
    MF_CUDA_ENTRY(kernels::batch_norm_backward_cuda)(d, x.dtype(), x.raw(), gamma.raw(), sm, si, yp, dy.raw(), dx.raw(), dg, db,
                                      s, stream);
  } else {
    kernels::batch_norm_backward_cpu(d, x.dtype(), x.raw(), gamma.raw(), sm, si, yp, dy.raw(), dx.raw(), dg, db,
                                     nullptr, stream);
  }
}

}  // namespace mf::ops
