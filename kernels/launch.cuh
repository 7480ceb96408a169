// Launch configurations shared by the CUDA kernels: how many blocks a launch
// gets, and the block sizes that are not a kernel's own design choice.
//
// Two kinds of grid:
//   grid_for(n, threads, cap)  a grid-stride kernel (the loop covers what the
//                              grid does not): ceil(n / threads) blocks, at
//                              least 1, at most cap;
//   blocks_for(n, per_block)   a kernel that gives each block exactly
//                              per_block items and has no loop: ceil(n /
//                              per_block) blocks, no cap (0 for n == 0).
// A kernel whose block size is part of its algorithm (a reduction tree, a
// tile) names that size as a constant next to the kernel; the constants here
// are for kernels whose bits do not depend on the block or grid size.
// Host only; the emulated build (tests/cudaemu) compiles it as plain C++.
#pragma once

#include <cstdint>

namespace mf::cuda {

// Threads per block of an element-wise grid-stride kernel (one element per
// thread per iteration; any block size gives the same bits).
inline constexpr unsigned kElementwiseThreads = 256;

// The default cap on a grid-stride kernel's blocks (8 x 65535, far past what
// fills any GPU; the loop covers the rest).
inline constexpr unsigned kGridStrideMaxBlocks = 65535u * 8u;

// A cap for memory-bound grid-stride kernels that only need to fill the GPU:
// 16 blocks per SM of a 132-SM H100 (2112 blocks of 256 threads, two waves of
// full occupancy). Fewer blocks, each looping longer, cost less launch tail.
inline constexpr unsigned kFillGpuBlocks = 132u * 16u;

// Blocks for a grid-stride kernel over n items with `threads` items per block
// per iteration: ceil(n / threads), at least 1, at most max_blocks.
inline unsigned grid_for(std::int64_t n, unsigned threads, unsigned max_blocks = kGridStrideMaxBlocks) {
  const std::int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : (b > max_blocks ? max_blocks : b));
}

// Blocks for a kernel without a grid-stride loop, each block taking
// per_block of n items: ceil(n / per_block) (the caller keeps it below 2^31).
inline unsigned blocks_for(std::int64_t n, std::int64_t per_block) {
  return unsigned((n + per_block - 1) / per_block);
}

}  // namespace mf::cuda
