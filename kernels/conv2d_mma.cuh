// conv2d's CUDA variants as seen by the dispatch in kernels/conv2d.cu (internal
// to the two .cu files; the public selector is in kernels/conv2d.hpp).
//
// Variant 2, "mma" (kernels/conv2d_mma.cu): bf16/f16 implicit GEMMs on tensor
// cores. Each launcher returns false, having queued nothing, when it cannot run
// the shape, dtype, alignment or GPU (the caller then runs variant 1).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/dtype.hpp"
#include "kernels/conv2d.hpp"

namespace mf::kernels {

// The shape/dtype/GPU conditions of the mma variant (pointer alignment is
// checked by each launcher): bf16/f16, Cin and Cout multiples of 16, sm_80+.
bool conv2d_mma_can_run(const Conv2dDims& d, DType dtype);

// y = act(conv(x, w) + b). Needs x, w 16-byte aligned, y 4-byte.
bool conv2d_mma_forward(const Conv2dDims& d, DType dtype, const void* x, const void* w, const void* b, void* y,
                        cudaStream_t stream);
// dx from the (already masked) dy. Needs w, dy 16-byte aligned, dx 4-byte.
bool conv2d_mma_dx(const Conv2dDims& d, DType dtype, const void* w, const void* dy, void* dx, cudaStream_t stream);
// dw/db partials of `chunks` fixed pixel ranges (range c = pixels [P*c/chunks,
// P*(c+1)/chunks), P = N*OH*OW) into part[(c * Cout + co) * (k*k*Cin + 1) + j]
// (j < k*k*Cin: dw[co][j]; j = k*k*Cin: db[co]), the layout conv2d.cu's
// reduction sums in chunk order. Needs x, dy 16-byte aligned.
bool conv2d_mma_dw_partials(const Conv2dDims& d, DType dtype, const void* x, const void* dy, int chunks,
                            float* part, cudaStream_t stream);

}  // namespace mf::kernels
