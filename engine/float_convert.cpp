#include "engine/float_convert.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cstring>

#include "engine/error.hpp"

namespace mf {

// On x86 with AVX2 + F16C every pair the reader uses (f16/f32 -> f32/f16/bf16)
// has a fused single pass: check + convert (or check + copy) reading each
// source element once (convert_fused below). Elsewhere, blocks of 1024
// elements: the source is checked for non-finite values with a branch-free OR
// over exponent bits, converted to f32 and then to the destination type.

namespace {
constexpr std::int64_t kConvBlock = 1024;

// Exact scan for the first element whose exponent bits are all ones. The fast
// test works on 64-bit words (SWAR): lane x = (w & E) ^ E is zero exactly for
// Inf/NaN lanes, and "some lane is zero" is the classic borrow test (exact as a
// yes/no answer; the position is then found element by element).
template <class U>
std::int64_t scan_exact(const U* u, std::int64_t b, std::int64_t e, U mask) {
  for (std::int64_t i = b; i < e; ++i)
    if ((u[i] & mask) == mask) return i;
  return -1;
}
std::int64_t first_nonfinite_bits(const void* p, DType t, std::int64_t n) {
  const bool wide = t == DType::f32;
  const std::uint64_t E = wide ? 0x7f8000007f800000ull : (t == DType::f16 ? 0x7c007c007c007c00ull : 0x7f807f807f807f80ull);
  const std::uint64_t ones = wide ? 0x0000000100000001ull : 0x0001000100010001ull;
  const std::uint64_t highs = wide ? 0x8000000080000000ull : 0x8000800080008000ull;
  const std::int64_t per = wide ? 2 : 4;  // elements per word
  const auto* bytes = static_cast<const unsigned char*>(p);
  const std::int64_t words = n / per;
  constexpr std::int64_t kBlock = 64;  // words per test
  for (std::int64_t wb = 0; wb < words; wb += kBlock) {
    const std::int64_t we = std::min(words, wb + kBlock);
    std::uint64_t any = 0;
    for (std::int64_t w = wb; w < we; ++w) {
      std::uint64_t v;
      std::memcpy(&v, bytes + w * 8, 8);
      const std::uint64_t x = (v & E) ^ E;
      any |= (x - ones) & ~x & highs;
    }
    if (any) {
      const std::int64_t r = wide ? scan_exact(static_cast<const std::uint32_t*>(p), wb * per, we * per, 0x7f800000u)
                                  : scan_exact(static_cast<const std::uint16_t*>(p), wb * per, we * per,
                                               std::uint16_t(E & 0xffffu));
      if (r >= 0) return r;
    }
  }
  return wide ? scan_exact(static_cast<const std::uint32_t*>(p), words * per, n, 0x7f800000u)
              : scan_exact(static_cast<const std::uint16_t*>(p), words * per, n, std::uint16_t(E & 0xffffu));
}

void f16_to_f32_scalar(const std::uint16_t* s, float* d, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) d[i] = f16_bits_to_f32(s[i]);
}
void f32_to_f16_scalar(const float* s, std::uint16_t* d, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) d[i] = f32_to_f16_bits(s[i]);
}
void f32_to_bf16_loop(const float* s, std::uint16_t* d, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16_bits(s[i]);
}

#if defined(__x86_64__)
__attribute__((target("avx2,f16c"))) void f16_to_f32_f16c(const std::uint16_t* s, float* d, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) d[i] = f16_bits_to_f32(s[i]);
}
__attribute__((target("avx2,f16c"))) void f32_to_f16_f16c(const float* s, std::uint16_t* d, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) d[i] = f32_to_f16_bits(s[i]);
}
__attribute__((target("avx2"))) void f32_to_bf16_avx2(const float* s, std::uint16_t* d, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16_bits(s[i]);
}
const bool kHaveF16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
#else
const bool kHaveF16c = false;
#endif

#if defined(__x86_64__)
// ---- fused AVX2/F16C passes -------------------------------------------------
// One pass per element: load the source, fold its magnitude bits (x & 0x7f..f)
// into a running unsigned max (branch-free, one AND and one MAX per vector),
// convert, store. The value is non-finite exactly when its magnitude bits are
// >= the all-ones exponent (f16 0x7c00, bf16 0x7f80, f32 0x7f800000), so the
// max says whether the block holds one; only then is the exact position looked
// for (first_nonfinite_bits, the slow path). Conversions round to nearest even
// and keep NaN payloads exactly like engine/dtype.hpp (tested bit for bit).
#define MF_AVX2 __attribute__((target("avx2,f16c")))

MF_AVX2 inline std::uint32_t hmax16(__m256i v) {
  alignas(32) std::uint16_t a[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(a), v);
  std::uint32_t m = 0;
  for (std::uint16_t x : a) m = std::max<std::uint32_t>(m, x);
  return m;
}
MF_AVX2 inline std::uint32_t hmax32(__m256i v) {
  alignas(32) std::uint32_t a[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(a), v);
  std::uint32_t m = 0;
  for (std::uint32_t x : a) m = std::max(m, x);
  return m;
}
// f32 (as 32-bit lanes) -> bf16 bits in the low half of each lane.
MF_AVX2 inline __m256i bf16_lanes(__m256i x) {
  const __m256i absx = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(absx, _mm256_set1_epi32(0x7f800000));
  const __m256i hi = _mm256_srli_epi32(x, 16);
  const __m256i rne = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), _mm256_and_si256(hi, _mm256_set1_epi32(1))), 16);
  return _mm256_blendv_epi8(rne, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
}
// Two groups of 8 lanes -> 16 consecutive 16-bit values.
MF_AVX2 inline __m256i pack_lanes(__m256i a, __m256i b) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
}

// Same type: check (and copy when dst != src). Returns the max magnitude bits.
MF_AVX2 std::uint32_t copy_check16(const std::uint16_t* s, std::uint16_t* d, std::int64_t n) {
  const __m256i m = _mm256_set1_epi16(0x7fff);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0;
  std::int64_t i = 0;
  const bool copy = s != d;
  for (; i + 32 <= n; i += 32) {
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 16));
    a0 = _mm256_max_epu16(a0, _mm256_and_si256(v0, m));
    a1 = _mm256_max_epu16(a1, _mm256_and_si256(v1, m));
    if (copy) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), v0);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 16), v1);
    }
  }
  std::uint32_t r = hmax16(_mm256_max_epu16(a0, a1));
  for (; i < n; ++i) {
    r = std::max<std::uint32_t>(r, s[i] & 0x7fffu);
    d[i] = s[i];
  }
  return r;
}
MF_AVX2 std::uint32_t copy_check32(const std::uint32_t* s, std::uint32_t* d, std::int64_t n) {
  const __m256i m = _mm256_set1_epi32(0x7fffffff);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0;
  std::int64_t i = 0;
  const bool copy = s != d;
  for (; i + 16 <= n; i += 16) {
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 8));
    a0 = _mm256_max_epu32(a0, _mm256_and_si256(v0, m));
    a1 = _mm256_max_epu32(a1, _mm256_and_si256(v1, m));
    if (copy) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), v0);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 8), v1);
    }
  }
  std::uint32_t r = hmax32(_mm256_max_epu32(a0, a1));
  for (; i < n; ++i) {
    r = std::max(r, s[i] & 0x7fffffffu);
    d[i] = s[i];
  }
  return r;
}
MF_AVX2 std::uint32_t f16_to_f32_fused(const std::uint16_t* s, float* d, std::int64_t n) {
  const __m128i m = _mm_set1_epi16(0x7fff);
  __m128i a0 = _mm_setzero_si128(), a1 = a0;
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i h0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i h1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 8));
    a0 = _mm_max_epu16(a0, _mm_and_si128(h0, m));
    a1 = _mm_max_epu16(a1, _mm_and_si128(h1, m));
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(h0));
    _mm256_storeu_ps(d + i + 8, _mm256_cvtph_ps(h1));
  }
  std::uint32_t r = hmax16(_mm256_set_m128i(a0, a1));
  for (; i < n; ++i) {
    r = std::max<std::uint32_t>(r, s[i] & 0x7fffu);
    d[i] = f16_bits_to_f32(s[i]);
  }
  return r;
}
MF_AVX2 std::uint32_t f16_to_bf16_fused(const std::uint16_t* s, std::uint16_t* d, std::int64_t n) {
  const __m128i m = _mm_set1_epi16(0x7fff);
  __m128i a0 = _mm_setzero_si128(), a1 = a0;
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i h0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i h1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 8));
    a0 = _mm_max_epu16(a0, _mm_and_si128(h0, m));
    a1 = _mm_max_epu16(a1, _mm_and_si128(h1, m));
    const __m256i b0 = bf16_lanes(_mm256_castps_si256(_mm256_cvtph_ps(h0)));
    const __m256i b1 = bf16_lanes(_mm256_castps_si256(_mm256_cvtph_ps(h1)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), pack_lanes(b0, b1));
  }
  std::uint32_t r = hmax16(_mm256_set_m128i(a0, a1));
  for (; i < n; ++i) {
    r = std::max<std::uint32_t>(r, s[i] & 0x7fffu);
    d[i] = f32_to_bf16_bits(f16_bits_to_f32(s[i]));
  }
  return r;
}
MF_AVX2 std::uint32_t f32_to_f16_fused(const float* s, std::uint16_t* d, std::int64_t n) {
  const __m256i m = _mm256_set1_epi32(0x7fffffff);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0;
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 v0 = _mm256_loadu_ps(s + i), v1 = _mm256_loadu_ps(s + i + 8);
    a0 = _mm256_max_epu32(a0, _mm256_and_si256(_mm256_castps_si256(v0), m));
    a1 = _mm256_max_epu32(a1, _mm256_and_si256(_mm256_castps_si256(v1), m));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_cvtps_ph(v0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 8),
                     _mm256_cvtps_ph(v1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  std::uint32_t r = hmax32(_mm256_max_epu32(a0, a1));
  for (; i < n; ++i) {
    r = std::max(r, std::bit_cast<std::uint32_t>(s[i]) & 0x7fffffffu);
    d[i] = f32_to_f16_bits(s[i]);
  }
  return r;
}
MF_AVX2 std::uint32_t f32_to_bf16_fused(const float* s, std::uint16_t* d, std::int64_t n) {
  const __m256i m = _mm256_set1_epi32(0x7fffffff);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0;
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 8));
    a0 = _mm256_max_epu32(a0, _mm256_and_si256(v0, m));
    a1 = _mm256_max_epu32(a1, _mm256_and_si256(v1, m));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), pack_lanes(bf16_lanes(v0), bf16_lanes(v1)));
  }
  std::uint32_t r = hmax32(_mm256_max_epu32(a0, a1));
  for (; i < n; ++i) {
    r = std::max(r, std::bit_cast<std::uint32_t>(s[i]) & 0x7fffffffu);
    d[i] = f32_to_bf16_bits(s[i]);
  }
  return r;
}
#undef MF_AVX2

// The fused pass for (st, dt) when one exists: returns true and sets *maybe_bad
// (the max magnitude bits reached the all-ones exponent of st).
bool convert_fused(const void* src, DType st, void* dst, DType dt, std::int64_t n, bool* maybe_bad) {
  if (!kHaveF16c) return false;
  std::uint32_t mx = 0, thr = 0;
  const auto* s16 = static_cast<const std::uint16_t*>(src);
  auto* d16 = static_cast<std::uint16_t*>(dst);
  if (st == DType::f16 || st == DType::bf16) {
    thr = st == DType::f16 ? 0x7c00u : 0x7f80u;
    if (dt == st) mx = copy_check16(s16, d16, n);
    else if (st == DType::f16 && dt == DType::f32) mx = f16_to_f32_fused(s16, static_cast<float*>(dst), n);
    else if (st == DType::f16 && dt == DType::bf16) mx = f16_to_bf16_fused(s16, d16, n);
    else return false;
  } else if (st == DType::f32) {
    thr = 0x7f800000u;
    const auto* sf = static_cast<const float*>(src);
    if (dt == DType::f32)
      mx = copy_check32(static_cast<const std::uint32_t*>(src), static_cast<std::uint32_t*>(dst), n);
    else if (dt == DType::f16) mx = f32_to_f16_fused(sf, d16, n);
    else if (dt == DType::bf16) mx = f32_to_bf16_fused(sf, d16, n);
    else return false;
  } else {
    return false;
  }
  *maybe_bad = mx >= thr;
  return true;
}
#else
bool convert_fused(const void*, DType, void*, DType, std::int64_t, bool*) { return false; }
#endif

void widen_to_f32(const void* src, DType st, float* d, std::int64_t n) {
  const auto* u = static_cast<const std::uint16_t*>(src);
  switch (st) {
    case DType::f32: std::memcpy(d, src, std::size_t(n) * 4); return;
#if defined(__x86_64__)
    case DType::f16: return kHaveF16c ? f16_to_f32_f16c(u, d, n) : f16_to_f32_scalar(u, d, n);
#else
    case DType::f16: return f16_to_f32_scalar(u, d, n);
#endif
    case DType::bf16:
      for (std::int64_t i = 0; i < n; ++i) d[i] = bf16_bits_to_f32(u[i]);
      return;
    default: MF_THROW("convert_floats: source must be f32, f16 or bf16, not {}", dtype_name(st));
  }
}

void narrow_from_f32(const float* s, void* dst, DType dt, std::int64_t n) {
  auto* u = static_cast<std::uint16_t*>(dst);
  switch (dt) {
    case DType::f32: std::memcpy(dst, s, std::size_t(n) * 4); return;
#if defined(__x86_64__)
    case DType::f16: return kHaveF16c ? f32_to_f16_f16c(s, u, n) : f32_to_f16_scalar(s, u, n);
    case DType::bf16: return kHaveF16c ? f32_to_bf16_avx2(s, u, n) : f32_to_bf16_loop(s, u, n);
#else
    case DType::f16: return f32_to_f16_scalar(s, u, n);
    case DType::bf16: return f32_to_bf16_loop(s, u, n);
#endif
    default: MF_THROW("convert_floats: destination must be f32, f16 or bf16, not {}", dtype_name(dt));
  }
}
}  // namespace

std::int64_t convert_floats(const void* src, DType st, void* dst, DType dt, std::int64_t n, bool check) {
  MF_CHECK(dtype_is_float(st), "convert_floats: source must be f32, f16 or bf16, not {}", dtype_name(st));
  MF_CHECK(dtype_is_float(dt), "convert_floats: destination must be f32, f16 or bf16, not {}", dtype_name(dt));
  // In place (src == dst) only for the same type: nothing to convert, only the check.
  if (bool maybe_bad = false; convert_fused(src, st, dst, dt, n, &maybe_bad))
    return check && maybe_bad ? first_nonfinite_bits(src == dst ? dst : src, st, n) : -1;
  if (st == dt) {
    if (src != dst) std::memcpy(dst, src, std::size_t(n) * dtype_size(st));
    return check ? first_nonfinite_bits(dst, dt, n) : -1;
  }
  if (check)
    if (const std::int64_t bad = first_nonfinite_bits(src, st, n); bad >= 0) return bad;
  const std::size_t ss = dtype_size(st), ds = dtype_size(dt);
  const auto* s = static_cast<const std::byte*>(src);
  auto* d = static_cast<std::byte*>(dst);
  if (st == DType::f32) {
    narrow_from_f32(static_cast<const float*>(src), dst, dt, n);
    return -1;
  }
  if (dt == DType::f32) {
    widen_to_f32(src, st, static_cast<float*>(dst), n);
    return -1;
  }
  alignas(64) float tmp[kConvBlock];
  for (std::int64_t b = 0; b < n; b += kConvBlock) {
    const std::int64_t len = std::min(kConvBlock, n - b);
    widen_to_f32(s + std::size_t(b) * ss, st, tmp, len);
    narrow_from_f32(tmp, d + std::size_t(b) * ds, dt, len);
  }
  return -1;
}

std::int64_t first_nonfinite(const void* data, DType type, std::int64_t n) {
  MF_CHECK(dtype_is_float(type), "first_nonfinite: expected f32, f16 or bf16 values, found {}", dtype_name(type));
  return first_nonfinite_bits(data, type, n);
}

float float_at(const void* data, DType type, std::int64_t i) {
  switch (type) {
    case DType::f32: return static_cast<const float*>(data)[i];
    case DType::f16: return float(static_cast<const f16*>(data)[i]);
    case DType::bf16: return float(static_cast<const bf16*>(data)[i]);
    default: MF_THROW("float_at: expected f32, f16 or bf16 values, found {}", dtype_name(type));
  }
}

}  // namespace mf
