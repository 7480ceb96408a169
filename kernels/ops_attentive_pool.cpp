// Dispatch of attentive_pool (kernels/ops.hpp; layouts in
// kernels/attentive_pool.hpp): shapes, dtypes and devices are checked, then
// the CPU twin or the CUDA kernels run on the tensors' device.
#include <limits>

#include "engine/cuda_entry.hpp"
#include "kernels/attentive_pool.hpp"
#include "kernels/ops.hpp"

namespace mf::ops {

namespace {

// Checks everything forward and backward share and returns the dims. v may be
// [A] or PyTorch's [A, 1].
kernels::AttentivePoolDims attentive_pool_dims(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& v,
                                               bool stats, const char* op) {
  MF_CHECK(x.ndim() == 4, "{}: x must be [N, H, W, C] (nhwc), found {}", op, x.str());
  check_float_dtype(x, op, "x");
  MF_CHECK(w.ndim() == 2, "{}: w must be [A, C], found {}", op, w.str());
  const std::int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3), A = w.size(0);
  constexpr std::int64_t kMax = std::numeric_limits<int>::max() / 2;
  MF_CHECK(H >= 1 && W >= 1 && C >= 1 && A >= 1 && H <= kMax && W <= kMax && C <= kMax && A <= kMax,
           "{}: expected H, W, C (x [N, H, W, C]) and A (w [A, C]) in 1..{}, found x {} and w {}", op, kMax,
           x.str(), w.str());
  check_shape(w, {A, C}, op, "w");
  check_shape(b, {A}, op, "b");
  if (v.ndim() == 2)
    check_shape(v, {A, 1}, op, "v");
  else
    check_shape(v, {A}, op, "v");
  for (const Tensor* t : {&w, &b, &v}) check_dtype(*t, x.dtype(), op, "w, b and v (the dtype of x)");
  check_same_device({&x, &w, &b, &v}, op);
  return {N, int(H), int(W), int(C), int(A), stats};
}

void check_saved(const Tensor& saved, const Tensor& x, const kernels::AttentivePoolDims& d, const char* op) {
  const std::int64_t need = kernels::attentive_pool_saved_elems(d.n, d.w, d.c, d.a, d.stats);
  MF_CHECK(saved.numel() >= need,
           "{}: saved must hold attentive_pool_saved_elems(N={}, W={}, C={}, A={}, stats={}) = {} floats, "
           "found {}",
           op, d.n, d.w, d.c, d.a, d.stats, need, saved.str());
  check_dtype(saved, DType::f32, op, "saved");
  check_same_device({&x, &saved}, op);
}

}  // namespace

void attentive_pool_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& v, bool stats,
                            Tensor& y, Tensor* saved, cudaStream_t stream) {
  constexpr const char* op = "attentive_pool_forward";
  const kernels::AttentivePoolDims d = attentive_pool_dims(x, w, b, v, stats, op);
  check_shape(y, {d.n, d.out_c()}, op, stats ? "y ([N, 2C] with stats)" : "y ([N, C] without stats)");
  check_dtype(y, x.dtype(), op, "y (the dtype of x)");
  check_same_device({&x, &y}, op);
  if (saved) check_saved(*saved, x, d, op);
  float* s = saved ? static_cast<float*>(saved->raw()) : nullptr;
  auto fn = x.is_cuda() ? MF_CUDA_ENTRY(kernels::attentive_pool_forward_cuda) : kernels::attentive_pool_forward_cpu;
  fn(d, x.dtype(), x.raw(), w.raw(), b.raw(), v.raw(), y.raw(), s, stream);
}

void attentive_pool_backward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& v, const Tensor& saved,
                             const Tensor& dy, bool stats, Tensor& dx, Tensor& dw, Tensor& db, Tensor& dv,
                             cudaStream_t stream) {
  constexpr const char* op = "attentive_pool_backward";
  const kernels::AttentivePoolDims d = attentive_pool_dims(x, w, b, v, stats, op);
  check_saved(saved, x, d, op);
  check_shape(dy, {d.n, d.out_c()}, op, stats ? "dy ([N, 2C] with stats)" : "dy ([N, C] without stats)");
  check_dtype(dy, x.dtype(), op, "dy (the dtype of x)");
  check_shape(dx, x.shape(), op, "dx (the shape of x)");
  check_dtype(dx, x.dtype(), op, "dx (the dtype of x)");
  check_shape(dw, w.shape(), op, "dw (the shape of w)");
  check_shape(db, {d.a}, op, "db");
  check_shape(dv, v.shape(), op, "dv (the shape of v)");
  for (const Tensor* t : {&dw, &db, &dv}) check_dtype(*t, DType::f32, op, "dw, db and dv");
  check_same_device({&x, &dy, &dx, &dw, &db, &dv}, op);
  // saved is const here as the handle, but its scratch regions (de .. dwp) are
  // written: the backward's workspace lives in the caller's buffer.
  auto fn = x.is_cuda() ? MF_CUDA_ENTRY(kernels::attentive_pool_backward_cuda) : kernels::attentive_pool_backward_cpu;
  fn(d, x.dtype(), w.raw(), v.raw(), static_cast<float*>(saved.raw()), dy.raw(), dx.raw(),
     static_cast<float*>(dw.raw()), static_cast<float*>(db.raw()), static_cast<float*>(dv.raw()), stream);
}

}  // namespace mf::ops
