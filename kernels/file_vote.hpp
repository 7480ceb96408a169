// File-level voting: from per-segment outputs of a file-structured dataset to
// one decision per audio file, for many files in one launch.
//
// Layout: segments are ordered file-major, [F, L, S] (F files, L long
// segments per file, S short segments per long segment), so segment
// (f, l, s) is row (f * L + l) * S + s.
//   class_in  [F*L*S, C] f32: class probabilities, or logits when dims.logits
//   leak_in   [F*L*S]    f32: leak probability, or leak logit when dims.logits
// leak_in null (a model without the leak head): file_leak_prob and file_leak
// are not written (may be null); the class vote is unchanged.
// Outputs (every element written):
//   file_probs      [F, C] f32: mean over long segments of the long-segment mean probabilities
//   file_class      [F]    i32: the vote (below)
//   file_leak_prob  [F]    f32: mean over long segments of the long-segment mean leak probability
//   file_leak       [F]    i32: 0/1 leak decision (below)
//
// Rules. A long segment's class probabilities are the mean of its S short
// segments'; its class vote is their argmax (lowest class on a tie). The file's
// class is the class with the most long-segment votes; a tie between classes
// is broken by the larger file-mean probability, then by the lower class index.
// A long segment votes "leak" when its mean leak probability is >= threshold;
// the file is a leak when more than half of its long segments vote leak, not a
// leak when fewer than half do, and on an exact tie when its mean leak
// probability is >= threshold.
//
// Precision: f32 sums in a fixed order (s, then l), divisions by S and L, no
// fused multiply-adds that could differ between the twins; with probabilities
// as input the CPU twin and the CUDA kernel agree bit for bit. With logits the
// softmax/sigmoid use expf, which may differ by an ulp between the two.
// One CUDA thread per file (files are independent; L*S*C is small).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mf::kernels {

inline constexpr int kFileVoteMaxClasses = 64;

struct FileVoteArgs {
  std::int64_t files = 0;  // F
  std::int64_t longs = 0;  // L
  std::int64_t shorts = 0; // S
  int classes = 0;         // C, 1..kFileVoteMaxClasses
  float threshold = 0.5f;
  bool logits = false;     // inputs are logits: softmax (class) and sigmoid (leak) first
};

void file_vote_cpu(const float* class_in, const float* leak_in, float* file_probs, std::int32_t* file_class,
                   float* file_leak_prob, std::int32_t* file_leak, const FileVoteArgs& d, cudaStream_t stream);
void file_vote_cuda(const float* class_in, const float* leak_in, float* file_probs, std::int32_t* file_class,
                    float* file_leak_prob, std::int32_t* file_leak, const FileVoteArgs& d, cudaStream_t stream);

}  // namespace mf::kernels
