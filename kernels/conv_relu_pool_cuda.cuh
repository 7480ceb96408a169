// Pieces shared by the CUDA variants of conv_relu_pool (included by .cu files
// only): the dw/db workspace and its fixed-order reduction, and the entry points
// of the faster variants. Each variant's launcher returns false when it cannot
// run the shape (or the GPU), and the caller falls back to a simpler one.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/conv_relu_pool.hpp"

namespace mf::kernels {

// Host helpers every launcher uses (one home; defined in conv_relu_pool.cu
// unless inline; a storage type's DType is engine/dtype.hpp's dtype_of_v).
// A null pointer counts as aligned: it is an absent optional tensor (dx of
// the first layer, no codes wanted).
inline bool aligned_to(const void* p, std::uintptr_t bytes) {
  return p == nullptr || (reinterpret_cast<std::uintptr_t>(p) & (bytes - 1)) == 0;
}
// Whether the current GPU has mma.sync m16n8k16, ldmatrix and cp.async (sm_80+).
bool gpu_is_sm80_or_newer();

// The number of dw/db partial chunks: a function of the shape only (never of
// the GPU or of timing), so the summation order and the bits are fixed.
// Conv rows (n, oh) are split into this many contiguous ranges; the workspace
// holds chunks * floats_per_chunk floats (kept under ~64 MiB). Used by the
// direct, tiled and mma variants; the resident and cin1 kernels split by their
// own tiles under the same rule (shape-only count, <= 64 MiB).
int conv_weight_chunks(const ConvReluPoolDims& d, std::int64_t floats_per_chunk);

// Stream-ordered f32 workspace from the device pool (engine/memory.hpp).
class WeightPartials {
 public:
  WeightPartials(std::size_t floats, cudaStream_t stream);
  ~WeightPartials();
  WeightPartials(const WeightPartials&) = delete;
  WeightPartials& operator=(const WeightPartials&) = delete;
  float* data() const { return ptr_; }

 private:
  float* ptr_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// part[(chunk * cout + co) * (k*k*cin + 1) + j] -> dw[co * k*k*cin + j] (j < k*k*cin)
// and db[co] (j = k*k*cin), summed over the chunks in a fixed order that depends
// on the chunk count only (reduce_partials_kernel in conv_relu_pool.cu).
// chunks == 0 writes zeros.
void launch_reduce_partials(const ConvReluPoolDims& d, const float* part, int chunks, float* dw, float* db,
                            cudaStream_t stream);

// Whether a variant can run this shape on the current GPU (ignoring pointer
// alignment, which the mma launchers also check).
bool tiled_can_run(const ConvReluPoolDims& d);
bool mma_can_run(const ConvReluPoolDims& d, DType dtype);
bool cin1_can_run(const ConvReluPoolDims& d);
// The resident variant's common conditions: bf16/f16, k in {1, 3}, pool in
// {1, 2}, Cin and Cout multiples of 16, an sm_80+ GPU. Each of its launchers
// may refuse more (alignment, shared memory) by returning false.
bool resident_can_run(const ConvReluPoolDims& d, DType dtype);

// Logs once per process and direction ("forward" / "backward") that a bf16/f16
// conv runs an FP32 CUDA-core kernel instead of tensor cores, and why. Cin = 1
// (the memory-bound input layer) is not reported.
void note_conv_fp32_fallback(const ConvReluPoolDims& d, DType dtype, const char* direction, const char* why);

// Variant 2: tiled shared-memory FP32-accumulating kernels (any T). Variant 3:
// tensor-core implicit GEMM (bf16/f16, sm_80+). T is float, mf::f16 or mf::bf16.
template <class T>
bool tiled_forward(const ConvReluPoolDims& d, const void* x, const void* w, const void* b, void* y,
                   std::uint8_t* code, cudaStream_t stream);
template <class T>
bool tiled_backward(const ConvReluPoolDims& d, const void* x, const void* w, const void* dy,
                    const std::uint8_t* code, void* dx, float* dw, float* db, cudaStream_t stream);
template <class T>
bool mma_forward(const ConvReluPoolDims& d, const void* x, const void* w, const void* b, void* y,
                 std::uint8_t* code, cudaStream_t stream);
// mma_backward with dw == nullptr computes dx alone (db is then ignored).
template <class T>
bool mma_backward(const ConvReluPoolDims& d, const void* x, const void* w, const void* dy,
                  const std::uint8_t* code, void* dx, float* dw, float* db, cudaStream_t stream);

// Variant 4: the Cin = 1 input layer (k = 3, p in {1, 2}, Cout a power of two in
// [16, 256]; conv_relu_pool_cin1.cu).
template <class T>
bool cin1_forward(const ConvReluPoolDims& d, const void* x, const void* w, const void* b, void* y,
                  std::uint8_t* code, cudaStream_t stream);
template <class T>
bool cin1_backward(const ConvReluPoolDims& d, const void* x, const void* w, const void* dy,
                   const std::uint8_t* code, void* dx, float* dw, float* db, cudaStream_t stream);

// Variant 5, "resident" (bf16/f16 only; float returns false). Forward and dx
// (conv_relu_pool_resident.cu): persistent implicit-GEMM blocks with their
// output-channel slice of the weights resident in shared memory. dw/db
// (conv_relu_pool_resident_dw.cu): all k*k taps per block from one input halo,
// per-block partials over many pixel tiles, then launch_reduce_partials.
template <class T>
bool resident_forward(const ConvReluPoolDims& d, const void* x, const void* w, const void* b, void* y,
                      std::uint8_t* code, cudaStream_t stream);
template <class T>
bool resident_dx(const ConvReluPoolDims& d, const void* w, const void* dy, const std::uint8_t* code, void* dx,
                 cudaStream_t stream);
template <class T>
bool resident_dw(const ConvReluPoolDims& d, const void* x, const void* dy, const std::uint8_t* code, float* dw,
                 float* db, cudaStream_t stream);
// The Cin = 1 input layer on tensor cores (conv_relu_pool_resident_cin1.cu):
// k = 3, pool 1 or 2, Cout a multiple of 16 in [16, 256] (not 176 or 208), the
// 9 taps as the K = 16 of one MMA; dw/db as a GEMM over pixels with partials
// and launch_reduce_partials (no dx: a Cin = 1 layer that wants one falls
// back to cin1 for its whole backward). Each returns false when it cannot run (float, shape, alignment,
// a GPU older than sm_80). resident_cin1_can_run: the dtype, shape and GPU
// conditions (not the alignment).
bool resident_cin1_can_run(const ConvReluPoolDims& d, DType dtype);
template <class T>
bool resident_cin1_forward(const ConvReluPoolDims& d, const void* x, const void* w, const void* b, void* y,
                           std::uint8_t* code, cudaStream_t stream);
template <class T>
bool resident_cin1_dw(const ConvReluPoolDims& d, const void* x, const void* dy, const std::uint8_t* code, float* dw,
                      float* db, cudaStream_t stream);

}  // namespace mf::kernels
