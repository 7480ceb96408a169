// cast: element-wise dtype conversion, dst[i] = convert(src[i]).
// Float targets round to nearest even; NaN stays NaN; integer targets truncate.
// The CPU twin and the CUDA kernel share this signature (stream last; the CPU
// twin ignores it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/dtype.hpp"

namespace mf::kernels {

void cast_cpu(const void* src, DType src_type, void* dst, DType dst_type, std::int64_t n,
              cudaStream_t stream);
void cast_cuda(const void* src, DType src_type, void* dst, DType dst_type, std::int64_t n,
               cudaStream_t stream);

}  // namespace mf::kernels
