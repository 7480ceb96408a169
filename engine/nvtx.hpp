// NVTX ranges for Nsight Systems / Compute: header-only NVTX3, in a "melforge"
// domain. Ranges cost a few ns when no profiler is attached.
#pragma once

#include <cuda_runtime_api.h>

namespace mf {

// Pushes a range on construction and pops it on destruction.
class NvtxRange {
 public:
  explicit NvtxRange(const char* name);
  ~NvtxRange();
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

void nvtx_name_stream(cudaStream_t stream, const char* name);
void nvtx_mark(const char* message);

}  // namespace mf

#define MF_NVTX_CONCAT2(a, b) a##b
#define MF_NVTX_CONCAT(a, b) MF_NVTX_CONCAT2(a, b)
// MF_NVTX_RANGE("forward"): a range until the end of the enclosing scope.
#define MF_NVTX_RANGE(name) ::mf::NvtxRange MF_NVTX_CONCAT(mf_nvtx_range_, __LINE__)(name)
