// Dispatch of angleproto_loss (kernels/ops.hpp; layouts and rules in
// kernels/angleproto.hpp): validate shapes, dtypes, devices and the dims with
// errors that name what was expected and found, then run the CPU twin or the
// CUDA kernels by the tensors' device.
#include <cmath>

#include "engine/cuda_entry.hpp"
#include "engine/error.hpp"
#include "kernels/angleproto.hpp"
#include "kernels/loss.hpp"
#include "kernels/op_scratch.hpp"
#include "kernels/ops.hpp"

namespace mf::ops {

namespace {

void check_dims(const kernels::AngleProtoArgs& d, const Tensor& emb, const char* op) {
  MF_CHECK(emb.ndim() == 2 && emb.size(1) >= 1, "{}: emb must be [N*M, D] with D >= 1, found {}", op, emb.str());
  check_float_dtype(emb, op, "emb");
  MF_CHECK(d.classes >= 2, "{}: at least 2 classes (N) are needed, found N = {}", op, d.classes);
  MF_CHECK(d.per_class >= 2,
           "{}: at least 2 segments per class (M: a query and a prototype) are needed, found M = {}", op,
           d.per_class);
  const std::int64_t rows = std::int64_t(d.classes) * d.per_class;
  MF_CHECK(emb.size(0) == rows, "{}: N = {} classes of M = {} segments configured (N*M = {} rows), emb {} has {}",
           op, d.classes, d.per_class, rows, emb.str(), emb.size(0));
  MF_CHECK(d.dim == emb.size(1), "{}: embedding size {} configured, emb {} has D = {}", op, d.dim, emb.str(),
           emb.size(1));
  MF_CHECK(std::isfinite(d.grad_scale), "{}: grad_scale must be finite, found {}", op, d.grad_scale);
}

// The f32 scratch of the CUDA path (kernels/op_scratch.hpp).
float* cuda_scratch(const kernels::AngleProtoArgs& d, const Tensor& emb, Tensor* scratch, Tensor& owned,
                    cudaStream_t stream, const char* op) {
  const auto sizing = [&] { return fmt::format("angleproto_scratch_elems(N = {}, D = {})",
                                            d.classes, d.dim); };
  return scratch_or_per_call(scratch, kernels::angleproto_scratch_elems(d.classes, d.dim), sizing, emb, owned,
                             stream, op);
}

}  // namespace

void angleproto_loss(const Tensor& emb, const Tensor& wb, const kernels::AngleProtoArgs& d, Tensor& demb,
                     Tensor& dwb, Tensor& sums, Tensor& counts, const float* loss_scale, Tensor* step_loss,
                     Tensor* scratch, cudaStream_t stream) {
  constexpr const char* op = "angleproto_loss";
  check_dims(d, emb, op);
  check_shape(wb, {2}, op, "wb (w, b)");
  check_dtype(wb, DType::f32, op, "wb (w, b)");
  check_shape(demb, emb.shape(), op, "demb (emb's shape)");
  check_dtype(demb, emb.dtype(), op, "demb (emb's dtype)");
  check_shape(dwb, {2}, op, "dwb (dw, db)");
  check_dtype(dwb, DType::f32, op, "dwb (dw, db)");
  check_shape(sums, {kernels::kLossSums}, op, "sums");
  check_dtype(sums, DType::f32, op, "sums");
  MF_CHECK(counts.ndim() == 1 && counts.size(0) >= kernels::kLossCounts,
           "{}: counts must be [{}] or longer (only the first {} are updated), found {}", op, kernels::kLossCounts,
           kernels::kLossCounts, counts.str());
  check_dtype(counts, DType::i32, op, "counts");
  check_same_device({&emb, &wb, &demb, &dwb, &sums, &counts}, op);
  if (step_loss) {
    check_shape(*step_loss, {1}, op, "step_loss");
    check_dtype(*step_loss, DType::f32, op, "step_loss");
    check_same_device({&emb, step_loss}, op);
  }
  float* sl = step_loss ? step_loss->data<float>() : nullptr;
  if (emb.is_cuda()) {
    Tensor owned;
    float* s = cuda_scratch(d, emb, scratch, owned, stream, op);
    MF_CUDA_ENTRY(kernels::angleproto_loss_cuda)(d, emb.dtype(), emb.raw(), wb.data<float>(), loss_scale, demb.raw(),
                                  dwb.data<float>(), sums.data<float>(), counts.data<std::int32_t>(), sl, s, stream);
  } else {
    kernels::angleproto_loss_cpu(d, emb.dtype(), emb.raw(), wb.data<float>(), loss_scale, demb.raw(),
                                 dwb.data<float>(), sums.data<float>(), counts.data<std::int32_t>(), sl, nullptr,
                                 stream);
  }
}

}  // namespace mf::ops
