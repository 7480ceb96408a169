// The PTX behind kernels/mma.cuh's instruction wrappers: one inline-asm
// function per sm_80+ instruction the tensor-core kernels use, nothing else.
// Included only by kernels/mma.cuh. On a GPU older than sm_80 each traps; the
// launchers check the compute capability first and never get there.
//
// The emulated build (tests/cudaemu) compiles its own file of this name in
// place of this one (tests/cudaemu/include/kernels/mma_ptx.cuh, same
// functions, each calling the emulator's model of the instruction), so every
// kernel and every fragment helper in mma.cuh is the code nvcc compiles.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace mf::kernels::mma {

// The 32-bit shared-state-space address the PTX operands below take.
__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// c += A * B on one m16n8k16 tile; D is __nv_bfloat16 or __half.
template <class D>
__device__ __forceinline__ void mma_16816(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                          std::uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
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
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
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
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
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
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem_dst)), "l"(gmem_src),
               "r"(valid ? 16 : 0)
               : "memory");
#else
  __trap();
#endif
}

// Closes the calling thread's current group of cp.async copies.
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#else
  __trap();
#endif
}

// Waits until at most N of the calling thread's committed groups are pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#else
  __trap();
#endif
}

}  // namespace mf::kernels::mma
