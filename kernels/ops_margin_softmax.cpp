// Dispatch of margin_softmax_loss (kernels/ops.hpp; layouts and rules in
// kernels/margin_softmax.hpp): validate shapes, dtypes, devices and the dims
// with errors that name what was expected and found, then run the CPU twin or
// the CUDA kernels by the tensors' device.
#include <cmath>
#include <numbers>

#include "engine/cuda_entry.hpp"
#include "engine/error.hpp"
#include "kernels/loss.hpp"
#include "kernels/margin_softmax.hpp"
#include "kernels/op_scratch.hpp"
#include "kernels/ops.hpp"

namespace mf::ops {

namespace {

void check_dims(const kernels::MarginSoftmaxArgs& d, const Tensor& emb, const Tensor& weight, const char* op) {
  MF_CHECK(emb.ndim() == 2 && emb.size(1) >= 1, "{}: emb must be [B, D] with D >= 1, found {}", op, emb.str());
  check_float_dtype(emb, op, "emb");
  const std::int64_t B = emb.size(0), D = emb.size(1);
  MF_CHECK(weight.ndim() == 2 && weight.size(1) == D && weight.size(0) >= 1,
           "{}: weight must be [C, D = {}] with C >= 1 (one row per class), found {}", op, D, weight.str());
  check_dtype(weight, emb.dtype(), op, "weight (emb's dtype)");
  check_same_device({&emb, &weight}, op);
  const std::int64_t C = weight.size(0);
  MF_CHECK(d.batch == B, "{}: batch {} configured, emb {} holds {}", op, d.batch, emb.str(), B);
  MF_CHECK(d.dim == D, "{}: embedding size {} configured, emb {} has D = {}", op, d.dim, emb.str(), D);
  MF_CHECK(d.classes == C, "{}: {} classes configured, weight {} has {} rows", op, d.classes, weight.str(), C);
  MF_CHECK(std::isfinite(d.scale) && d.scale > 0.f, "{}: the scale s must be finite and > 0, found {}", op,
           d.scale);
  MF_CHECK(std::isfinite(d.grad_scale), "{}: grad_scale must be finite, found {}", op, d.grad_scale);
  if (d.type == kernels::MarginType::aam)
    MF_CHECK(std::isfinite(d.margin) && d.margin >= 0.f && d.margin < float(std::numbers::pi),
             "{}: the aam margin must be an angle in [0, pi), found {}", op, d.margin);
  else
    MF_CHECK(std::isfinite(d.margin), "{}: the am margin must be finite, found {}", op, d.margin);
}

// The f32 scratch of the CUDA path (kernels/op_scratch.hpp).
float* cuda_scratch(const kernels::MarginSoftmaxArgs& d, const Tensor& emb, Tensor* scratch, Tensor& owned,
                    cudaStream_t stream, const char* op) {
  const auto sizing = [&] { return fmt::format("margin_softmax_scratch_elems(B = {}, C = {}, D = {})",
                                            d.batch, d.classes, d.dim); };
  const std::int64_t need = kernels::margin_softmax_scratch_elems(d.batch, d.classes, d.dim);
  return scratch_or_per_call(scratch, need, sizing, emb, owned, stream, op);
}

}  // namespace

void margin_softmax_loss(const Tensor& emb, const Tensor& weight, const Tensor& labels,
                         const kernels::MarginSoftmaxArgs& d, Tensor& demb, Tensor& dweight, Tensor& sums,
                         Tensor& counts, const float* loss_scale, Tensor* step_loss, Tensor* scratch,
                         cudaStream_t stream) {
  constexpr const char* op = "margin_softmax_loss";
  check_dims(d, emb, weight, op);
  const std::int64_t B = emb.size(0), C = weight.size(0);
  check_shape(labels, {B}, op, "labels");
  check_dtype(labels, DType::i32, op, "labels");
  check_shape(demb, emb.shape(), op, "demb (emb's shape)");
  check_dtype(demb, emb.dtype(), op, "demb (emb's dtype)");
  check_shape(dweight, weight.shape(), op, "dweight (weight's shape)");
  check_dtype(dweight, DType::f32, op, "dweight");
  check_shape(sums, {kernels::kLossSums}, op, "sums");
  check_dtype(sums, DType::f32, op, "sums");
  const std::int64_t full = kernels::kLossCounts + C * C;
  MF_CHECK(counts.ndim() == 1 && (counts.size(0) == kernels::kLossCounts || counts.size(0) == full),
           "{}: counts must be [{}] (no confusion matrix) or [{} + C*C = {}], found {}", op, kernels::kLossCounts,
           kernels::kLossCounts, full, counts.str());
  check_dtype(counts, DType::i32, op, "counts");
  check_same_device({&emb, &labels, &demb, &dweight, &sums, &counts}, op);
  if (step_loss) {
    check_shape(*step_loss, {1}, op, "step_loss");
    check_dtype(*step_loss, DType::f32, op, "step_loss");
    check_same_device({&emb, step_loss}, op);
  }
  const bool confusion = counts.size(0) == full;
  float* sl = step_loss ? step_loss->data<float>() : nullptr;
  if (emb.is_cuda()) {
    Tensor owned;
    float* s = cuda_scratch(d, emb, scratch, owned, stream, op);
    MF_CUDA_ENTRY(kernels::margin_softmax_loss_cuda)(d, emb.dtype(), emb.raw(), weight.raw(), labels.data<std::int32_t>(),
                                      loss_scale, demb.raw(), dweight.data<float>(), sums.data<float>(),
                                      counts.data<std::int32_t>(), confusion, sl, s, stream);
  } else {
    kernels::margin_softmax_loss_cpu(d, emb.dtype(), emb.raw(), weight.raw(), labels.data<std::int32_t>(),
                                     loss_scale, demb.raw(), dweight.data<float>(), sums.data<float>(),
                                     counts.data<std::int32_t>(), confusion, sl, nullptr, stream);
  }
}

}  // namespace mf::ops
