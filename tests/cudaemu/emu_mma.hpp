// melforge's CUDA emulator (tests only): warp-level semantics of
//   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32   (H = __nv_bfloat16)
//   mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32     (H = __half)
// i.e. D (16x8, f32) = A (16x16, row) * B (16x8, col) + C (16x8, f32), with
// the operands spread over the 32 lanes of a warp as PTX prescribes.
//
// Fragment layout, as we read NVIDIA's PTX ISA, section "Matrix Fragments for
// mma.m16n8k16 with floating point type" (numbered 9.7.13.5.8 / 9.7.14.5.8 /
// 9.7.15.5.8 depending on the ISA version):
//   https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#warp-level-matrix-fragment-mma-16816-float
// Restated in our own words (g = laneid >> 2 is the "groupID",
// t = laneid % 4 is the "threadID_in_group"):
//
//   A, .f16/.bf16: a lane holds eight elements a0..a7 in four 32-bit
//     registers; register j carries a(2j) and a(2j+1). Element ai sits in row
//     g when i is 0, 1, 4 or 5 and in row g+8 when i is 2, 3, 6 or 7; its
//     column is 2t + (i odd ? 1 : 0), plus 8 for i >= 4. So per register:
//       reg0 = A[g  ][2t..2t+1]     reg1 = A[g+8][2t..2t+1]
//       reg2 = A[g  ][2t+8..2t+9]   reg3 = A[g+8][2t+8..2t+9]
//   B, .f16/.bf16: four elements b0..b3 in two registers (register j carries
//     b(2j), b(2j+1)). Every element of a lane lies in column g (the n index);
//     bi's row (the k index) is 2t + (i odd ? 1 : 0), plus 8 for i >= 2:
//       reg0 = B[2t..2t+1][g]       reg1 = B[2t+8..2t+9][g]
//   C and D, .f32: four scalars c0..c3; ci lies in row g for i < 2 and row
//     g+8 for i >= 2, column 2t + (i odd ? 1 : 0):
//       c0,c1 = C[g][2t], C[g][2t+1]    c2,c3 = C[g+8][2t], C[g+8][2t+1]
//
// Packing of the two halves inside one register: the document lists each
// register's elements in the "Elements (low to high)" column, so the element
// with the lower index (a0 of the pair a0,a1, i.e. the smaller column for A,
// the smaller row/k for B) occupies bits 0..15 and the other one bits 16..31.
// This is also what a little-endian 32-bit load of two consecutive halves
// from memory yields.
//
// Arithmetic model (the ISA does not pin down the tensor core's internal
// rounding; this is the emulator's documented choice):
//   * each half is widened to float (exact);
//   * each product a*b is formed in float; for f16 and for bf16 values whose
//     product stays inside float's normal range this is exact (11+11 and 8+8
//     significand bits both fit in 24);
//   * D[m][n] = (((0 + A[m][0]*B[0][n]) + A[m][1]*B[1][n]) + ... +
//               A[m][15]*B[15][n]) + C[m][n]
//     summed in float, k ascending, C added last. Because every product is
//     exact, the result does not depend on whether the compiler contracts the
//     multiply-add into an fma (it must not reassociate: no -ffast-math).
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "emu_core.hpp"

namespace mf_emu {

// One lane's operands of an m16n8k16 mma.
struct MmaLane {
  std::uint32_t a[4];
  std::uint32_t b[2];
  float c[4];
};
static_assert(std::is_trivially_copyable_v<MmaLane> && std::is_standard_layout_v<MmaLane>);

namespace mma_detail {

template <class H>
float half_bits_to_float(std::uint16_t bits) {
  if constexpr (std::is_same_v<H, __nv_bfloat16>) {
    __nv_bfloat16_raw raw;
    raw.x = bits;
    return __bfloat162float(__nv_bfloat16(raw));
  } else if constexpr (std::is_same_v<H, __half>) {
    __half_raw raw;
    raw.x = bits;
    return __half2float(__half(raw));
  } else {
    static_assert(sizeof(H) == 0, "mma_m16n8k16: H must be __nv_bfloat16 or __half");
    return 0.0f;
  }
}

// Unpacked operands of one warp-wide mma.
struct MmaTiles {
  float a[16][16];  // [m][k]
  float b[16][8];   // [k][n]
  float c[16][8];   // [m][n]
};

template <class H>
void gather(const MmaLane (&in)[32], MmaTiles& t) {
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2;
    const int tig = lane & 3;
    const MmaLane& l = in[lane];
    for (int reg = 0; reg < 4; ++reg) {
      const int row = g + 8 * (reg & 1);
      const int col = 2 * tig + 8 * (reg >> 1);
      t.a[row][col] = half_bits_to_float<H>(static_cast<std::uint16_t>(l.a[reg] & 0xffffu));
      t.a[row][col + 1] = half_bits_to_float<H>(static_cast<std::uint16_t>(l.a[reg] >> 16));
    }
    for (int reg = 0; reg < 2; ++reg) {
      const int k = 2 * tig + 8 * reg;
      t.b[k][g] = half_bits_to_float<H>(static_cast<std::uint16_t>(l.b[reg] & 0xffffu));
      t.b[k + 1][g] = half_bits_to_float<H>(static_cast<std::uint16_t>(l.b[reg] >> 16));
    }
    for (int i = 0; i < 4; ++i) t.c[g + 8 * (i >> 1)][2 * tig + (i & 1)] = l.c[i];
  }
}

// The one place D entries are computed (see the arithmetic model above).
inline float d_entry(const MmaTiles& t, int m, int n) {
  float acc = 0.0f;
  for (int k = 0; k < 16; ++k) {
    const float p = t.a[m][k] * t.b[k][n];
    acc = acc + p;
  }
  return acc + t.c[m][n];
}

// Row and column of this lane's i-th accumulator element.
inline int d_row(int lane, int i) { return (lane >> 2) + 8 * (i >> 1); }
inline int d_col(int lane, int i) { return 2 * (lane & 3) + (i & 1); }

}  // namespace mma_detail

// Pure warp-level semantics: `in` holds every lane's fragments (lane-major),
// d[lane][0..3] receives that lane's D fragment.
template <class H>
void mma_m16n8k16_warp(const MmaLane (&in)[32], float (&d)[32][4]) {
  mma_detail::MmaTiles t;
  mma_detail::gather<H>(in, t);
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) d[lane][i] = mma_detail::d_entry(t, mma_detail::d_row(lane, i), mma_detail::d_col(lane, i));
}

// Per-lane form, what an emulated kernel calls in place of the inline asm
//   mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32
//     {c0..c3}, {a0..a3}, {b0, b1}, {c0..c3};
// (D written back over C). All 32 lanes of the warp must call it (the
// instruction is .aligned with an implicit full-warp mask).
template <class H>
void mma_m16n8k16(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1, const char* file,
                  int line) {
  MmaLane mine{};
  for (int r = 0; r < 4; ++r) mine.a[r] = a[r];
  mine.b[0] = b0;
  mine.b[1] = b1;
  for (int i = 0; i < 4; ++i) mine.c[i] = c[i];
  MmaLane all[32];
  warp_exchange(0xffffffffu, &mine, sizeof(MmaLane), all, file, line);
  // Same gather and same d_entry as the pure function, but only this lane's
  // four outputs (bit-identical to mma_m16n8k16_warp's d[lane]).
  mma_detail::MmaTiles t;
  mma_detail::gather<H>(all, t);
  const int lane = lane_id();
  for (int i = 0; i < 4; ++i) c[i] = mma_detail::d_entry(t, mma_detail::d_row(lane, i), mma_detail::d_col(lane, i));
}

}  // namespace mf_emu
