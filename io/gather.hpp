// gather_rows: dst row r = src row idx[r], for r in [0, n). Rows are opaque
// bytes (row_bytes each), so one kernel serves segments in any dtype, labels,
// leak flags and file ids. The resident-mode reader uses it to build batches
// from a dataset held in device (or host) memory.
// CUDA: one grid-stride loop over the n * words words of the output, with
// 16-, 4- or 1-byte words chosen by the alignment of row_bytes and pointers.
// Reads and writes row_bytes per row; memory-bound.
// The CPU twin (threaded, deterministic) and the CUDA launcher share the
// signature; the CPU twin ignores the stream. idx values must be in range
// (the caller, io/reader.cpp, builds them from the dataset's own count).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mf::io {

void gather_rows_cpu(const void* src, std::int64_t row_bytes, const std::int32_t* idx, std::int64_t n, void* dst,
                     cudaStream_t stream);
void gather_rows_cuda(const void* src, std::int64_t row_bytes, const std::int32_t* idx, std::int64_t n, void* dst,
                      cudaStream_t stream);

}  // namespace mf::io
