// Eight f32 lanes for the CPU twins' hot loops: GCC/Clang vector extensions
// (one AVX register, or two SSE registers in the baseline build) and the
// run-time clone that gives them AVX2.
//
// The build targets the baseline x86-64 ISA; functions marked MF_SIMD_CLONES
// get an AVX2 clone picked at load time. The project compiles in ISO C++ mode,
// where GCC does not contract a*b+c into an FMA, and the clones enable no FMA
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
// Three shuffle stages (pairs, quads, 128-bit halves), 24 two-input shuffles.
inline void transpose8x8(v8f r[8]) {
  const v8i lo = {0, 8, 1, 9, 4, 12, 5, 13}, hi = {2, 10, 3, 11, 6, 14, 7, 15};
  v8f t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shuffle(r[i], r[i + 1], lo);
    t[i + 1] = __builtin_shuffle(r[i], r[i + 1], hi);
  }
  const v8i lo2 = {0, 1, 8, 9, 4, 5, 12, 13}, hi2 = {2, 3, 10, 11, 6, 7, 14, 15};
  v8f s[8];
  for (int i = 0; i < 8; i += 4) {
    s[i] = __builtin_shuffle(t[i], t[i + 2], lo2);
    s[i + 1] = __builtin_shuffle(t[i], t[i + 2], hi2);
    s[i + 2] = __builtin_shuffle(t[i + 1], t[i + 3], lo2);
    s[i + 3] = __builtin_shuffle(t[i + 1], t[i + 3], hi2);
  }
  const v8i first = {0, 1, 2, 3, 8, 9, 10, 11}, second = {4, 5, 6, 7, 12, 13, 14, 15};
  for (int i = 0; i < 4; ++i) {
    r[i] = __builtin_shuffle(s[i], s[i + 4], first);
    r[i + 4] = __builtin_shuffle(s[i], s[i + 4], second);
  }
}

}  // namespace mf
