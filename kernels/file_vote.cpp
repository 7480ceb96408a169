// CPU twin of file_vote: files split over threads, each file owned by one
// thread (deterministic for any thread count).
#include "kernels/file_vote.hpp"

#include "engine/parallel.hpp"
#include "kernels/file_vote_impl.hpp"

namespace mf::kernels {

void file_vote_cpu(const float* class_in, const float* leak_in, float* file_probs, std::int32_t* file_class,
                   float* file_leak_prob, std::int32_t* file_leak, const FileVoteArgs& d, cudaStream_t) {
  parallel_for(d.files, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t f = b; f < e; ++f)
      detail::file_vote_one(class_in, leak_in, file_probs, file_class, file_leak_prob, file_leak, d, f);
  }, 64);
}

}  // namespace mf::kernels
