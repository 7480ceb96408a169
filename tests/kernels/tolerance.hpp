// The relative L2 error the op suites allow between two computations of one
// op whose operands and result are held in dtype t: f32 results may differ by
// summation order only (1e-5); bf16 (8-bit mantissa) and f16 (11-bit) results
// are each rounded once, so one rounding of the output bounds the difference.
#pragma once

#include "engine/dtype.hpp"

namespace mf::testing {

inline double rel_l2_tolerance(DType t) { return t == DType::f32 ? 1e-5 : t == DType::bf16 ? 1e-2 : 2e-3; }

}  // namespace mf::testing
