// The sm_80+ warp-level primitives the tensor-core kernels use, one wrapper per
// PTX instruction (included by .cu files only):
//   mma_16816      mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32
//   ldmatrix       ldmatrix.sync.aligned.m8n8.x{1,2,4}{,.trans}.shared.b16
//   cp_async16     cp.async.cg.shared.global, 16 bytes, zero-filled when !valid
//   cp_async_commit / cp_async_wait<N>   cp.async.commit_group / wait_group N
// In the emulated build (MELFORGE_CUDA_EMU, tests/cudaemu) each maps onto the
// emulator's model of the instruction, written from NVIDIA's PTX ISA without
// reading these kernels. On a GPU older than sm_80 they trap; the launchers
// check the compute capability first and never get there.
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
#include <type_traits>

namespace mf::kernels::mma {

#if !defined(MELFORGE_CUDA_EMU)
__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
#endif

// c += A * B on one m16n8k16 tile; D is __nv_bfloat16 or __half.
template <class D>
__device__ __forceinline__ void mma_16816(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                          std::uint32_t b1) {
#if defined(MELFORGE_CUDA_EMU)
  mf_emu::mma_m16n8k16<D>(c, a, b0, b1, __FILE__, __LINE__);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#else
  __trap();
#endif
}

// Four 8 x 8 b16 matrices from shared memory (warp-collective; every lane
// passes its row address, 16-byte aligned).
template <bool Trans>
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* row_addr) {
#if defined(MELFORGE_CUDA_EMU)
  mf_emu::ldmatrix(4, Trans, row_addr, r, __FILE__, __LINE__);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(row_addr)));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(row_addr)));
  }
#else
  __trap();
#endif
}

// Two 8 x 8 b16 matrices (lanes 0..15 give the row addresses; the others'
// are ignored but must still be valid shared addresses).
template <bool Trans>
__device__ __forceinline__ void ldmatrix_x2(std::uint32_t (&r)[2], const void* row_addr) {
#if defined(MELFORGE_CUDA_EMU)
  mf_emu::ldmatrix(2, Trans, row_addr, r, __FILE__, __LINE__);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_u32(row_addr)));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_u32(row_addr)));
  }
#else
  __trap();
#endif
}

// 16 bytes global -> shared, asynchronous (the L1-bypassing .cg form). When
// !valid nothing is read and the 16 destination bytes become zero; src must
// still be a valid address (pass any in-bounds pointer). Visible to the
// calling thread after cp_async_wait retires its group, to the block after a
// __syncthreads() that follows that wait.
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src, bool valid) {
#if defined(MELFORGE_CUDA_EMU)
  mf_emu::cp_async(smem_dst, gmem_src, 16, valid ? 16 : 0, __FILE__, __LINE__);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem_dst)), "l"(gmem_src),
               "r"(valid ? 16 : 0)
               : "memory");
#else
  __trap();
#endif
}

// Closes the calling thread's current group of cp.async copies.
__device__ __forceinline__ void cp_async_commit() {
#if defined(MELFORGE_CUDA_EMU)
  mf_emu::cp_async_commit_group(__FILE__, __LINE__);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#else
  __trap();
#endif
}

// Waits until at most N of the calling thread's committed groups are pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(MELFORGE_CUDA_EMU)
  mf_emu::cp_async_wait_group(N, __FILE__, __LINE__);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#else
  __trap();
#endif
}

}  // namespace mf::kernels::mma
