// Dispatch of trial_scores (kernels/ops.hpp; rules in kernels/trial_scores.hpp):
// validate shapes, dtypes and devices with errors that name what was expected
// and found, then run the CPU twin or the CUDA kernel by emb's device.
#include "engine/cuda_entry.hpp"
#include "engine/error.hpp"
#include "kernels/ops.hpp"
#include "kernels/trial_scores.hpp"

namespace mf::ops {

void trial_scores(const Tensor& emb, const Tensor& pairs, Tensor& scores, cudaStream_t stream) {
  constexpr const char* op = "trial_scores";
  MF_CHECK(emb.ndim() == 2, "{}: emb must be [files, dim], found {}", op, emb.str());
  check_dtype(emb, DType::f32, op, "emb");
  MF_CHECK(emb.size(0) <= 0x7fffffff, "{}: emb has {} files; i32 indices reach at most 2^31 - 1", op, emb.size(0));
  MF_CHECK(pairs.ndim() == 2 && pairs.size(1) == 2, "{}: pairs must be [trials, 2], found {}", op, pairs.str());
  check_dtype(pairs, DType::i32, op, "pairs");
  check_shape(scores, {pairs.size(0)}, op, "scores ([trials])");
  check_dtype(scores, DType::f32, op, "scores");
  check_same_device({&emb, &pairs, &scores}, op);
  kernels::TrialScoresDims d;
  d.files = emb.size(0);
  d.dim = emb.size(1);
  d.trials = pairs.size(0);
  MF_CHECK(d.trials <= std::int64_t(1) << 33, "{}: {} trials; at most 2^33 fit one call (split them)", op, d.trials);
  if (d.trials == 0) return;
  const auto* e = static_cast<const float*>(emb.raw());
  const auto* p = static_cast<const std::int32_t*>(pairs.raw());
  auto* s = static_cast<float*>(scores.raw());
  if (emb.is_cuda()) MF_CUDA_ENTRY(kernels::trial_scores_cuda)(d, e, p, s, stream);
  else kernels::trial_scores_cpu(d, e, p, s, stream);
}

}  // namespace mf::ops
