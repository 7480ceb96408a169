#include "io/gather.hpp"

#include <cstring>

#include "engine/parallel.hpp"

namespace mf::io {

void gather_rows_cpu(const void* src, std::int64_t row_bytes, const std::int32_t* idx, std::int64_t n, void* dst,
                     cudaStream_t) {
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  // Memory-bound: threads help little on a few cores, and an OpenMP barrier costs a
  // time slice when cores are shared, so split only copies of several MiB.
  const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t(4) << 20) / std::max<std::int64_t>(1, row_bytes));
  parallel_for(
      n,
      [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t r = b; r < e; ++r)
          std::memcpy(d + r * row_bytes, s + std::int64_t(idx[r]) * row_bytes, std::size_t(row_bytes));
      },
      grain);
}

}  // namespace mf::io
