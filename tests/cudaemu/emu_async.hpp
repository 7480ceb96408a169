// melforge's CUDA emulator (tests only): the warp-level matrix load and the
// asynchronous global -> shared copies of sm_80+ tensor-core kernels,
//   ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16
//   cp.async.{ca,cg}.shared.global, cp.async.commit_group, cp.async.wait_group
// written from NVIDIA's PTX ISA (not from melforge's kernels). Kernels reach
// them through the wrappers of include/kernels/mma_ptx.cuh, which pass the
// call site's file and line so that a fault names it.
// Implementation and the ISA sections each rule comes from: emu_async.cpp.
#pragma once

#include <cstdint>

namespace mf_emu {

// ldmatrix.sync.aligned.m8n8.x{count}{.trans}.shared.b16, count 1, 2 or 4.
// Warp-collective: all 32 lanes of the warp must call it together (else the
// kernel aborts with a report, like the shuffles). Lane l passes in row_addr
// the shared-memory address of one 16-byte row (8 b16 elements): lanes
// 8i..8i+7 give rows 0..7 of matrix i, for i < count; the addresses of the
// other lanes are ignored. Each used address must be 16-byte aligned.
// Lane l receives out[i] (i < count), 32 bits holding two elements of matrix i:
//   without .trans: row l/4, columns 2*(l%4) (bits 0..15) and 2*(l%4)+1 (bits 16..31);
//   with .trans: column l/4, rows 2*(l%4) (bits 0..15) and 2*(l%4)+1 (bits 16..31).
void ldmatrix(int count, bool trans, const void* row_addr, std::uint32_t* out, const char* file, int line);

// cp.async.{ca,cg}.shared.global [dst], [src], cp_size, src_size: copies
// src_size bytes (0..cp_size) from global src to shared dst and zero-fills
// the rest up to cp_size (cp_size 4, 8 or 16; .cg takes only 16: the caller's
// wrapper picks the variant, the emulator sees no difference). dst and src
// must be aligned to cp_size. The copy joins the calling thread's current
// (uncommitted) group. It is asynchronous: the destination reads as 0xFF
// bytes (NaN for f32/f16/bf16) until cp_async_wait_group retires its group.
void cp_async(void* dst_shared, const void* src_global, int cp_size, int src_size, const char* file, int line);

// cp.async.commit_group: closes the thread's current group (an empty group is legal).
void cp_async_commit_group(const char* file, int line);

// cp.async.wait_group n: returns once at most the n most recently committed
// groups of the calling thread are still pending (n = 0: every committed
// group is complete). cp.async.wait_all = commit_group + wait_group(0).
void cp_async_wait_group(int n, const char* file, int line);

}  // namespace mf_emu
