// Dispatch of conv2d_forward / conv2d_backward (kernels/ops.hpp; layouts and
// rules in kernels/conv2d.hpp): validate shapes, dtypes and devices with
// errors that name what was expected and found, then run the CPU twin or the
// CUDA kernels by the tensors' device. An optional tensor (b, y, dx, db,
// scratch) is absent when its pointer is null.
#include <string>

#include "engine/cuda_entry.hpp"
#include "engine/error.hpp"
#include "kernels/conv2d.hpp"
#include "kernels/ops.hpp"

namespace mf::ops {

namespace {

// Validates x, w and the stride; returns the dims they imply.
kernels::Conv2dDims conv2d_dims(const Tensor& x, const Tensor& w, int stride, bool relu, const char* op) {
  MF_CHECK(x.ndim() == 4, "{}: x must be 4-D [N, H, W, Cin] (NHWC), found {}", op, x.str());
  MF_CHECK(w.ndim() == 4, "{}: w must be 4-D [Cout, k, k, Cin] (OHWI), found {}", op, w.str());
  check_float_dtype(x, op, "x");
  check_dtype(w, x.dtype(), op, "w (same dtype as x)");
  MF_CHECK(x.size(0) >= 1 && x.size(1) >= 1 && x.size(2) >= 1 && x.size(3) >= 1,
           "{}: x must have N, H, W, Cin >= 1, found {}", op, x.str());
  MF_CHECK(w.size(0) >= 1, "{}: w must have Cout >= 1, found {}", op, w.str());
  MF_CHECK(w.size(1) == w.size(2) && w.size(1) % 2 == 1 && w.size(1) <= 15,
           "{}: w must be [Cout, k, k, Cin] with k odd, square and <= 15, found {}", op, w.str());
  MF_CHECK(w.size(3) == x.size(3), "{}: w's Cin ({}) must match x's channels ({}); w {}, x {}", op, w.size(3),
           x.size(3), w.str(), x.str());
  MF_CHECK(stride == 1 || stride == 2, "{}: stride must be 1 or 2, found {}", op, stride);
  MF_CHECK(x.size(1) < (1 << 30) && x.size(2) < (1 << 30) && x.size(3) < (1 << 30) && w.size(0) < (1 << 30),
           "{}: x {} / w {} dimensions too large", op, x.str(), w.str());
  kernels::Conv2dDims d;
  d.n = x.size(0);
  d.h = int(x.size(1));
  d.w = int(x.size(2));
  d.cin = int(x.size(3));
  d.cout = int(w.size(0));
  d.k = int(w.size(1));
  d.stride = stride;
  d.relu = relu;
  return d;
}

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, int stride, bool relu, Tensor& y, const Tensor* b,
                    cudaStream_t stream) {
  constexpr const char* op = "conv2d_forward";
  const kernels::Conv2dDims d = conv2d_dims(x, w, stride, relu, op);
  const bool with_b = b != nullptr;
  if (with_b) {
    check_shape(*b, {d.cout}, op, "b");
    check_dtype(*b, x.dtype(), op, "b (same dtype as x)");
    check_same_device({&x, b}, op);
  }
  check_shape(y, {d.n, d.oh(), d.ow(), d.cout}, op, "y");
  check_dtype(y, x.dtype(), op, "y (same dtype as x)");
  check_same_device({&x, &w, &y}, op);
  auto fn = x.is_cuda() ? MF_CUDA_ENTRY(kernels::conv2d_forward_cuda) : kernels::conv2d_forward_cpu;
  fn(d, x.dtype(), x.raw(), w.raw(), with_b ? b->raw() : nullptr, y.raw(), stream);
}

void conv2d_backward(const Tensor& x, const Tensor& w, Tensor& dy, int stride, bool relu, Tensor& dw,
                     const Tensor* y, Tensor* dx, Tensor* db, Tensor* scratch, cudaStream_t stream) {
  constexpr const char* op = "conv2d_backward";
  const kernels::Conv2dDims d = conv2d_dims(x, w, stride, relu, op);
  const Shape ys{d.n, d.oh(), d.ow(), d.cout};
  check_shape(dy, ys, op, "dy");
  check_dtype(dy, x.dtype(), op, "dy (same dtype as x)");
  if (relu) {  // y is read only to mask dy
    MF_CHECK(y != nullptr, "{}: y (the forward's output) must be given with relu, found null", op);
    check_shape(*y, ys, op, "y (the forward's output)");
    check_dtype(*y, x.dtype(), op, "y (same dtype as x)");
    check_same_device({&x, y}, op);
  }
  check_shape(dw, w.shape(), op, "dw");
  check_dtype(dw, DType::f32, op, "dw");
  check_same_device({&x, &w, &dy, &dw}, op);
  const bool with_dx = dx != nullptr, with_db = db != nullptr;
  if (with_dx) {
    check_shape(*dx, x.shape(), op, "dx");
    check_dtype(*dx, x.dtype(), op, "dx (same dtype as x)");
    check_same_device({&x, dx}, op);
  }
  if (with_db) {
    check_shape(*db, {d.cout}, op, "db");
    check_dtype(*db, DType::f32, op, "db");
    check_same_device({&x, db}, op);
  }
  float* part = nullptr;  // the CUDA path's dw/db partials, or null: allocated per call
  if (scratch && x.is_cuda()) {
    const std::int64_t need = MF_CUDA_ENTRY(kernels::conv2d_scratch_elems)(d);
    check_dtype(*scratch, DType::f32, op, "scratch");
    MF_CHECK(scratch->numel() >= need,
             "{}: scratch must hold at least conv2d_scratch_elems(N = {}, {}x{}x{} -> {}, k {}, stride {}) = {} f32 "
             "values, found {}",
             op, d.n, d.h, d.w, d.cin, d.cout, d.k, d.stride, need, scratch->str());
    check_same_device({&x, scratch}, op);
    part = scratch->data<float>();
  }
  auto fn = x.is_cuda() ? MF_CUDA_ENTRY(kernels::conv2d_backward_cuda) : kernels::conv2d_backward_cpu;
  fn(d, x.dtype(), x.raw(), w.raw(), relu ? y->raw() : nullptr, dy.raw(), with_dx ? dx->raw() : nullptr,
     dw.data<float>(), with_db ? db->data<float>() : nullptr, part, stream);
}

}  // namespace mf::ops
