// Eight f32 lanes for the CPU twins' hot loops: GCC/Clang vector extensions
// (one AVX register, or two SSE registers in the baseline build) and the
// run-time clone that gives them AVX2.
//
// The build targets the baseline x86-64 ISA; functions marked MF_SIMD_CLONES
// get an AVX2 clone picked at load time. The project compiles with
// -ffp-contract=off (no a*b+c made an FMA), and the clones enable no FMA
// anyway: every clone performs the same f32 operations in the same order, so
// the bits do not depend on which one runs.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__GNUC__) && !defined(__clang__)
// Vector arguments change ABI with -mavx: only file-local inline helpers pass
// them by value, so the note is moot.
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MF_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MF_SIMD_CLONES
#endif

namespace mf {

typedef float v8f __attribute__((vector_size(32)));
typedef std::int32_t v8i __attribute__((vector_size(32)));
typedef std::uint32_t v8u __attribute__((vector_size(32)));

inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }
inline v8f splat8(float x) { return v8f{x, x, x, x, x, x, x, x}; }

// r[0..7] (rows) become its columns: afterwards r[i][j] is the old r[j][i].
// Three shuffle stages (pairs, quads, 128-bit halves), 24 two-input shuffles
// (__builtin_shufflevector: GCC >= 12 and Clang).
inline void transpose8x8(v8f r[8]) {
  v8f t[8];
  for (int i = 0; i < 8; i += 2) {  // pairs: unpacklo / unpackhi
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  v8f s[8];
  for (int i = 0; i < 8; i += 4) {  // quads
    s[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    s[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    s[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    s[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int i = 0; i < 4; ++i) {  // 128-bit halves
    r[i] = __builtin_shufflevector(s[i], s[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    r[i + 4] = __builtin_shufflevector(s[i], s[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

}  // namespace mf
