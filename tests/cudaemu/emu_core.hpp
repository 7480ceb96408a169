// melforge's CUDA emulator (tests only): the execution model of a CUDA launch
// on the CPU, so every CUDA kernel's logic runs in CI where no GPU exists.
// A launch runs its blocks one after another; the threads of a block run as
// cooperative fibers on the calling OS thread (deterministic), switching only
// at __syncthreads and warp-collective operations. See tests/cudaemu/README.md.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mf_emu {

struct Idx3 {
  unsigned x = 0, y = 0, z = 0;
};

// The calling CUDA thread's coordinates (valid inside a kernel only).
const Idx3& thread_idx();
const Idx3& block_idx();
const Idx3& block_dim();
const Idx3& grid_dim();
int lane_id();  // linear thread index % 32

// __syncthreads: every live thread of the block arrives here (same call site)
// before any goes on. Divergent barriers and deadlocks abort with a report.
void syncthreads(const char* file, int line);

// Warp collective: each lane of the calling thread's warp named in `mask`
// deposits `bytes` bytes from `mine`; once all of them have arrived, `all`
// (32 * bytes, lane-major) receives every lane's bytes (lanes not in the mask
// or already exited: zero bytes). Every lane in `mask` must call it (the
// emulator aborts on a mismatch, like an illegal __shfl_sync on hardware).
void warp_exchange(unsigned mask, const void* mine, std::size_t bytes, void* all, const char* file, int line);

// The order in which a block's threads are resumed between synchronization
// points (default: MELFORGE_EMU_SCHEDULE=forward|reverse|shuffle, else
// forward). A result that changes with the order reveals a race: threads
// communicating through memory without a barrier between them.
enum class Schedule { forward, reverse, shuffle };
void set_schedule(Schedule s);

// Abort the running kernel with a message (emulates __trap / illegal use).
[[noreturn]] void kernel_fault(const char* what, const char* file, int line);

}  // namespace mf_emu
