// file_vote on the device: one thread per file, grid-stride over files, so one
// launch covers any number of files. Each thread reads its file's L*S*(C+1)
// floats once (rows of consecutive threads are L*S*C floats apart: uncoalesced,
// but the whole input is a few MB and the kernel runs once per evaluation).
// Variant 1 (the simple, correct one); a warp-per-file variant can follow once
// a GPU run times this one.
#include "kernels/file_vote.hpp"

#include "engine/error.hpp"
#include "kernels/file_vote_impl.hpp"
#include "kernels/launch.cuh"

namespace mf::kernels {

namespace {
// A thread per file; the grid-stride loop covers files past kFileVoteMaxBlocks blocks.
constexpr unsigned kFileVoteThreads = 128;
constexpr unsigned kFileVoteMaxBlocks = 65535;

__global__ void file_vote_kernel(const float* __restrict__ class_in, const float* __restrict__ leak_in,
                                 float* __restrict__ file_probs, std::int32_t* __restrict__ file_class,
                                 float* __restrict__ file_leak_prob, std::int32_t* __restrict__ file_leak,
                                 FileVoteArgs d) {
  for (std::int64_t f = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; f < d.files;
       f += std::int64_t(gridDim.x) * blockDim.x)
    detail::file_vote_one(class_in, leak_in, file_probs, file_class, file_leak_prob, file_leak, d, f);
}
}  // namespace

void file_vote_cuda(const float* class_in, const float* leak_in, float* file_probs, std::int32_t* file_class,
                    float* file_leak_prob, std::int32_t* file_leak, const FileVoteArgs& d, cudaStream_t stream) {
  if (d.files == 0) return;
  const unsigned grid = cuda::grid_for(d.files, kFileVoteThreads, kFileVoteMaxBlocks);
  file_vote_kernel<<<grid, kFileVoteThreads, 0, stream>>>(class_in, leak_in, file_probs, file_class, file_leak_prob,
                                               file_leak, d);
  MF_CUDA_CHECK_LAUNCH();
}

}  // namespace mf::kernels
