// The sm_80+ warp-level tensor-core primitives, the one header the kernels
// include for them: one wrapper per PTX instruction (kernels/mma_ptx.cuh,
// where each one's contract is written beside its asm)
//   mma_16816      mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32
//   ldmatrix_x{2,4}<Trans>   ldmatrix.sync.aligned.m8n8.x{2,4}{,.trans}.shared.b16
//   cp_async16     cp.async.cg.shared.global, 16 bytes, zero-filled when !valid
//   cp_async_commit / cp_async_wait<N>   cp.async.commit_group / wait_group N
// and the helpers that build and unpack fragment registers in plain C++.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
// g = lane / 4 and t = lane % 4, two b16 elements per 32-bit register, the
// lower index in the low half:
//   A (16 x 16, row): a0 = A[g][2t..], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
//   B (16 x 8, col):  b0 = B[2t..][g],  b1 = B[2t+8..][g]
//   C (16 x 8, f32):  c0, c1 = C[g][2t], C[g][2t+1];  c2, c3 = C[g+8][2t], C[g+8][2t+1]
// ldmatrix: lanes 8i..8i+7 give the 16-byte row addresses of matrix i; lane l
// receives r[i] = matrix i's row l/4, elements 2(l%4), 2(l%4)+1 (with .trans:
// the transposed matrix's, i.e. rows 2(l%4), 2(l%4)+1 of column l/4). So a
// [k][n] tile stored with n contiguous gives B fragments through .trans, and a
// [k][m] tile stored with m contiguous gives A fragments through .trans.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "kernels/cuda_types.cuh"
#include "kernels/mma_ptx.cuh"

namespace mf::kernels::mma {

// One fragment register from the two consecutive b16 elements at p (4-byte
// aligned, any memory space): p[0] in the low half, p[1] in the high half.
__device__ __forceinline__ std::uint32_t load_b16x2(const void* p) { return *static_cast<const std::uint32_t*>(p); }

// The same from a 2-byte aligned address (two 16-bit loads).
__device__ __forceinline__ std::uint32_t load_b16x2_unaligned(const std::uint16_t* p) {
  return std::uint32_t(p[0]) | (std::uint32_t(p[1]) << 16);
}

// lo and hi rounded to D (__nv_bfloat16 or __half) and packed as one register,
// lo in the low half: two neighbouring accumulator values (c0, c1 or c2, c3)
// as the pair of channels one 32-bit store writes.
template <class D>
__device__ __forceinline__ std::uint32_t pack_b16x2(float lo, float hi) {
  const D l = cuda::store_f32<D>(lo), h = cuda::store_f32<D>(hi);
  std::uint16_t bl, bh;
  std::memcpy(&bl, &l, 2);
  std::memcpy(&bh, &h, 2);
  return std::uint32_t(bl) | (std::uint32_t(bh) << 16);
}

// C-fragment rows to contiguous columns: lane t of each quad (t = lane % 4)
// holds w[j] = one 32-bit word for columns 8j + 2t and 8j + 2t + 1 of a row,
// for four n-tiles j < 4 (e.g. pack_b16x2 of c0, c1). Returns the four words
// of n-tile t, columns 8t .. 8t + 7 in order, ready for one 16-byte store.
// Every lane of the warp must call it (shuffles).
__device__ __forceinline__ std::uint32_t select4(const std::uint32_t (&w)[4], int i) {
  return (i & 2) ? ((i & 1) ? w[3] : w[2]) : ((i & 1) ? w[1] : w[0]);
}
__device__ __forceinline__ uint4 quad_transpose(const std::uint32_t (&w)[4], int t) {
  std::uint32_t recv[4];  // recv[x]: lane t ^ x's word of n-tile t
  recv[0] = select4(w, t);
#pragma unroll
  for (int x = 1; x < 4; ++x) recv[x] = __shfl_xor_sync(0xffffffffu, select4(w, t ^ x), x);
  return make_uint4(select4(recv, t), select4(recv, t ^ 1), select4(recv, t ^ 2), select4(recv, t ^ 3));
}

}  // namespace mf::kernels::mma
