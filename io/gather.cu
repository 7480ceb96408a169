// gather_rows CUDA kernel (variant 1, the only one): grid-stride over output
// words; word = uint4 when row_bytes and both base pointers are 16-byte
// aligned, else uint32 when 4-byte aligned, else bytes. One integer division
// per word (row = i / words_per_row): the copy is memory-bound regardless.
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/error.hpp"
#include "io/gather.hpp"

namespace mf::io {

namespace {
template <class W>
__global__ void gather_rows_kernel(const W* __restrict__ src, std::int64_t words, const std::int32_t* __restrict__ idx,
                                   std::int64_t total, W* __restrict__ dst) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / words, w = i - r * words;
    dst[i] = src[std::int64_t(idx[r]) * words + w];
  }
}

template <class W>
void launch(const void* src, std::int64_t row_bytes, const std::int32_t* idx, std::int64_t n, void* dst,
            cudaStream_t stream) {
  const std::int64_t words = row_bytes / std::int64_t(sizeof(W));
  const std::int64_t total = words * n;
  constexpr unsigned block = 256;
  std::int64_t blocks = (total + block - 1) / block;
  if (blocks > 65535LL * 16) blocks = 65535LL * 16;
  if (blocks < 1) blocks = 1;
  gather_rows_kernel<W><<<unsigned(blocks), block, 0, stream>>>(static_cast<const W*>(src), words, idx, total,
                                                              static_cast<W*>(dst));
  MF_CUDA_CHECK_LAUNCH();
}

bool aligned(const void* p, std::uintptr_t a) { return (reinterpret_cast<std::uintptr_t>(p) % a) == 0; }
}  // namespace

void gather_rows_cuda(const void* src, std::int64_t row_bytes, const std::int32_t* idx, std::int64_t n, void* dst,
                      cudaStream_t stream) {
  if (n == 0 || row_bytes == 0) return;
  if (row_bytes % 16 == 0 && aligned(src, 16) && aligned(dst, 16))
    launch<uint4>(src, row_bytes, idx, n, dst, stream);
  else if (row_bytes % 4 == 0 && aligned(src, 4) && aligned(dst, 4))
    launch<std::uint32_t>(src, row_bytes, idx, n, dst, stream);
  else
    launch<unsigned char>(src, row_bytes, idx, n, dst, stream);
}

}  // namespace mf::io
