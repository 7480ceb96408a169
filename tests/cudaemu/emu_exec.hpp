// Internal to the emulator: run one launch's grid (called by the runtime,
// with the launch lock held), and the hooks between the block executor
// (emu_core.cpp), the runtime (emu_runtime.cpp) and the asynchronous copies
// (emu_async.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "tests/cudaemu/emu_core.hpp"

namespace mf_emu {

void run_grid(const Idx3& grid, const Idx3& block, const std::function<void()>& body, const char* kernel);

// The calling CUDA thread's linear index in its block (inside a kernel only).
int linear_thread_id();

// Per-thread cp.async state (emu_async.cpp): reset when a block starts; when
// every thread of the block has exited, the copies still pending complete.
void async_block_begin(int nthreads);
void async_block_end();

// What an address is, for the checks of ldmatrix and cp.async (runtime).
enum class Space {
  dynamic_shared,  // inside the running block's dynamic shared memory
  allocation,      // inside a live cudaMalloc / cudaMallocAsync / cudaHostAlloc block
  past_end,        // in the padding after such a block (an out-of-bounds access)
  other,           // anything else: static __shared__ arrays, host memory
};
struct Located {
  Space space = Space::other;
  std::uintptr_t base = 0;  // of the allocation or of the dynamic shared memory
  std::size_t size = 0;     // its size in bytes (as requested)
  bool device = false;      // allocation: device memory (else pinned host memory)
};
Located locate(const void* p);

}  // namespace mf_emu
