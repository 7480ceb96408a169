// Pieces shared by the CUDA variants of conv_relu_pool (included by their .cu
// files, and by conv_relu_pool.cpp, which defines note_conv_fp32_fallback): the
// dw/db partials, their workspace and fixed-order reduction, and the entry
// points of the faster variants. Each variant's launcher returns false when it
// cannot run the shape (or the GPU), and the caller falls back to a simpler one.
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
// Raises `kernel`'s dynamic shared-memory limit on the current GPU to at least
// `bytes` (call before a launch that needs more than 48 KB); never lowers it.
// The limit belongs to the kernel, not to a launch: setting it to each launch's
// size would let layer 2's launch lower it under layer 3's node of a captured
// CUDA graph, which replays without these host calls. Thread-safe.
void raise_dynamic_smem_limit(const void* kernel, std::size_t bytes);

// ---- dw and db through per-chunk partials (every variant's backward) -------
//
// A dw/db kernel splits its work units (conv rows, pixel tiles: whatever the
// variant walks) into `chunks` contiguous ranges and writes one partial per
// (chunk, weight) into a workspace, in launch_reduce_partials' layout:
//   part[(chunk * cout + co) * (k*k*cin + 1) + j] -> dw[co * k*k*cin + j] (j < k*k*cin)
//                                                    and db[co] (j = k*k*cin).
// The reduction sums the chunks of each weight in a fixed order that depends on
// the chunk count only, and the count is a function of the shape only (never
// of the GPU or of timing): the same inputs give the same bits. No atomics.

// Floats of one chunk's partials: cout * (k*k*cin + 1).
inline std::int64_t weight_partial_floats(const ConvReluPoolDims& d) {
  return std::int64_t(d.cout) * (std::int64_t(d.k) * d.k * d.cin + 1);
}

// The conv rows (n, oh) that feed the pool, N * PH * P (a floor-dropped edge
// row gets no gradient): the work units of the direct, tiled and mma dw kernels.
inline std::int64_t pooled_conv_rows(const ConvReluPoolDims& d) { return d.n * std::int64_t(d.ph()) * d.pool; }

// min(units, max_chunks, as many chunks as fit 64 MiB of partials), at least
// 1 when there is any unit; 0 when units <= 0.
int weight_partial_chunks(const ConvReluPoolDims& d, std::int64_t units, int max_chunks);

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

// Sums the partials of `chunks` chunks into dw and db (reduce_partials_kernel
// in conv_relu_pool.cu); chunks == 0 writes zeros.
void launch_reduce_partials(const ConvReluPoolDims& d, const float* part, int chunks, float* dw, float* db,
                            cudaStream_t stream);

// One variant's dw and db: sizes the chunks from its `units` and `max_chunks`
// (weight_partial_chunks), takes the workspace from the pool, lets
// write_partials(int chunks, float* part) launch the variant's kernel (only
// when chunks > 0; it must write every partial of every chunk) and reduces.
template <class WritePartials>
void dw_db_by_partials(const ConvReluPoolDims& d, std::int64_t units, int max_chunks, float* dw, float* db,
                       cudaStream_t stream, WritePartials&& write_partials) {
  const int chunks = weight_partial_chunks(d, units, max_chunks);
  WeightPartials ws(std::size_t(chunks) * std::size_t(weight_partial_floats(d)), stream);
  if (chunks > 0) write_partials(chunks, ws.data());
  launch_reduce_partials(d, ws.data(), chunks, dw, db, stream);
}

// The chunk limit of the variants that split conv rows (direct, tiled, mma)
// and of the Cin = 1 kernels.
inline constexpr int kMaxPartialChunks = 1024;

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
