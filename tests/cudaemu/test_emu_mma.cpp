// Tests of the emulator's warp-level mma.m16n8k16 (.row.col, f32 accumulate,
// bf16 and f16 inputs): tests/cudaemu/emu_mma.hpp. Only the pure function
// mma_m16n8k16_warp is exercised, so no emulator core is needed.
//
// The fragment scatter/gather helpers below are written on their own from the
// PTX ISA tables ("Matrix Fragments for mma.m16n8k16 with floating point
// type", https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#warp-level-matrix-fragment-mma-16816-float),
// following the document's per-element formulas over the element index i
// (a0..a7, b0..b3, c0..c3) rather than the per-register form used inside the
// header, so that a mistake in one is not mirrored in the other.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <type_traits>
#include <utility>

#include "tests/cudaemu/emu_mma.hpp"

namespace {

using mf_emu::MmaLane;

// ---- element <-> bits, through the CUDA headers' own conversions ----------

std::uint16_t to_bits(__nv_bfloat16 h) { return static_cast<__nv_bfloat16_raw>(h).x; }
std::uint16_t to_bits(__half h) { return static_cast<__half_raw>(h).x; }

template <class H>
H round_to(float v) {
  if constexpr (std::is_same_v<H, __nv_bfloat16>)
    return __float2bfloat16(v);
  else
    return __float2half(v);
}
float widen(__nv_bfloat16 h) { return __bfloat162float(h); }
float widen(__half h) { return __half2float(h); }

// ---- the document's formulas, element by element --------------------------

struct RC {
  int row, col;
};

// A element ai (i = 0..7) of lane `lane`.
RC a_pos(int lane, int i) {
  const int groupID = lane >> 2, tig = lane % 4;
  RC p{};
  if ((0 <= i && i < 2) || (4 <= i && i < 6))
    p.row = groupID;
  else
    p.row = groupID + 8;
  if (i < 4)
    p.col = tig * 2 + (i & 0x1);
  else
    p.col = tig * 2 + (i & 0x1) + 8;
  return p;
}
// B element bi (i = 0..3): row is the k index, col the n index.
RC b_pos(int lane, int i) {
  const int groupID = lane >> 2, tig = lane % 4;
  RC p{};
  if (i < 2)
    p.row = tig * 2 + (i & 0x1);
  else
    p.row = tig * 2 + (i & 0x1) + 8;
  p.col = groupID;
  return p;
}
// C/D element ci (i = 0..3).
RC c_pos(int lane, int i) {
  const int groupID = lane >> 2, tig = lane % 4;
  RC p{};
  p.row = i < 2 ? groupID : groupID + 8;
  p.col = tig * 2 + (i & 0x1);
  return p;
}

// Element i of a packed operand lives in register i / 2; the even one in the
// low 16 bits ("Elements (low to high)").
void put_half(std::uint32_t* regs, int i, std::uint16_t bits) {
  std::uint32_t& r = regs[i / 2];
  if (i % 2 == 0)
    r = (r & 0xffff0000u) | bits;
  else
    r = (r & 0x0000ffffu) | (static_cast<std::uint32_t>(bits) << 16);
}

template <class H>
struct Problem {
  H a[16][16];  // A[m][k]
  H b[16][8];   // B[k][n]
  float c[16][8];

  void scatter(MmaLane (&lanes)[32]) const {
    for (int lane = 0; lane < 32; ++lane) {
      MmaLane& l = lanes[lane];
      l = MmaLane{};
      for (int i = 0; i < 8; ++i) {
        const RC p = a_pos(lane, i);
        put_half(l.a, i, to_bits(a[p.row][p.col]));
      }
      for (int i = 0; i < 4; ++i) {
        const RC p = b_pos(lane, i);
        put_half(l.b, i, to_bits(b[p.row][p.col]));
      }
      for (int i = 0; i < 4; ++i) {
        const RC p = c_pos(lane, i);
        l.c[i] = c[p.row][p.col];
      }
    }
  }

  // Run the emulated instruction and unscatter D into d[m][n].
  void run(float (&d)[16][8]) const {
    MmaLane lanes[32];
    scatter(lanes);
    float out[32][4];
    for (auto& o : out)
      for (float& v : o) v = std::nanf("");
    mf_emu::mma_m16n8k16_warp<H>(lanes, out);
    bool seen[16][8] = {};
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) {
        const RC p = c_pos(lane, i);
        REQUIRE(!seen[p.row][p.col]);
        seen[p.row][p.col] = true;
        d[p.row][p.col] = out[lane][i];
      }
  }

  // Double-precision reference, and sum of |terms| for an error bound.
  void reference(double (&ref)[16][8], double (&mag)[16][8]) const {
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 8; ++n) {
        double s = c[m][n], abs_sum = std::fabs(static_cast<double>(c[m][n]));
        for (int k = 0; k < 16; ++k) {
          const double p = static_cast<double>(widen(a[m][k])) * static_cast<double>(widen(b[k][n]));
          s += p;
          abs_sum += std::fabs(p);
        }
        ref[m][n] = s;
        mag[m][n] = abs_sum;
      }
  }
};

template <class H>
Problem<H> random_ints(std::mt19937& rng, int amax, int cmax) {
  std::uniform_int_distribution<int> ab(-amax, amax), cd(-cmax, cmax);
  Problem<H> p{};
  for (auto& row : p.a)
    for (H& v : row) v = round_to<H>(static_cast<float>(ab(rng)));
  for (auto& row : p.b)
    for (H& v : row) v = round_to<H>(static_cast<float>(ab(rng)));
  for (auto& row : p.c)
    for (float& v : row) v = static_cast<float>(cd(rng));
  return p;
}

template <class H>
Problem<H> random_reals(std::mt19937& rng, float scale) {
  std::uniform_real_distribution<float> ab(-scale, scale), cd(-4.0f, 4.0f);
  Problem<H> p{};
  for (auto& row : p.a)
    for (H& v : row) v = round_to<H>(ab(rng));
  for (auto& row : p.b)
    for (H& v : row) v = round_to<H>(ab(rng));
  for (auto& row : p.c)
    for (float& v : row) v = cd(rng);
  return p;
}

// D against the double reference within ulps * 2^-24 * sum|terms| (ulps 0:
// exact, for small integers; 17 float additions of exact terms need <= 17 to
// first order, 20 leaves a little slack).
template <class H>
void check_within(const Problem<H>& p, double ulps) {
  float d[16][8];
  double ref[16][8], mag[16][8];
  p.run(d);
  p.reference(ref, mag);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      CAPTURE(m);
      CAPTURE(n);
      const double tol = ulps * std::ldexp(1.0, -24) * mag[m][n];
      REQUIRE(std::fabs(static_cast<double>(d[m][n]) - ref[m][n]) <= tol);
    }
}

template <class H>
void structural_tests() {
  SUBCASE("the test's own scatter tables cover every element exactly once") {
    bool a_seen[16][16] = {}, b_seen[16][8] = {}, c_seen[16][8] = {};
    for (int lane = 0; lane < 32; ++lane) {
      for (int i = 0; i < 8; ++i) {
        const RC p = a_pos(lane, i);
        REQUIRE(!a_seen[p.row][p.col]);
        a_seen[p.row][p.col] = true;
      }
      for (int i = 0; i < 4; ++i) {
        const RC pb = b_pos(lane, i), pc = c_pos(lane, i);
        REQUIRE(!b_seen[pb.row][pb.col]);
        REQUIRE(!c_seen[pc.row][pc.col]);
        b_seen[pb.row][pb.col] = c_seen[pc.row][pc.col] = true;
      }
    }
  }

  SUBCASE("hand-checked fragment positions (PTX figures for lanes 0, 5, 31)") {
    // lane 0: a0,a1 = A[0][0..1]; a2,a3 = A[8][0..1]; a4,a5 = A[0][8..9]; a6,a7 = A[8][8..9]
    CHECK(a_pos(0, 0).row == 0);
    CHECK(a_pos(0, 1).col == 1);
    CHECK(a_pos(0, 2).row == 8);
    CHECK(a_pos(0, 4).col == 8);
    CHECK(a_pos(0, 7).row == 8);
    CHECK(a_pos(0, 7).col == 9);
    // lane 5: group 1, thread 1
    CHECK(a_pos(5, 0).row == 1);
    CHECK(a_pos(5, 0).col == 2);
    CHECK(b_pos(5, 0).row == 2);
    CHECK(b_pos(5, 0).col == 1);
    CHECK(b_pos(5, 3).row == 11);
    CHECK(c_pos(5, 3).row == 9);
    CHECK(c_pos(5, 3).col == 3);
    // lane 31: group 7, thread 3
    CHECK(a_pos(31, 7).row == 15);
    CHECK(a_pos(31, 7).col == 15);
    CHECK(b_pos(31, 3).row == 15);
    CHECK(b_pos(31, 3).col == 7);
    CHECK(c_pos(31, 3).row == 15);
    CHECK(c_pos(31, 3).col == 7);
  }

  SUBCASE("small-integer matrices: D == A*B + C exactly") {
    std::mt19937 rng(12345u);
    for (int trial = 0; trial < 200; ++trial) {
      CAPTURE(trial);
      check_within(random_ints<H>(rng, 8, 100), 0.0);
    }
  }

  SUBCASE("identity A: D = B + C, which pins the D scatter and B gather") {
    std::mt19937 rng(7u);
    Problem<H> p = random_ints<H>(rng, 30, 50);
    for (int m = 0; m < 16; ++m)
      for (int k = 0; k < 16; ++k) p.a[m][k] = round_to<H>(m == k ? 1.0f : 0.0f);
    float d[16][8];
    p.run(d);
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 8; ++n) REQUIRE(d[m][n] == widen(p.b[m][n]) + p.c[m][n]);
  }

  SUBCASE("random real values: close to the double reference") {
    std::mt19937 rng(424242u);
    for (int trial = 0; trial < 200; ++trial) {
      CAPTURE(trial);
      check_within(random_reals<H>(rng, trial % 2 == 0 ? 1.0f : 50.0f), 20.0);
    }
  }

  SUBCASE("a single nonzero A element in lane 0's a0 low half is A[0][0]") {
    // All of A zero except the low 16 bits of lane 0's register a0. By the
    // low-to-high rule that is A[0][0], so D row 0 must equal B's row k=0
    // (+ C); had the halves been swapped it would be A[0][1] -> B row k=1.
    std::mt19937 rng(99u);
    Problem<H> p = random_ints<H>(rng, 8, 10);
    MmaLane lanes[32];
    p.scatter(lanes);
    for (MmaLane& l : lanes)
      for (std::uint32_t& r : l.a) r = 0;
    lanes[0].a[0] = to_bits(round_to<H>(1.0f));  // low half only
    for (int n = 0; n < 8; ++n) p.b[1][n] = round_to<H>(static_cast<float>(100 + n));  // make k=0 and k=1 differ
    p.b[0][0] = round_to<H>(-3.0f);
    // rebuild B fragments from the modified B
    MmaLane fresh[32];
    p.scatter(fresh);
    for (int lane = 0; lane < 32; ++lane)
      for (int r = 0; r < 2; ++r) lanes[lane].b[r] = fresh[lane].b[r];
    float out[32][4];
    mf_emu::mma_m16n8k16_warp<H>(lanes, out);
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) {
        const RC q = c_pos(lane, i);
        const float want = (q.row == 0 ? widen(p.b[0][q.col]) : 0.0f) + p.c[q.row][q.col];
        CAPTURE(lane);
        CAPTURE(i);
        REQUIRE(out[lane][i] == want);
      }
  }

  SUBCASE("swapping the two halves of one A register changes exactly one D row") {
    std::mt19937 rng(2024u);
    for (int trial = 0; trial < 128; ++trial) {
      const int lane = trial / 4, reg = trial % 4;
      CAPTURE(lane);
      CAPTURE(reg);
      Problem<H> p = random_ints<H>(rng, 8, 20);
      // element indices 2*reg (low) and 2*reg+1 (high) of this lane
      const RC lo = a_pos(lane, 2 * reg), hi = a_pos(lane, 2 * reg + 1);
      REQUIRE(lo.row == hi.row);
      REQUIRE(hi.col == lo.col + 1);
      // make the swap observable in every column of that row
      p.a[lo.row][lo.col] = round_to<H>(2.0f);
      p.a[hi.row][hi.col] = round_to<H>(-5.0f);
      for (int n = 0; n < 8; ++n) {
        p.b[lo.col][n] = round_to<H>(static_cast<float>(n + 1));
        p.b[hi.col][n] = round_to<H>(static_cast<float>(-n - 3));
      }
      MmaLane lanes[32];
      p.scatter(lanes);
      float before[32][4], after[32][4];
      mf_emu::mma_m16n8k16_warp<H>(lanes, before);
      std::uint32_t& r = lanes[lane].a[reg];
      r = (r << 16) | (r >> 16);
      mf_emu::mma_m16n8k16_warp<H>(lanes, after);

      Problem<H> swapped = p;
      std::swap(swapped.a[lo.row][lo.col], swapped.a[hi.row][hi.col]);
      double ref[16][8], mag[16][8];
      swapped.reference(ref, mag);
      int changed = 0;
      for (int l = 0; l < 32; ++l)
        for (int i = 0; i < 4; ++i) {
          const RC q = c_pos(l, i);
          CAPTURE(l);
          CAPTURE(i);
          REQUIRE(static_cast<double>(after[l][i]) == ref[q.row][q.col]);
          if (q.row == lo.row) {
            // delta = (a_hi - a_lo) * (B[lo][n] - B[hi][n]) = (-7) * (2n + 4) != 0
            REQUIRE(after[l][i] - before[l][i] == -7.0f * static_cast<float>(2 * q.col + 4));
            ++changed;
          } else {
            REQUIRE(after[l][i] == before[l][i]);
          }
        }
      REQUIRE(changed == 8);
    }
  }

  SUBCASE("swapping the two halves of one B register changes exactly one D column") {
    std::mt19937 rng(77u);
    for (int lane = 0; lane < 32; ++lane) {
      const int reg = lane % 2;
      CAPTURE(lane);
      Problem<H> p = random_ints<H>(rng, 8, 20);
      const RC lo = b_pos(lane, 2 * reg), hi = b_pos(lane, 2 * reg + 1);
      REQUIRE(lo.col == hi.col);
      REQUIRE(hi.row == lo.row + 1);
      p.b[lo.row][lo.col] = round_to<H>(3.0f);
      p.b[hi.row][hi.col] = round_to<H>(-1.0f);
      for (int m = 0; m < 16; ++m) {
        p.a[m][lo.row] = round_to<H>(static_cast<float>(m + 1));
        p.a[m][hi.row] = round_to<H>(static_cast<float>(-m - 2));
      }
      MmaLane lanes[32];
      p.scatter(lanes);
      float before[32][4], after[32][4];
      mf_emu::mma_m16n8k16_warp<H>(lanes, before);
      std::uint32_t& r = lanes[lane].b[reg];
      r = (r << 16) | (r >> 16);
      mf_emu::mma_m16n8k16_warp<H>(lanes, after);
      int changed = 0;
      for (int l = 0; l < 32; ++l)
        for (int i = 0; i < 4; ++i) {
          const RC q = c_pos(l, i);
          if (q.col == lo.col) {
            // delta = (b_hi - b_lo) * (A[m][lo] - A[m][hi]) = (-4) * (2m + 3)
            REQUIRE(after[l][i] - before[l][i] == -4.0f * static_cast<float>(2 * q.row + 3));
            ++changed;
          } else {
            REQUIRE(after[l][i] == before[l][i]);
          }
        }
      REQUIRE(changed == 16);
    }
  }
}

}  // namespace

TEST_CASE("emu mma.m16n8k16.row.col.f32.bf16.bf16.f32 warp semantics") { structural_tests<__nv_bfloat16>(); }

TEST_CASE("emu mma.m16n8k16.row.col.f32.f16.f16.f32 warp semantics") { structural_tests<__half>(); }

TEST_CASE("emu mma.m16n8k16: bf16 and f16 read the same bits differently") {
  // 0x3f80 is 1.0 in bf16 but 1.875 in f16: the element type must matter.
  MmaLane lanes[32] = {};
  for (MmaLane& l : lanes) {
    l.a[0] = 0x3f80u;  // A[g][2t] = x, everything else 0
    l.b[0] = 0x3f80u;  // B[2t][g] = x
  }
  float dbf[32][4], dh[32][4];
  mf_emu::mma_m16n8k16_warp<__nv_bfloat16>(lanes, dbf);
  mf_emu::mma_m16n8k16_warp<__half>(lanes, dh);
  // D[m][n] = sum_k A[m][k] B[k][n]; A[m][k] != 0 only for m < 8, k even;
  // B[k][n] != 0 only for k even: D[m][n] = 4 * x^2 for m < 8 (k = 0,2,4,6).
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      const RC q = c_pos(lane, i);
      CHECK(dbf[lane][i] == (q.row < 8 ? 4.0f : 0.0f));
      CHECK(dh[lane][i] == (q.row < 8 ? 4.0f * 1.875f * 1.875f : 0.0f));
    }
}
