#include "engine/memory.hpp"

#include <cuda_runtime.h>

#include <cstdlib>
#include <limits>
#include <mutex>
#include <utility>

#include "engine/error.hpp"

namespace mf {

void* host_alloc(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  const std::size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  void* p = std::aligned_alloc(kHostAlignment, rounded);
  MF_CHECK(p != nullptr, "out of host memory: could not allocate {} bytes", bytes);
  return p;
}

void host_free(void* p) noexcept { std::free(p); }

namespace {
// Raise the default pool's release threshold once per device, so memory freed
// at the end of a step stays in the pool for the next one.
void configure_pool(int device) {
  static std::once_flag flags[64];
  if (device < 0 || device >= 64) return;
  std::call_once(flags[device], [device] {
    cudaMemPool_t pool;
    MF_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
    MF_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  });
}
}  // namespace

void* device_alloc(std::size_t bytes, int device, cudaStream_t stream) {
  if (bytes == 0) return nullptr;
  configure_pool(device);
  MF_CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  const cudaError_t st = cudaMallocAsync(&p, bytes, stream);
  if (st == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    std::size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    MF_THROW("out of GPU memory on cuda:{}: asked for {:.1f} MiB, {:.1f} MiB free of {:.1f} MiB; "
             "try a smaller --batch-size",
             device, bytes / 1048576.0, free_b / 1048576.0, total_b / 1048576.0);
  }
  MF_CUDA_CHECK(st);
  return p;
}

void device_free(void* p, cudaStream_t stream) noexcept {
  if (p) MF_CUDA_CHECK_PRINT(cudaFreeAsync(p, stream));
}

PoolStats device_pool_stats(int device) {
  cudaMemPool_t pool;
  MF_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  PoolStats s;
  MF_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &s.reserved));
  MF_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &s.used));
  MF_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &s.high_water));
  return s;
}

void reset_device_pool_high_water(int device) {
  cudaMemPool_t pool;
  MF_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  std::uint64_t zero = 0;
  MF_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
}

PinnedBuffer::PinnedBuffer(std::size_t bytes, bool pin) : bytes_(bytes) {
  if (bytes == 0) return;
  if (pin && gpu_available()) {
    MF_CUDA_CHECK(cudaHostAlloc(&ptr_, bytes, cudaHostAllocPortable));
    pinned_ = true;
  } else {
    ptr_ = host_alloc(bytes);
  }
}

void PinnedBuffer::release() noexcept {
  if (!ptr_) return;
  if (pinned_) MF_CUDA_CHECK_PRINT(cudaFreeHost(ptr_));
  else host_free(ptr_);
  ptr_ = nullptr;
}

PinnedBuffer::~PinnedBuffer() { release(); }

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)),
      pinned_(std::exchange(o.pinned_, false)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    release();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    pinned_ = std::exchange(o.pinned_, false);
  }
  return *this;
}

}  // namespace mf
