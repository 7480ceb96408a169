// AVX-512 loops of the AdamW CPU twin (kernels/adamw.cpp), run when
// the avx512 CPU kernels are active (engine/cpu_kernels.hpp). Unlike the conv and GEMM
// kernels they give the twin's bits exactly: the same IEEE operations (mul,
// add, div, sqrt: correctly rounded in every lane) in the same order, no FMA,
// and the same eight-lane order for the norm's double sums. test_adamw checks
// that bit for bit.
#pragma once

#include <cstdint>

namespace mf::kernels {

// The per-step scalars of update_element (kernels/adamw_common.hpp).
struct AdamWLaneScalars {
  float coef, decay_factor, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, bc2_sqrt, eps;
};

// Over i < n with g = grad[i] * inv_scale (f32): *nonfinite = how many g are
// not finite; *sumsq = the sum of double(g)^2 over the finite ones, as 8
// double lanes (lane l takes i = l, l + 8, l + 16, ... in order) added lane 0
// first.
void adamw_sumsq_avx512(const float* grad, std::int64_t n, float inv_scale, double* sumsq, long long* nonfinite);

// update_element for i in [begin, end): decay for i < decay_end.
void adamw_update_avx512(const AdamWLaneScalars& s, std::int64_t begin, std::int64_t end, std::int64_t decay_end,
                         float* master, const float* grad, float* m, float* v);

}  // namespace mf::kernels
