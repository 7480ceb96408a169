// adamw's entry points for the benchmark and the tests only, kept out of
// kernels/adamw.hpp so the library's header shows what the library uses.
// Defined in the library (adamw.cpp, adamw.cu) beside what they expose:
//   bench/bench_step.cpp (melforge-bench adamw): adamw_step_per_tensor_cuda,
//     the unfused baseline the fused step is timed against;
//   tests/kernels/test_adamw.cpp, tests/model/step_fixture.hpp: lr_at, the LR
//     schedule the step's recorded lr is checked against.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/dtype.hpp"
#include "kernels/adamw.hpp"

namespace mf::kernels {

// The benchmark's baseline: the same step with pass 3 launched once per
// parameter range (ranges: `count` pairs [begin, end) in host memory), as an
// unfused optimizer does one launch per tensor. GPU only.
void adamw_step_per_tensor_cuda(const AdamWDims& d, const AdamWConfig& c, DType work_dtype,
                                float* master, const float* grad, float* m, float* v, void* work,
                                AdamWState* state, void* scratch, const std::int64_t* ranges,
                                int count, cudaStream_t stream);

// The LR schedule (the one both twins evaluate, adamw_common.hpp), in double.
double lr_at(const AdamWConfig& c, std::int64_t iteration);

}  // namespace mf::kernels
