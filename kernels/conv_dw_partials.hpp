// The CPU convs' dw/db reduction (conv_relu_pool and conv2d on the CPU):
// conv output rows are cut into a number of chunks that depends only on the
// shape, each chunk accumulates its own partial [k][k][Cin][Coutp] + [Coutp]
// in row order, then the partials are summed in chunk order and transposed
// to dw [Cout][k][k][Cin] and db [Cout]. Bit-identical for any thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/parallel.hpp"

namespace mf::kernels {

// The number of partials for `conv_rows` conv output rows (all images): at
// least kMinRowsPerChunk rows each, at most kMaxWeightChunks. Each partial
// costs about as much memory traffic (zeroing, the final sum) as 2-4 conv rows
// of dw arithmetic, so small batches get fewer, fuller chunks.
inline std::int64_t dw_partial_chunks(std::int64_t conv_rows) {
  constexpr std::int64_t kMaxWeightChunks = 64;
  constexpr std::int64_t kMinRowsPerChunk = 32;
  return conv_rows <= 0 ? 0 : std::clamp<std::int64_t>(conv_rows / kMinRowsPerChunk, 1, kMaxWeightChunks);
}

// dw works on up to this many consecutive conv rows of one image at a time
// (their input rows loaded once; the FMA kernels keep their sums in registers
// across all of them).
inline constexpr int kDwGroup = 8;

// Room for the partials: `floats` floats of the calling thread's buffer,
// kept from call to call (a fresh multi-megabyte allocation per call costs
// page faults and zeroing that rival the dw arithmetic of small layers) up to
// kKeptPartialFloats; a larger request gets a buffer of its own size, freed
// at the thread's next call. The contents are not initialised: each chunk
// zeroes its own partial first. Valid until the calling thread's next call.
inline constexpr std::int64_t kKeptPartialFloats = std::int64_t(16) << 20;  // 64 MB
inline float* dw_partials_scratch(std::int64_t floats) {
  thread_local std::vector<float> buf;
  if (std::int64_t(buf.size()) < floats || std::int64_t(buf.size()) > kKeptPartialFloats) {
    buf = std::vector<float>();  // release the old one before the new allocation
    buf.resize(std::size_t(floats));
  }
  return buf.data();
}

// `chunks` partials of `part` floats each (dwt [k*k*cin][coutp], then db
// [coutp]): summed in chunk order into partial 0, then written to dw
// [cout][k*k*cin] and db [cout] (db may be null). chunks = 0 writes zeros.
inline void reduce_dw_partials(float* partials, std::int64_t chunks, std::int64_t part, int kk_cin, int cout,
                               int coutp, float* dw, float* db) {
  float* sum = partials;
  parallel_for(part, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = 1; c < chunks; ++c) {
      const float* src = partials + c * part;
      for (std::int64_t i = begin; i < end; ++i) sum[i] += src[i];
    }
  }, 4096);
  parallel_for(cout, [&](std::int64_t co0, std::int64_t co1) {
    for (std::int64_t co = co0; co < co1; ++co) {
      for (std::int64_t m = 0; m < kk_cin; ++m) dw[co * kk_cin + m] = chunks > 0 ? sum[m * coutp + co] : 0.f;
      if (db) db[co] = chunks > 0 ? sum[part - coutp + co] : 0.f;
    }
  });
}

}  // namespace mf::kernels
