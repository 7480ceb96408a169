// Dispatch of the pooling and elementwise ops (kernels/ops.hpp declares them,
// kernels/pooling.hpp has the contracts): shapes, dtypes and devices are
// checked here, with errors naming what was expected and found, then the CPU
// twin or the CUDA kernel runs according to the tensors' device.
#include <initializer_list>

#include "engine/cuda_entry.hpp"
#include "kernels/ops.hpp"
#include "kernels/pooling.hpp"

namespace mf::ops {

namespace {

// x must be [N, H, W, C] with every dimension >= 1, H*W and C within int.
kernels::PoolingDims nhwc_dims(const Tensor& x, const char* op, const char* what) {
  MF_CHECK(x.ndim() == 4, "{}: {} must be [N, H, W, C], found {}", op, what, x.str());
  MF_CHECK(x.size(0) >= 1 && x.size(1) >= 1 && x.size(2) >= 1 && x.size(3) >= 1,
           "{}: {} must have N, H, W, C >= 1, found {}", op, what, x.str());
  MF_CHECK(x.size(1) * x.size(2) < (std::int64_t(1) << 31) && x.size(3) < (std::int64_t(1) << 31),
           "{}: {} is too large (H*W and C must fit in int32), found {}", op, what, x.str());
  check_float_dtype(x, op, what);
  return kernels::PoolingDims{x.size(0), int(x.size(1)), int(x.size(2)), int(x.size(3))};
}

void check_pool(const kernels::PoolingDims& d, int pool, const char* op) {
  MF_CHECK(pool >= 1 && pool <= kernels::kMaxPoolMaxWindow,
           "{}: pool must be in [1, {}] (the window position is a u8 code), found {}", op,
           kernels::kMaxPoolMaxWindow, pool);
  MF_CHECK(d.h >= pool && d.w >= pool, "{}: H and W must be >= pool {} (at least one window), found H {} W {}", op,
           pool, d.h, d.w);
}

void check_dtype_of(const Tensor& t, const Tensor& ref, const char* op, const char* what, const char* ref_name) {
  MF_CHECK(t.dtype() == ref.dtype(), "{}: {} must have the dtype of {} ({}), found {}", op, what, ref_name,
           dtype_name(ref.dtype()), t.str());
}

// t has ref's shape and dtype.
void check_like(const Tensor& t, const Tensor& ref, const char* op, const char* what, const char* ref_name) {
  check_shape(t, ref.shape(), op, what);
  check_dtype_of(t, ref, op, what, ref_name);
}

}  // namespace

void max_pool_forward(const Tensor& x, int pool, Tensor& y, Tensor* code, cudaStream_t stream) {
  constexpr const char* op = "max_pool_forward";
  const kernels::PoolingDims d = nhwc_dims(x, op, "x");
  check_pool(d, pool, op);
  const Shape ys{d.n, d.h / pool, d.w / pool, d.c};
  check_shape(y, ys, op, "y");
  check_dtype(y, x.dtype(), op, "y (the dtype of x)");
  check_same_device({&x, &y}, op);
  if (code) {
    check_shape(*code, ys, op, "code");
    check_dtype(*code, DType::u8, op, "code");
    check_same_device({&x, code}, op);
  }
  std::uint8_t* c = code ? static_cast<std::uint8_t*>(code->raw()) : nullptr;
  auto fn = x.is_cuda() ? MF_CUDA_ENTRY(kernels::max_pool_forward_cuda) : kernels::max_pool_forward_cpu;
  fn(d, pool, x.dtype(), x.raw(), y.raw(), c, stream);
}

void max_pool_backward(const Tensor& dy, const Tensor& code, int pool, Tensor& dx, cudaStream_t stream) {
  constexpr const char* op = "max_pool_backward";
  const kernels::PoolingDims d = nhwc_dims(dx, op, "dx");
  check_pool(d, pool, op);
  const Shape ys{d.n, d.h / pool, d.w / pool, d.c};
  check_shape(dy, ys, op, "dy ([N, H/pool, W/pool, C] of dx)");
  check_dtype(dy, dx.dtype(), op, "dy (the dtype of dx)");
  check_shape(code, ys, op, "code");
  check_dtype(code, DType::u8, op, "code");
  check_same_device({&dy, &code, &dx}, op);
  auto fn = dx.is_cuda() ? MF_CUDA_ENTRY(kernels::max_pool_backward_cuda) : kernels::max_pool_backward_cpu;
  fn(d, pool, dx.dtype(), dy.raw(), static_cast<const std::uint8_t*>(code.raw()), dx.raw(), stream);
}

void global_avg_pool_forward(const Tensor& x, Tensor& y, cudaStream_t stream) {
  constexpr const char* op = "global_avg_pool_forward";
  const kernels::PoolingDims d = nhwc_dims(x, op, "x");
  check_shape(y, {d.n, d.c}, op, "y");
  check_dtype(y, x.dtype(), op, "y (the dtype of x)");
  check_same_device({&x, &y}, op);
  auto fn = x.is_cuda() ? MF_CUDA_ENTRY(kernels::global_avg_pool_forward_cuda) : kernels::global_avg_pool_forward_cpu;
  fn(d, x.dtype(), x.raw(), y.raw(), stream);
}

void global_avg_pool_backward(const Tensor& dy, Tensor& dx, cudaStream_t stream) {
  constexpr const char* op = "global_avg_pool_backward";
  const kernels::PoolingDims d = nhwc_dims(dx, op, "dx");
  check_shape(dy, {d.n, d.c}, op, "dy ([N, C] of dx)");
  check_dtype(dy, dx.dtype(), op, "dy (the dtype of dx)");
  check_same_device({&dy, &dx}, op);
  auto fn = dx.is_cuda() ? MF_CUDA_ENTRY(kernels::global_avg_pool_backward_cuda) : kernels::global_avg_pool_backward_cpu;
  fn(d, dx.dtype(), dy.raw(), dx.raw(), stream);
}

void channel_gate_forward(const Tensor& x, const Tensor& g, bool relu, Tensor& y, const Tensor* residual,
                          cudaStream_t stream) {
  constexpr const char* op = "channel_gate_forward";
  const kernels::PoolingDims d = nhwc_dims(x, op, "x");
  check_shape(g, {d.n, d.c}, op, "g ([N, C] of x)");
  check_dtype_of(g, x, op, "g", "x");
  check_like(y, x, op, "y", "x");
  check_same_device({&x, &g, &y}, op);
  if (residual) {
    check_like(*residual, x, op, "residual", "x");
    check_same_device({&x, residual}, op);
  }
  auto fn = x.is_cuda() ? MF_CUDA_ENTRY(kernels::channel_gate_forward_cuda) : kernels::channel_gate_forward_cpu;
  fn(d, relu, x.dtype(), x.raw(), g.raw(), residual ? residual->raw() : nullptr, y.raw(), stream);
}

void channel_gate_backward(const Tensor& x, const Tensor& g, Tensor& dy, bool relu, Tensor& dx, Tensor& dg,
                           const Tensor* y, cudaStream_t stream) {
  constexpr const char* op = "channel_gate_backward";
  const kernels::PoolingDims d = nhwc_dims(x, op, "x");
  check_shape(g, {d.n, d.c}, op, "g ([N, C] of x)");
  check_dtype_of(g, x, op, "g", "x");
  check_like(dy, x, op, "dy", "x");
  check_like(dx, x, op, "dx", "x");
  check_like(dg, g, op, "dg", "g");
  check_same_device({&x, &g, &dy, &dx, &dg}, op);
  if (relu) {  // y is read only with relu (it may be null otherwise)
    MF_CHECK(y != nullptr, "{}: y (the forward's output) must be given with relu, found null", op);
    check_like(*y, x, op, "y", "x");
    check_same_device({&x, y}, op);
  }
  auto fn = x.is_cuda() ? MF_CUDA_ENTRY(kernels::channel_gate_backward_cuda) : kernels::channel_gate_backward_cpu;
  fn(d, relu, x.dtype(), x.raw(), g.raw(), relu ? y->raw() : nullptr, dy.raw(), dx.raw(), dg.raw(), stream);
}

void accumulate(const Tensor& src, Tensor& dst, cudaStream_t stream) {
  constexpr const char* op = "accumulate";
  check_float_dtype(src, op, "src");
  check_like(dst, src, op, "dst", "src");
  check_same_device({&src, &dst}, op);
  auto fn = src.is_cuda() ? MF_CUDA_ENTRY(kernels::add_inplace_cuda) : kernels::add_inplace_cpu;
  fn(src.numel(), src.dtype(), src.raw(), dst.raw(), stream);
}

}  // namespace mf::ops
