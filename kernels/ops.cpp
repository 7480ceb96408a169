#include "kernels/ops.hpp"

#include "kernels/cast.hpp"
#include "kernels/conv_relu_pool.hpp"

namespace mf::ops {

void cast(const Tensor& src, Tensor& dst, cudaStream_t stream) {
  check_shape(dst, src.shape(), "cast", "dst");
  check_same_device({&src, &dst}, "cast");
  auto fn = src.is_cuda() ? kernels::cast_cuda : kernels::cast_cpu;
  fn(src.raw(), src.dtype(), dst.raw(), dst.dtype(), src.numel(), stream);
}

namespace {
// Validates x, w and the pool size, and returns the dims they imply.
kernels::ConvReluPoolDims conv_dims(const Tensor& x, const Tensor& w, int pool, const char* op) {
  MF_CHECK(x.ndim() == 4, "{}: x must be 4-D [N, H, W, Cin] (NHWC), got {}", op, shape_str(x.shape()));
  MF_CHECK(w.ndim() == 4, "{}: w must be 4-D [Cout, k, k, Cin], got {}", op, shape_str(w.shape()));
  MF_CHECK(dtype_is_float(x.dtype()), "{}: x must be f32, f16 or bf16, got {}", op, dtype_name(x.dtype()));
  check_dtype(w, x.dtype(), op, "w (same dtype as x)");
  MF_CHECK(x.size(0) >= 1 && x.size(1) >= 1 && x.size(2) >= 1 && x.size(3) >= 1,
           "{}: x must have N, H, W, Cin >= 1, got {}", op, shape_str(x.shape()));
  MF_CHECK(w.size(1) == w.size(2) && w.size(1) % 2 == 1,
           "{}: w must be [Cout, k, k, Cin] with k odd and square, got {}", op, shape_str(w.shape()));
  MF_CHECK(w.size(1) <= 15, "{}: kernel size k must be <= 15, got {}", op, w.size(1));
  MF_CHECK(w.size(0) >= 1, "{}: w must have Cout >= 1, got {}", op, shape_str(w.shape()));
  MF_CHECK(w.size(3) == x.size(3), "{}: w's Cin ({}) must match x's channels ({}); w {} x {}", op,
           w.size(3), x.size(3), shape_str(w.shape()), shape_str(x.shape()));
  MF_CHECK(pool >= 1 && pool <= 15, "{}: pool must be in [1, 15], got {}", op, pool);
  MF_CHECK(x.size(1) < (1 << 30) && x.size(2) < (1 << 30) && x.size(3) < (1 << 30) && w.size(0) < (1 << 30),
           "{}: x {} / w {} dimensions too large", op, shape_str(x.shape()), shape_str(w.shape()));
  kernels::ConvReluPoolDims d;
  d.n = x.size(0);
  d.h = int(x.size(1));
  d.w = int(x.size(2));
  d.cin = int(x.size(3));
  d.cout = int(w.size(0));
  d.k = int(w.size(1));
  d.pool = pool;
  return d;
}
}  // namespace

void conv_relu_pool_forward(const Tensor& x, const Tensor& w, const Tensor& b, int pool, Tensor& y,
                            Tensor* code, cudaStream_t stream) {
  constexpr const char* op = "conv_relu_pool_forward";
  const kernels::ConvReluPoolDims d = conv_dims(x, w, pool, op);
  check_shape(b, {d.cout}, op, "b");
  check_dtype(b, x.dtype(), op, "b (same dtype as x)");
  const Shape ys{d.n, d.ph(), d.pw(), d.cout};
  check_shape(y, ys, op, "y");
  check_dtype(y, x.dtype(), op, "y (same dtype as x)");
  const bool with_code = code && code->defined() && code->numel() > 0;
  if (with_code) {
    check_shape(*code, ys, op, "code");
    check_dtype(*code, DType::u8, op, "code");
    check_same_device({&x, &w, &b, &y, code}, op);
  } else {
    check_same_device({&x, &w, &b, &y}, op);
  }
  std::uint8_t* cp = with_code ? code->data<std::uint8_t>() : nullptr;
  auto fn = x.is_cuda() ? kernels::conv_relu_pool_forward_cuda : kernels::conv_relu_pool_forward_cpu;
  fn(d, x.dtype(), x.raw(), w.raw(), b.raw(), y.raw(), cp, stream);
}

void conv_relu_pool_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& code,
                             int pool, Tensor* dx, Tensor& dw, Tensor& db, cudaStream_t stream) {
  constexpr const char* op = "conv_relu_pool_backward";
  const kernels::ConvReluPoolDims d = conv_dims(x, w, pool, op);
  const Shape ys{d.n, d.ph(), d.pw(), d.cout};
  check_shape(dy, ys, op, "dy");
  check_dtype(dy, x.dtype(), op, "dy (same dtype as x)");
  check_shape(code, ys, op, "code (from the forward)");
  check_dtype(code, DType::u8, op, "code");
  check_shape(dw, w.shape(), op, "dw");
  check_dtype(dw, DType::f32, op, "dw");
  check_shape(db, {d.cout}, op, "db");
  check_dtype(db, DType::f32, op, "db");
  const bool with_dx = dx && dx->defined() && dx->numel() > 0;
  if (with_dx) {
    check_shape(*dx, x.shape(), op, "dx");
    check_dtype(*dx, x.dtype(), op, "dx (same dtype as x)");
    check_same_device({&x, &w, &dy, &code, &dw, &db, dx}, op);
  } else {
    check_same_device({&x, &w, &dy, &code, &dw, &db}, op);
  }
  auto fn = x.is_cuda() ? kernels::conv_relu_pool_backward_cuda : kernels::conv_relu_pool_backward_cpu;
  fn(d, x.dtype(), x.raw(), w.raw(), dy.raw(), code.data<std::uint8_t>(), with_dx ? dx->raw() : nullptr,
     dw.data<float>(), db.data<float>(), stream);
}

}  // namespace mf::ops
