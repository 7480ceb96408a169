#include "kernels/ops.hpp"

#include "kernels/cast.hpp"
#include "kernels/file_vote.hpp"

namespace mf::ops {

void cast(const Tensor& src, Tensor& dst, cudaStream_t stream) {
  check_shape(dst, src.shape(), "cast", "dst");
  check_same_device({&src, &dst}, "cast");
  auto fn = src.is_cuda() ? kernels::cast_cuda : kernels::cast_cpu;
  fn(src.raw(), src.dtype(), dst.raw(), dst.dtype(), src.numel(), stream);
}

void file_vote(const Tensor& class_in, const Tensor& leak_in, std::int64_t files, std::int64_t longs,
               std::int64_t shorts, float threshold, bool logits, Tensor& file_probs, Tensor& file_class,
               Tensor& file_leak_prob, Tensor& file_leak, cudaStream_t stream) {
  MF_CHECK(files >= 0 && longs > 0 && shorts > 0,
           "file_vote: expected files >= 0 and long/short segment counts > 0, found F={} L={} S={}", files, longs,
           shorts);
  MF_CHECK(class_in.ndim() == 2, "file_vote: class_in must be [segments, classes], found {}", class_in.str());
  const std::int64_t n = files * longs * shorts, c = class_in.size(1);
  MF_CHECK(c >= 1 && c <= kernels::kFileVoteMaxClasses, "file_vote: expected 1..{} classes, found {}",
           kernels::kFileVoteMaxClasses, c);
  check_shape(class_in, {n, c}, "file_vote", "class_in");
  check_shape(leak_in, {n}, "file_vote", "leak_in");
  check_shape(file_probs, {files, c}, "file_vote", "file_probs");
  check_shape(file_class, {files}, "file_vote", "file_class");
  check_shape(file_leak_prob, {files}, "file_vote", "file_leak_prob");
  check_shape(file_leak, {files}, "file_vote", "file_leak");
  check_dtype(class_in, DType::f32, "file_vote", "class_in");
  check_dtype(leak_in, DType::f32, "file_vote", "leak_in");
  check_dtype(file_probs, DType::f32, "file_vote", "file_probs");
  check_dtype(file_class, DType::i32, "file_vote", "file_class");
  check_dtype(file_leak_prob, DType::f32, "file_vote", "file_leak_prob");
  check_dtype(file_leak, DType::i32, "file_vote", "file_leak");
  check_same_device({&class_in, &leak_in, &file_probs, &file_class, &file_leak_prob, &file_leak}, "file_vote");
  const kernels::FileVoteDims d{files, longs, shorts, int(c), threshold, logits};
  auto fn = class_in.is_cuda() ? kernels::file_vote_cuda : kernels::file_vote_cpu;
  fn(static_cast<const float*>(class_in.raw()), static_cast<const float*>(leak_in.raw()),
     static_cast<float*>(file_probs.raw()), static_cast<std::int32_t*>(file_class.raw()),
     static_cast<float*>(file_leak_prob.raw()), static_cast<std::int32_t*>(file_leak.raw()), d, stream);
}

}  // namespace mf::ops
