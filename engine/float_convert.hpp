// Whole-buffer host conversion between the float storage types (f32, f16,
// bf16) and the search for non-finite values (NaN, Inf) in them: the data
// reader's hot path (io/), weight import and export (model/host_array.hpp).
//
// Results are bit for bit those of engine/dtype.hpp's scalar conversions:
// round to nearest even, Inf kept, NaN kept a NaN (quiet, sign and top
// payload bits kept), subnormals exact. On x86 with AVX2 + F16C the common
// pairs take a fused single pass (check + convert reading each source element
// once); elsewhere blocks go through f32.
#pragma once

#include <cstdint>

#include "engine/dtype.hpp"

namespace mf {

// Converts n elements at src (src_type) into dst (dst_type). Both types must
// be f32, f16 or bf16 (else mf::Error naming the type). src == dst is allowed
// only when the types are equal (then only the check runs). With check, returns
// the index of the first non-finite source element, or -1 when every one is
// finite (dst is then fully or partly written); without check, returns -1.
std::int64_t convert_floats(const void* src, DType src_type, void* dst, DType dst_type, std::int64_t n,
                            bool check);

// The index of the first non-finite element among n elements of a float type
// (f32, f16 or bf16, else mf::Error), or -1 when there is none.
std::int64_t first_nonfinite(const void* data, DType type, std::int64_t n);

// Element i of a float buffer as f32 (one element: for messages, not loops).
float float_at(const void* data, DType type, std::int64_t i);

}  // namespace mf
