#include "io/dataset.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>
#include <utility>

#include "engine/isolate.hpp"
#include "engine/parallel.hpp"
#include "io/h5_error.hpp"
#include "io/h5_read.hpp"

namespace mf::io {

std::string_view segment_layout_name(SegmentLayout l) {
  return l == SegmentLayout::flat ? "flat [N, n_mels, frames]" : "file-structured [F, L, S, n_mels, frames]";
}
std::string_view storage_layout_name(StorageLayout l) {
  switch (l) {
    case StorageLayout::contiguous: return "contiguous";
    case StorageLayout::chunked: return "chunked";
    case StorageLayout::compact: return "compact";
    case StorageLayout::other: return "other";
  }
  return "?";
}

std::string DatasetInfo::where(std::int64_t s) const {
  if (layout == SegmentLayout::flat) return fmt::format("segment {}", s);
  const std::int64_t f = s / segments_per_file, r = s % segments_per_file;
  return fmt::format("segment {} (file {}, long {}, short {})", s, f, r / short_per_long, r % short_per_long);
}

// ---- float conversion ------------------------------------------------------
// On x86 with AVX2 + F16C every pair the reader uses (f16/f32 -> f32/f16/bf16)
// has a fused single pass: check + convert (or check + copy) reading each
// source element once (convert_fused below). Elsewhere, blocks of 1024
// elements: the source is checked for non-finite values with a branch-free OR
// over exponent bits, converted to f32 and then to the destination type. Both
// round to nearest even like the scalar code in engine/dtype.hpp.

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

float load_any(const void* p, DType t, std::int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f16: return float(static_cast<const f16*>(p)[i]);
    case DType::bf16: return float(static_cast<const bf16*>(p)[i]);
    default: return 0.f;
  }
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

void to_f32(const void* src, DType st, float* d, std::int64_t n) {
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

void from_f32(const float* s, void* dst, DType dt, std::int64_t n) {
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
    from_f32(static_cast<const float*>(src), dst, dt, n);
    return -1;
  }
  if (dt == DType::f32) {
    to_f32(src, st, static_cast<float*>(dst), n);
    return -1;
  }
  alignas(64) float tmp[kConvBlock];
  for (std::int64_t b = 0; b < n; b += kConvBlock) {
    const std::int64_t len = std::min(kConvBlock, n - b);
    to_f32(s + std::size_t(b) * ss, st, tmp, len);
    from_f32(tmp, d + std::size_t(b) * ds, dt, len);
  }
  return -1;
}

// ---- HDF5 helpers ------------------------------------------------------------

namespace {

herr_t collect_names(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

// For the message about a missing dataset. The listing runs in a child process
// (engine/isolate.hpp): on a damaged symbol table HDF5 1.10.8 reads past a link
// name's buffer in H5Literate (H5G__ent_to_link -> strdup; found by fuzzing).
std::string root_members(hid_t file) {
  std::string listing;
  try {
    listing = run_isolated("listing the root group", isolate_timeout_s(30), [&] {
      std::vector<std::string> names;
      H5Literate(file, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect_names, &names);
      return fmt::format("{}", fmt::join(names, ", "));
    });
  } catch (const Error& e) {
    return fmt::format("its root could not be listed ({})", e.message());
  }
  if (listing.empty()) return "the file holds no objects at its root";
  return fmt::format("the root holds: {}", listing);
}

// True when every component of `name` exists as a link.
bool path_exists(hid_t file, const std::string& name) {
  std::string acc;
  std::size_t pos = 0;
  while (pos <= name.size()) {
    const std::size_t next = name.find('/', pos);
    const std::string part = name.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    if (!part.empty()) {
      acc += "/" + part;
      if (H5Lexists(file, acc.c_str(), H5P_DEFAULT) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return false;
      }
    }
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  return !acc.empty();
}

std::string dset_name(const std::string& n) { return n.starts_with('/') ? n : "/" + n; }

// An attribute on the dataset or, failing that, on the root group.
H5Id find_attr(hid_t dset, hid_t file, const char* name) {
  for (hid_t obj : {dset, file}) {
    if (H5Aexists(obj, name) > 0) return H5Id(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
    H5Eclear2(H5E_DEFAULT);
  }
  return {};
}

// A number attribute (sample_rate, hop_length, n_mels): one finite value.
double read_number_attr(H5Id attr, const std::string& path, const char* name) {
  const H5Value v(std::move(attr), path, fmt::format("attribute {}", name));
  const double x = v.read_number();
  MF_CHECK(std::isfinite(x), "{}: expected a finite number, found {}", v.where(), x);
  return x;
}

// Reads an integer (or bool enum) dataset of rank 1 and `expected` elements as int64.
std::vector<std::int64_t> read_int_vector(hid_t file, const std::string& name, std::int64_t expected,
                                          const std::string& expected_desc, const std::string& path,
                                          bool allow_bool) {
  const H5Value d = H5Value::dataset(file, name, path, name);
  const H5T_class_t c = d.type_class();
  const bool is_enum = c == H5T_ENUM;
  if (c != H5T_INTEGER && !(allow_bool && is_enum))
    MF_THROW("{}: dataset {} must hold integers{}, found {}", path, name, allow_bool ? " or bools" : "",
             d.type_desc());
  if (d.null_space() || d.dims().size() != 1 || d.dims()[0] != expected)
    MF_THROW("{}: dataset {} has {}, expected [{}] ({}): the count does not match {}", path, name,
             d.null_space() ? d.shape_desc() : "shape " + shape_str(d.dims()), expected, expected_desc,
             "the segments");
  if (!is_enum) return d.read_vector<std::int64_t>(H5T_NATIVE_INT64);
  H5Id super(MF_H5_CHECK(H5Tget_super(d.type()), "{}: dataset {}", path, name), H5Tclose);
  const std::size_t sz = H5Tget_size(super);
  if (sz != 1) MF_THROW("{}: dataset {} is an enum of {} bytes; only 1-byte bools are supported", path, name, sz);
  H5Id mt(MF_H5_CHECK(H5Tget_native_type(d.type(), H5T_DIR_ASCEND), "{}: dataset {}", path, name), H5Tclose);
  const std::vector<std::int8_t> b = d.read_vector<std::int8_t>(mt);
  return std::vector<std::int64_t>(b.begin(), b.end());
}

struct ChunkRec {
  std::uint64_t addr = 0;
  std::uint32_t size = 0;
  std::uint32_t filter_mask = 0;
};

void pread_full(int fd, void* buf, std::size_t n, std::uint64_t off, const std::string& path) {
  auto* p = static_cast<char*>(buf);
  std::size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, p + done, n - done, off_t(off + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      MF_THROW("{}: reading {} bytes at offset {} failed: {}", path, n, off, std::strerror(errno));
    }
    if (r == 0)
      MF_THROW("{}: file truncated: reading {} bytes at offset {} hit the end of the file after {} bytes", path,
               n, off, done);
    done += std::size_t(r);
  }
}

struct Scratch {
  std::vector<std::byte> a, b, c;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}
void grow(std::vector<std::byte>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

// ---- the dataset -------------------------------------------------------------

struct Dataset::Impl {
  enum class Mode { contiguous, chunked, hdf5 } mode = Mode::contiguous;
  std::string path, seg_name;
  int fd = -1;
  DType dtype = DType::f32;
  std::size_t esz = 4;
  std::uint64_t base = 0;  // contiguous
  // chunked
  std::vector<std::int64_t> dims, chunk, grid;
  std::vector<ChunkRec> chunks;  // row-major over grid
  std::vector<int> filters;      // pipeline order (H5Z_FILTER_*)
  std::size_t chunk_bytes = 0;
  // H5Dread fallback (kept open only then)
  H5Id file, dset;

  ~Impl() {
    if (fd >= 0) ::close(fd);
  }
  void read_contiguous(const DatasetInfo& info, std::span<const std::int64_t> rows, DType dt, void* dst,
                       bool check) const;
  void read_chunked(const DatasetInfo& info, std::span<const std::int64_t> rows, DType dt, void* dst,
                    bool check) const;
  void read_hdf5(const DatasetInfo& info, std::span<const std::int64_t> rows, DType dt, void* dst,
                 bool check) const;
  bool resolve_storage(DatasetInfo& info, hid_t h5file, hid_t ds, std::uint64_t file_size);
  bool index_chunks(DatasetInfo& info, hid_t ds, hid_t dcpl, std::uint64_t file_size);
  [[noreturn]] void throw_nonfinite(const DatasetInfo& info, std::int64_t seg, std::int64_t elem,
                                    float v) const {
    MF_THROW("{}: {} holds a non-finite value ({}) at {}, mel {}, frame {}: expected finite log-mel values", path,
             seg_name, v, info.where(seg), elem / info.frames, elem % info.frames);
  }
};

Dataset::Dataset(std::unique_ptr<Impl> impl, DatasetInfo info) : impl_(std::move(impl)), info_(std::move(info)) {}
Dataset::~Dataset() = default;

namespace {

// The segments' element type: little-endian IEEE float16 or float32.
void check_segment_type(hid_t dset, const std::string& path, const std::string& seg, DatasetInfo& info) {
  H5Id type(MF_H5_CHECK(H5Dget_type(dset), "{}: reading the datatype of {}", path, seg), H5Tclose);
  if (H5Tget_class(type) != H5T_FLOAT)
    MF_THROW("{}: dataset {} must hold float16 or float32 values, found {}", path, seg, h5_type_desc(type));
  const std::size_t sz = H5Tget_size(type);
  if (sz != 2 && sz != 4)
    MF_THROW("{}: dataset {} has an unsupported float width: expected 16 or 32 bits, found {} bits", path, seg,
             sz * 8);
  if (H5Tget_order(type) != H5T_ORDER_LE)
    MF_THROW("{}: dataset {} is big-endian: expected little-endian IEEE floats", path, seg);
  std::size_t spos, epos, esize, mpos, msize;
  H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize);
  const bool ieee = sz == 2 ? (spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10)
                            : (spos == 31 && epos == 23 && esize == 8 && mpos == 0 && msize == 23);
  if (!ieee)
    MF_THROW("{}: dataset {} is a {}-bit float with {} exponent and {} mantissa bits: expected IEEE {}", path,
             seg, sz * 8, esize, msize, sz == 2 ? "half (5/10)" : "single (8/23)");
  info.dtype = sz == 2 ? DType::f16 : DType::f32;
}

// The shape as the file declares it and what it means (not yet checked
// against what the file holds: that is resolve_storage's job).
void set_segment_shape(hid_t dset, const std::string& path, const std::string& seg, DatasetInfo& info) {
  info.shape = h5_dims(dset, fmt::format("{}: dataset {}", path, seg));
  const auto& sh = info.shape;
  if (sh.size() != 3 && sh.size() != 5)
    MF_THROW("{}: dataset {} has the wrong rank: expected 3 ([N, n_mels, frames]) or 5 ([F, L, S, n_mels, "
             "frames]), found rank {} {}", path, seg, sh.size(), shape_str(sh));
  const std::optional<std::int64_t> numel = checked_numel(sh);
  std::uint64_t bytes = 0;
  if (!numel || __builtin_mul_overflow(std::uint64_t(*numel), dtype_size(info.dtype), &bytes))
    MF_THROW("{}: dataset {} has shape {}: expected a size that fits in 64 bits, found one that overflows "
             "(damaged file?)", path, seg, shape_str(sh));
  if (*numel == 0) MF_THROW("{}: dataset {} is empty: shape {}", path, seg, shape_str(sh));
  // Every partial product below is at most numel: no overflow.
  if (sh.size() == 3) {
    info.layout = SegmentLayout::flat;
    info.num_segments = sh[0];
    info.num_files = sh[0];
  } else {
    info.layout = SegmentLayout::file_structured;
    info.num_files = sh[0];
    info.long_per_file = sh[1];
    info.short_per_long = sh[2];
    info.segments_per_file = sh[1] * sh[2];
    info.num_segments = sh[0] * sh[1] * sh[2];
  }
  info.n_mels = sh[sh.size() - 2];
  info.frames = sh[sh.size() - 1];
}

// The optional attributes, on the segments dataset or the root group.
void read_attributes(hid_t dset, hid_t file, const std::string& path, const std::string& seg, DatasetInfo& info) {
  if (H5Id a = find_attr(dset, file, "class_names"); a.get() >= 0)
    info.class_names = H5Value(std::move(a), path, fmt::format("attribute class_names (of {} or /)", seg)).read_strings();
  if (H5Id a = find_attr(dset, file, "sample_rate"); a.get() >= 0)
    info.sample_rate = read_number_attr(std::move(a), path, "sample_rate");
  if (H5Id a = find_attr(dset, file, "hop_length"); a.get() >= 0) {
    const double hop = read_number_attr(std::move(a), path, "hop_length");
    MF_CHECK(hop >= 0 && hop <= 9007199254740992.0 && hop == std::floor(hop),
             "{}: attribute hop_length: expected a whole number in [0, 2^53], found {}", path, hop);
    info.hop_length = std::int64_t(hop);
  }
  if (H5Id a = find_attr(dset, file, "n_mels"); a.get() >= 0) {
    const double nm = read_number_attr(std::move(a), path, "n_mels");
    if (nm != double(info.n_mels))
      MF_THROW("{}: attribute n_mels = {} disagrees with {} {}: expected n_mels = {} (the mel axis)", path, nm, seg,
               shape_str(info.shape), info.n_mels);
  }
}

// read_attributes in a child process (issue 21, item 6). Debian 12's HDF5 1.10.8
// loops forever in H5HG_read on a damaged global heap (where class_names'
// strings live), overlaps a memcpy there, and reads out of bounds in H5Aexists
// on a damaged object header; no HDF5 release fixes all of it. The child sends
// back what it read, so the parent never makes those calls; a crash or a read
// running past the limit becomes an error naming the file (engine/isolate.hpp;
// docs/decisions.md, "Damaged files and the HDF5 library").
void read_attributes_isolated(hid_t dset, hid_t file, const std::string& path, const std::string& seg,
                              DatasetInfo& info) {
  const std::string bytes = run_isolated(fmt::format("{}: reading the attributes of {}", path, seg),
                                         isolate_timeout_s(30), [&] {
    read_attributes(dset, file, path, seg, info);  // the child's copy of info
    ByteWriter w;
    w.u64(info.class_names.size());
    for (const std::string& n : info.class_names) w.str(n);
    w.f64(info.sample_rate);
    w.u64(static_cast<unsigned long long>(info.hop_length));
    return w.take();
  });
  ByteReader r(bytes);
  info.class_names.resize(std::min<std::size_t>(r.u64(), bytes.size() / 8));
  for (std::string& n : info.class_names) n = r.str();
  info.sample_rate = r.f64();
  info.hop_length = static_cast<std::int64_t>(r.u64());
}

// The labels (one per file), the class count and names, the normal class.
void read_labels(hid_t file, const std::string& path, const std::string& seg, const DatasetNames& names,
                 DatasetInfo& info) {
  const std::string lab = dset_name(names.labels);
  const std::int64_t F = info.num_files;
  if (!path_exists(file, lab))
    MF_THROW("{}: dataset {} is missing (expected integer labels [{}]); {}", path, lab, F, root_members(file));
  const std::string per = info.layout == SegmentLayout::flat ? "one per segment of " + seg
                                                             : "one per file, the first axis of " + seg;
  const auto raw_labels =
      read_int_vector(file, lab, F, fmt::format("{} {}", per, shape_str(info.shape)), path, false);
  std::int64_t max_label = 0;
  for (std::size_t i = 0; i < raw_labels.size(); ++i) {
    if (raw_labels[i] < 0)
      MF_THROW("{}: dataset {} holds a negative label {} at index {}: expected class indices 0..C-1", path, lab,
               raw_labels[i], i);
    // Class counts are ints: a larger label is no class index (and would wrap max_label + 1).
    if (raw_labels[i] >= std::numeric_limits<int>::max())
      MF_THROW("{}: dataset {} label value {} at index {} exceeds the largest supported class index {}", path, lab,
               raw_labels[i], i, std::numeric_limits<int>::max() - 1);
    max_label = std::max(max_label, raw_labels[i]);
  }
  std::string c_from;
  if (names.num_classes > 0) {
    info.num_classes = names.num_classes;
    c_from = "as configured";
  } else if (!info.class_names.empty()) {
    info.num_classes = int(info.class_names.size());
    c_from = "from the class_names attribute";
  } else {
    info.num_classes = int(max_label + 1);
    c_from = "from the largest label";
  }
  for (std::size_t i = 0; i < raw_labels.size(); ++i)
    if (raw_labels[i] >= info.num_classes)
      MF_THROW("{}: dataset {} holds label {} at index {}, out of range: expected 0..{} ({} classes {})", path, lab,
               raw_labels[i], i, info.num_classes - 1, info.num_classes, c_from);
  if (!info.class_names.empty() && int(info.class_names.size()) != info.num_classes)
    MF_THROW("{}: attribute class_names has {} names but {} classes were configured", path,
             info.class_names.size(), info.num_classes);
  if (info.class_names.empty()) {
    // Generated names cost memory per class: bound the count a file (one large
    // label) or a setting can ask for before making them.
    MF_CHECK(info.num_classes <= kMaxUnnamedClasses,
             "{}: {} classes {} but the file has no class_names attribute: expected at most {} unnamed classes "
             "(write class_names, or check the labels in {})",
             path, info.num_classes, c_from, kMaxUnnamedClasses, lab);
    for (int c = 0; c < info.num_classes; ++c) info.class_names.push_back(fmt::format("class_{}", c));
  }

  info.normal_class = names.normal_class;
  if (info.normal_class < 0) {
    info.normal_class = 0;
    for (int c = 0; c < info.num_classes; ++c) {
      std::string s = info.class_names[std::size_t(c)];
      std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
      if (s == "normal") info.normal_class = c;
    }
  }
  if (info.normal_class >= info.num_classes)
    MF_THROW("{}: normal class {} is out of range: expected 0..{}", path, info.normal_class, info.num_classes - 1);
  info.file_labels.resize(std::size_t(F));
  for (std::int64_t f = 0; f < F; ++f) info.file_labels[std::size_t(f)] = std::int32_t(raw_labels[std::size_t(f)]);
}

// The leak flags: the leak dataset when present, else "label != normal class";
// then the per-segment labels and flags.
void read_leak(hid_t file, const std::string& path, const DatasetNames& names, DatasetInfo& info) {
  const std::int64_t F = info.num_files, N = info.num_segments;
  info.file_leak.resize(std::size_t(F));
  for (std::int64_t f = 0; f < F; ++f) info.file_leak[std::size_t(f)] = info.file_labels[std::size_t(f)] != info.normal_class;
  if (!names.leak.empty() && path_exists(file, dset_name(names.leak))) {
    const std::string lk = dset_name(names.leak);
    const auto raw_leak =
        read_int_vector(file, lk, F, fmt::format("shaped like {}", dset_name(names.labels)), path, true);
    for (std::size_t i = 0; i < raw_leak.size(); ++i) {
      if (raw_leak[i] != 0 && raw_leak[i] != 1)
        MF_THROW("{}: dataset {} holds {} at index {}: expected 0 or 1", path, lk, raw_leak[i], i);
      info.file_leak[i] = std::uint8_t(raw_leak[i]);
    }
    info.leak_in_file = true;
  }
  info.labels.resize(std::size_t(N));
  info.leak.resize(std::size_t(N));
  for (std::int64_t s = 0; s < N; ++s) {
    info.labels[std::size_t(s)] = info.file_labels[std::size_t(info.file_of(s))];
    info.leak[std::size_t(s)] = info.file_leak[std::size_t(info.file_of(s))];
  }
}

}  // namespace

// The chunk shape, filters and (on the fast path) the address of every chunk.
// Returns false when a filter sends reads to the H5Dread fallback.
bool Dataset::Impl::index_chunks(DatasetInfo& info, hid_t ds, hid_t dcpl, std::uint64_t file_size) {
  auto& stg = info.storage;
  const auto& sh = info.shape;
  const int rank = int(sh.size());
  std::vector<hsize_t> cd(static_cast<std::size_t>(rank));
  MF_H5_CHECK(H5Pget_chunk(dcpl, rank, cd.data()), "{}: reading the chunk shape of {}", path, seg_name);
  stg.chunk.assign(cd.begin(), cd.end());
  bool fast = true;
  const int nf = H5Pget_nfilters(dcpl);
  for (int i = 0; i < nf; ++i) {
    unsigned flags = 0, fcfg = 0;
    std::size_t nelem = 8;
    unsigned cdv[8];
    char name[128] = {0};
    const H5Z_filter_t id = H5Pget_filter2(dcpl, unsigned(i), &flags, &nelem, cdv, sizeof(name), name, &fcfg);
    const std::string fname = name[0] ? std::string(name) : fmt::format("filter {}", int(id));
    stg.filters.push_back(fname);
    filters.push_back(int(id));
    if (id != H5Z_FILTER_DEFLATE && id != H5Z_FILTER_SHUFFLE) fast = false;
    if (H5Zfilter_avail(id) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      MF_THROW("{}: dataset {} is compressed with '{}' (HDF5 filter id {}), which this HDF5 library cannot "
               "decode: expected no filter, gzip (deflate) or shuffle", path, seg_name, fname, int(id));
    }
  }
  // The chunk grid, with every size checked: the numbers come from the file.
  for (std::int64_t c : stg.chunk)
    MF_CHECK(c >= 1, "{}: dataset {} has chunk shape {}: expected every chunk dimension >= 1 (damaged file?)", path,
             seg_name, shape_str(stg.chunk));
  dims = sh;
  chunk = stg.chunk;
  grid.resize(std::size_t(rank));
  for (int k = 0; k < rank; ++k) grid[std::size_t(k)] = (sh[std::size_t(k)] - 1) / chunk[std::size_t(k)] + 1;
  const std::optional<std::int64_t> nchunks = checked_numel(grid), chunk_elems = checked_numel(chunk);
  std::uint64_t cbytes = 0;
  if (!nchunks || !chunk_elems || __builtin_mul_overflow(std::uint64_t(*chunk_elems), std::uint64_t(esz), &cbytes) ||
      cbytes / kMaxFilterRatio > file_size)
    MF_THROW("{}: dataset {} has chunk shape {} (shape {}): expected chunks whose count and size fit in 64 bits and "
             "whose size fits in the {}-byte file, found {} (damaged file?)", path, seg_name, shape_str(stg.chunk),
             shape_str(sh), file_size, nchunks && chunk_elems ? fmt::format("{}-byte chunks", cbytes) : "an overflow");
  chunk_bytes = std::size_t(cbytes);
  // The chunks the file really stores (HDF5 walks its chunk index): the shape
  // may declare more, and the index below is sized from this, not from it.
  hsize_t stored = 0;
  {
    H5Id space(H5Dget_space(ds), H5Sclose);
    if (H5Dget_num_chunks(ds, space, &stored) < 0) H5Eclear2(H5E_DEFAULT);
  }
  stg.num_chunks = std::int64_t(std::min<hsize_t>(stored, hsize_t(std::numeric_limits<std::int64_t>::max())));
  if (!fast) return false;
  chunks.reserve(std::size_t(std::min<std::uint64_t>(std::uint64_t(*nchunks), stored)));
  std::vector<hsize_t> off(static_cast<std::size_t>(rank));
  for (std::int64_t c = 0; c < *nchunks; ++c) {
    std::int64_t r = c;
    for (int k = rank - 1; k >= 0; --k) {
      off[std::size_t(k)] = hsize_t((r % grid[std::size_t(k)]) * chunk[std::size_t(k)]);
      r /= grid[std::size_t(k)];
    }
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info_by_coord(ds, off.data(), &mask, &addr, &size) < 0 || addr == HADDR_UNDEF ||
        size == 0) {
      H5Eclear2(H5E_DEFAULT);
      MF_THROW("{}: dataset {} has a chunk at {} that was never written (partly written file?)", path, seg_name,
               shape_str(Shape(off.begin(), off.end())));
    }
    if (size > file_size || addr > file_size - size)
      MF_THROW("{}: file truncated: the chunk of {} at {} occupies {} bytes at offset {} but the file has {} bytes",
               path, seg_name, shape_str(Shape(off.begin(), off.end())), size, addr, file_size);
    // Distinct coordinates are distinct chunks: more than the index holds is a damaged index.
    MF_CHECK(chunks.size() < stored, "{}: dataset {}: its chunk index lists {} chunks but lookups find more "
             "(damaged file?)", path, seg_name, stored);
    chunks.push_back({addr, std::uint32_t(size), mask});  // size < 2^32: HDF5 chunks are < 4 GiB
  }
  stg.num_chunks = *nchunks;
  mode = Mode::chunked;
  return true;
}

// Resolves where the data lives, once: the fast paths (pread of contiguous
// data or of each chunk) check every address against the file's size; every
// path checks the declared size against what the file stores before anything
// is sized from the shape. Returns whether reads take a fast path.
bool Dataset::Impl::resolve_storage(DatasetInfo& info, hid_t h5file, hid_t ds, std::uint64_t file_size) {
  H5Id dcpl(MF_H5_CHECK(H5Dget_create_plist(ds), "{}: reading the storage of {}", path, seg_name), H5Pclose);
  const H5D_layout_t lay = H5Pget_layout(dcpl);
  auto& stg = info.storage;
  stg.storage_bytes = H5Dget_storage_size(ds);
  const std::uint64_t logical = std::uint64_t(info.num_segments) * info.segment_bytes();  // checked: set_segment_shape
  bool fast = H5Pget_external_count(dcpl) <= 0;
  if (lay == H5D_CONTIGUOUS) {
    stg.layout = StorageLayout::contiguous;
    const haddr_t addr = H5Dget_offset(ds);
    H5Eclear2(H5E_DEFAULT);
    if (fast) {
      if (addr == HADDR_UNDEF)
        MF_THROW("{}: dataset {} has no data in the file (its storage was never written)", path, seg_name);
      if (logical > file_size || addr > file_size - logical)
        MF_THROW("{}: file truncated: dataset {} occupies {} bytes at offset {} but the file has {} bytes", path,
                 seg_name, logical, addr, file_size);
      base = addr;
      mode = Mode::contiguous;
    }
  } else if (lay == H5D_CHUNKED) {
    stg.layout = StorageLayout::chunked;
    fast = index_chunks(info, ds, dcpl, file_size) && fast;
  } else {
    stg.layout = lay == H5D_COMPACT ? StorageLayout::compact : StorageLayout::other;
    fast = false;
  }
  // The same bound for every layout (io/h5_read.hpp): the fallback path sizes
  // nothing else before its reads.
  H5Value::dataset(h5file, seg_name, path, seg_name).checked_count(esz);
  return fast;
}

std::shared_ptr<const Dataset> Dataset::open(const std::string& path, const DatasetNames& names) {
  silence_hdf5_errors();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) MF_THROW("{}: cannot open: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) MF_THROW("{}: not a regular file (expected an HDF5 file)", path);
  const std::uint64_t file_size = std::uint64_t(st.st_size);

  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
  if (is_h5 == 0)
    MF_THROW("{}: not an HDF5 file: expected the HDF5 signature (a file written by h5py or libhdf5), found none "
             "in {} bytes", path, file_size);
  if (is_h5 < 0) MF_THROW("{}: cannot read as HDF5: {}", path, hdf5_error_stack());

  auto impl = std::make_unique<Impl>();
  impl->path = path;
  const hid_t fid = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (fid < 0) {
    const std::string stack = hdf5_error_stack();
    MF_THROW("{}: cannot open as HDF5 ({}): {}", path,
             stack.find("truncated") != std::string::npos ? "the file is truncated" : "damaged file?", stack);
  }
  H5Id file(fid, H5Fclose);

  DatasetInfo info;
  info.path = path;
  info.names = names;
  const std::string seg = dset_name(names.segments);
  impl->seg_name = seg;
  if (!path_exists(file, seg))
    MF_THROW("{}: dataset {} is missing (expected float16/float32 segments [N, n_mels, frames] or "
             "[F, L, S, n_mels, frames]); {}", path, seg, root_members(file));
  H5Id dset(MF_H5_CHECK(H5Dopen2(file, seg.c_str(), H5P_DEFAULT), "{}: opening {}", path, seg), H5Dclose);

  check_segment_type(dset, path, seg, info);
  impl->dtype = info.dtype;
  impl->esz = dtype_size(info.dtype);
  set_segment_shape(dset, path, seg, info);
  read_attributes_isolated(dset, file, path, seg, info);
  // Storage before the labels: the per-segment arrays are sized from the
  // shape, which must first be known to be what the file holds.
  const bool fast = impl->resolve_storage(info, file, dset, file_size);
  read_labels(file, path, seg, names, info);
  read_leak(file, path, names, info);

  info.storage.fast_path = fast;
  if (fast) {
    // O_NOATIME spares every pread an atime update (allowed for the file's
    // owner only: otherwise EPERM, and a plain open).
    impl->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOATIME);
    if (impl->fd < 0 && errno == EPERM) impl->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (impl->fd < 0) MF_THROW("{}: cannot open for reading: {}", path, std::strerror(errno));
  } else {
    impl->mode = Impl::Mode::hdf5;
    impl->dset = std::move(dset);
    impl->file = std::move(file);
  }
  return std::shared_ptr<const Dataset>(new Dataset(std::move(impl), std::move(info)));
}

void Dataset::read(std::span<const std::int64_t> rows, DType dt, void* dst, bool check) const {
  MF_CHECK(dt == DType::f32 || dt == DType::f16 || dt == DType::bf16,
           "Dataset::read: destination dtype must be f32, f16 or bf16, found {}", dtype_name(dt));
  for (std::int64_t r : rows)
    MF_CHECK(r >= 0 && r < info_.num_segments, "{}: segment {} out of range: expected 0..{}", info_.path, r,
             info_.num_segments - 1);
  switch (impl_->mode) {
    case Impl::Mode::contiguous: return impl_->read_contiguous(info_, rows, dt, dst, check);
    case Impl::Mode::chunked: return impl_->read_chunked(info_, rows, dt, dst, check);
    case Impl::Mode::hdf5: return impl_->read_hdf5(info_, rows, dt, dst, check);
  }
}

void Dataset::Impl::read_contiguous(const DatasetInfo& info, std::span<const std::int64_t> rows, DType dt,
                                    void* dst, bool check) const {
  const std::size_t sb = info.segment_bytes(), ob = std::size_t(info.segment_elems()) * dtype_size(dt);
  const std::int64_t elems = info.segment_elems();
  const std::size_t max_run = std::max<std::size_t>(1, (std::size_t(8) << 20) / sb);
  auto* out = static_cast<std::byte*>(dst);
  std::size_t i = 0;
  while (i < rows.size()) {
    std::size_t j = i + 1;
    while (j < rows.size() && j - i < max_run && rows[j] == rows[j - 1] + 1) ++j;
    const std::size_t n = j - i;
    const std::uint64_t off = base + std::uint64_t(rows[i]) * sb;
    std::byte* o = out + i * ob;
    const void* src = o;
    if (dt == dtype) {
      pread_full(fd, o, n * sb, off, path);
    } else {
      auto& s = scratch();
      grow(s.a, n * sb);
      pread_full(fd, s.a.data(), n * sb, off, path);
      src = s.a.data();
    }
    const std::int64_t bad = convert_floats(src, dtype, o, dt, std::int64_t(n) * elems, check);
    if (bad >= 0) throw_nonfinite(info, rows[i + std::size_t(bad / elems)], bad % elems, load_any(src, dtype, bad));
    i = j;
  }
}

namespace {
void inflate_chunk(const std::byte* src, std::size_t n, std::vector<std::byte>& out, std::size_t expect,
                   const std::string& ctx) {
  grow(out, expect);
  uLongf len = uLongf(expect);
  const int rc = ::uncompress(reinterpret_cast<Bytef*>(out.data()), &len, reinterpret_cast<const Bytef*>(src), uLong(n));
  if (rc != Z_OK || len != expect)
    MF_THROW("{}: gzip (deflate) data is corrupt: zlib says '{}' after {} of {} bytes", ctx,
             rc == Z_OK ? "short output" : zError(rc), std::size_t(len), expect);
}
void unshuffle(const std::byte* src, std::size_t n, std::size_t esz, std::vector<std::byte>& out) {
  grow(out, n);
  const std::size_t m = n / esz;
  for (std::size_t j = 0; j < esz; ++j)
    for (std::size_t i = 0; i < m; ++i) out[i * esz + j] = src[j * m + i];
  std::memcpy(out.data() + m * esz, src + m * esz, n - m * esz);  // leftover bytes stay as they are
}
}  // namespace

void Dataset::Impl::read_chunked(const DatasetInfo& info, std::span<const std::int64_t> rows, DType dt, void* dst,
                                 bool check) const {
  const int rank = int(dims.size());
  const int lead = rank - 2;
  const std::int64_t M = info.n_mels, T = info.frames, cm = chunk[std::size_t(rank - 2)],
                     ct = chunk[std::size_t(rank - 1)];
  const std::int64_t gm = grid[std::size_t(rank - 2)], gt = grid[std::size_t(rank - 1)];
  const std::size_t ob = std::size_t(M * T) * dtype_size(dt);
  // (chunk, row) pairs, grouped by chunk so each chunk is read and decoded once per call.
  struct Need {
    std::int64_t chunk;
    std::int64_t row;
  };
  std::vector<Need> need;
  need.reserve(rows.size() * std::size_t(gm * gt));
  for (std::size_t r = 0; r < rows.size(); ++r) {
    std::int64_t s = rows[r], lin = 0;
    std::int64_t coord[3] = {0, 0, 0};
    for (int k = lead - 1; k >= 0; --k) {
      coord[k] = s % dims[std::size_t(k)];
      s /= dims[std::size_t(k)];
    }
    for (int k = 0; k < lead; ++k) lin = lin * grid[std::size_t(k)] + coord[k] / chunk[std::size_t(k)];
    for (std::int64_t a = 0; a < gm; ++a)
      for (std::int64_t b = 0; b < gt; ++b) need.push_back({(lin * gm + a) * gt + b, std::int64_t(r)});
  }
  std::sort(need.begin(), need.end(), [](const Need& x, const Need& y) {
    return x.chunk != y.chunk ? x.chunk < y.chunk : x.row < y.row;
  });
  auto& s = scratch();
  auto* out = static_cast<std::byte*>(dst);
  std::size_t i = 0;
  while (i < need.size()) {
    const std::int64_t c = need[i].chunk;
    const ChunkRec& rec = chunks[std::size_t(c)];
    grow(s.a, rec.size);
    pread_full(fd, s.a.data(), rec.size, rec.addr, path);
    const std::byte* data = s.a.data();
    std::size_t len = rec.size;
    for (int f = int(filters.size()) - 1; f >= 0; --f) {
      if (rec.filter_mask & (1u << f)) continue;  // this filter was skipped for this chunk
      std::vector<std::byte>& o = (data == s.b.data()) ? s.c : s.b;
      if (filters[std::size_t(f)] == H5Z_FILTER_DEFLATE) {
        inflate_chunk(data, len, o, chunk_bytes,
                      fmt::format("{}: {} chunk {} at offset {}", path, seg_name, c, rec.addr));
        len = chunk_bytes;
      } else {
        unshuffle(data, len, esz, o);
      }
      data = o.data();
    }
    if (len != chunk_bytes)
      MF_THROW("{}: {} chunk {} at offset {} holds {} bytes after decoding, expected {}", path, seg_name, c,
               rec.addr, len, chunk_bytes);
    // Chunk origin.
    std::int64_t origin[5] = {0, 0, 0, 0, 0};
    {
      std::int64_t r = c;
      for (int k = rank - 1; k >= 0; --k) {
        origin[k] = (r % grid[std::size_t(k)]) * chunk[std::size_t(k)];
        r /= grid[std::size_t(k)];
      }
    }
    const std::int64_t m0 = origin[rank - 2], t0 = origin[rank - 1];
    const std::int64_t m1 = std::min(M, m0 + cm), t1 = std::min(T, t0 + ct);
    for (; i < need.size() && need[i].chunk == c; ++i) {
      const std::int64_t row = need[i].row, seg = rows[std::size_t(row)];
      std::int64_t sidx = seg, loc = 0;
      std::int64_t coord[3] = {0, 0, 0};
      for (int k = lead - 1; k >= 0; --k) {
        coord[k] = sidx % dims[std::size_t(k)];
        sidx /= dims[std::size_t(k)];
      }
      for (int k = 0; k < lead; ++k) loc = loc * chunk[std::size_t(k)] + (coord[k] - origin[k]);
      for (std::int64_t m = m0; m < m1; ++m) {
        const std::int64_t src_e = (loc * cm + (m - m0)) * ct;
        const std::byte* src = data + std::size_t(src_e) * esz;
        std::byte* o = out + std::size_t(row) * ob + std::size_t(m * T + t0) * dtype_size(dt);
        const std::int64_t bad = convert_floats(src, dtype, o, dt, t1 - t0, check);
        if (bad >= 0) throw_nonfinite(info, seg, m * T + t0 + bad, load_any(src, dtype, bad));
      }
    }
  }
}

void Dataset::Impl::read_hdf5(const DatasetInfo& info, std::span<const std::int64_t> rows, DType dt, void* dst,
                              bool check) const {
  // HDF5 serializes these calls with its global lock (the Debian build is thread-safe).
  const int rank = int(info.shape.size());
  const std::int64_t elems = info.segment_elems();
  const std::size_t ob = std::size_t(elems) * dtype_size(dt);
  auto& s = scratch();
  grow(s.a, std::size_t(elems) * sizeof(float));
  auto* f = reinterpret_cast<float*>(s.a.data());
  H5Id fspace(H5Dget_space(dset), H5Sclose);
  const hsize_t mdim = hsize_t(elems);
  H5Id mspace(H5Screate_simple(1, &mdim, nullptr), H5Sclose);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    std::vector<hsize_t> start(std::size_t(rank), 0), count(std::size_t(rank), 1);
    std::int64_t sidx = rows[r];
    for (int k = rank - 3; k >= 0; --k) {
      start[std::size_t(k)] = hsize_t(sidx % info.shape[std::size_t(k)]);
      sidx /= info.shape[std::size_t(k)];
    }
    count[std::size_t(rank - 2)] = hsize_t(info.n_mels);
    count[std::size_t(rank - 1)] = hsize_t(info.frames);
    MF_H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
                "{}: selecting {} of {}", path, info.where(rows[r]), seg_name);
    MF_H5_CHECK(H5Dread(dset, H5T_NATIVE_FLOAT, mspace, fspace, H5P_DEFAULT, f), "{}: reading {} of {}", path,
                info.where(rows[r]), seg_name);
    const std::int64_t bad = convert_floats(f, DType::f32, static_cast<std::byte*>(dst) + r * ob, dt, elems, check);
    if (bad >= 0) throw_nonfinite(info, rows[r], bad, f[bad]);
  }
}

void Dataset::read_all(DType dt, void* dst, bool check, int threads) const {
  const std::int64_t N = info_.num_segments;
  const std::int64_t block = std::max<std::int64_t>(1, (std::int64_t(4) << 20) / std::int64_t(info_.segment_bytes()));
  const std::int64_t nblocks = (N + block - 1) / block;
  const std::size_t ob = std::size_t(info_.segment_elems()) * dtype_size(dt);
  MF_CHECK(threads >= 0 && threads <= kMaxReadThreads, "{}: read_all: expected 0..{} threads, found {}", info_.path,
           kMaxReadThreads, threads);
  std::atomic<std::int64_t> next{0};
  // Blocks are taken from a shared counter, so a thread the system refuses
  // only means fewer workers; the first error stops the others.
  run_on_threads(std::max(1, threads), [&](int) {
    std::vector<std::int64_t> rows;
    for (;;) {
      const std::int64_t b = next.fetch_add(1);
      if (b >= nblocks) return;
      const std::int64_t r0 = b * block, r1 = std::min(N, r0 + block);
      rows.resize(std::size_t(r1 - r0));
      for (std::int64_t r = r0; r < r1; ++r) rows[std::size_t(r - r0)] = r;
      try {
        read(rows, dt, static_cast<std::byte*>(dst) + std::size_t(r0) * ob, check);
      } catch (...) {
        next.store(nblocks);
        throw;
      }
    }
  });
}

}  // namespace mf::io
