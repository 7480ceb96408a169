// The emulated build's kernels/mma_ptx.cuh: the same wrappers as the real one
// (kernels/mma_ptx.cuh, whose contracts hold here unchanged), each calling the
// emulator's model of its PTX instruction (emu_mma.hpp, emu_async.hpp: written
// from NVIDIA's PTX ISA, not from the kernels). cudaemu.cmake puts this
// folder's parent first on the quote-include path of every rewritten .cu, so
// kernels/mma.cuh (its fragment helpers included) and every kernel compile
// unchanged. A wrapper added to the real file must be added here too (the
// emulated build stops at the first kernel that calls a missing one).
//
// Each takes the call site as a defaulted std::source_location so that a fault
// (a misaligned ldmatrix row, a missing lane, a read of a cp.async destination
// before its wait) names the kernel's line, not this file's.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <source_location>

#include "tests/cudaemu/emu_async.hpp"
#include "tests/cudaemu/emu_mma.hpp"

namespace mf::kernels::mma {

template <class D>
inline void mma_16816(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1,
                      std::source_location at = std::source_location::current()) {
  mf_emu::mma_m16n8k16<D>(c, a, b0, b1, at.file_name(), int(at.line()));
}

template <bool Trans>
inline void ldmatrix_x4(std::uint32_t (&r)[4], const void* row_addr,
                        std::source_location at = std::source_location::current()) {
  mf_emu::ldmatrix(4, Trans, row_addr, r, at.file_name(), int(at.line()));
}

template <bool Trans>
inline void ldmatrix_x2(std::uint32_t (&r)[2], const void* row_addr,
                        std::source_location at = std::source_location::current()) {
  mf_emu::ldmatrix(2, Trans, row_addr, r, at.file_name(), int(at.line()));
}

inline void cp_async16(void* smem_dst, const void* gmem_src, bool valid,
                       std::source_location at = std::source_location::current()) {
  mf_emu::cp_async(smem_dst, gmem_src, 16, valid ? 16 : 0, at.file_name(), int(at.line()));
}

inline void cp_async_commit(std::source_location at = std::source_location::current()) {
  mf_emu::cp_async_commit_group(at.file_name(), int(at.line()));
}

template <int N>
inline void cp_async_wait(std::source_location at = std::source_location::current()) {
  mf_emu::cp_async_wait_group(N, at.file_name(), int(at.line()));
}

}  // namespace mf::kernels::mma
