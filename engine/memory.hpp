// Memory.
// - Device memory comes from CUDA's stream-ordered pool (cudaMallocAsync on the
//   device's default cudaMemPool, release threshold raised so freed blocks are
//   reused instead of returned to the driver): no hand-written caching allocator.
// - Pinned host buffers (PinnedBuffer) are allocated once and reused; without a
//   GPU they are ordinary aligned host memory, so the same code path runs.
// - Host memory is 64-byte aligned (cache lines, AVX-512 loads).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "engine/device.hpp"

namespace mf {

inline constexpr std::size_t kHostAlignment = 64;

void* host_alloc(std::size_t bytes);
void host_free(void* p) noexcept;

// Stream-ordered device allocation: the memory is usable by work queued on
// `stream` after this call, and returns to the pool when work queued on the
// free's stream before the free has finished.
void* device_alloc(std::size_t bytes, int device, cudaStream_t stream);
void device_free(void* p, cudaStream_t stream) noexcept;

struct PoolStats {
  std::uint64_t reserved = 0;   // bytes the pool holds from the driver
  std::uint64_t used = 0;       // bytes handed out
  std::uint64_t high_water = 0; // peak of `used`
};
PoolStats device_pool_stats(int device);
void reset_device_pool_high_water(int device);

// A page-locked host buffer (allocated once, reused for every batch). Falls
// back to aligned pageable memory when no GPU is present, or when pin is false
// (a caller that will not copy to a GPU: then the CUDA runtime is not touched,
// which saves its start-up on CPU-only runs).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes, bool pin = true);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;

  void* data() const { return ptr_; }
  std::size_t size() const { return bytes_; }
  bool pinned() const { return pinned_; }

 private:
  void release() noexcept;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  bool pinned_ = false;
};

}  // namespace mf
