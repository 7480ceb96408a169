// f16/bf16 <-> f32 host conversions, checked against CUDA's own host-side
// conversion functions (cuda_fp16.h / cuda_bf16.h, an implementation we did not
// write): every one of the 65,536 16-bit patterns, and for f32 -> 16-bit every
// rounding boundary (each midpoint between neighbouring 16-bit values, and the
// float on either side of it) plus a dense sweep of random f32 patterns.
#include <doctest/doctest.h>
#ifndef MELFORGE_NO_CUDA  // the CPU-only build has no CUDA headers: these two oracle cases need them
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "engine/dtype.hpp"
#include "engine/error.hpp"

using namespace mf;

namespace {
bool is_nan16(std::uint16_t b, bool bf) {
  return bf ? ((b & 0x7f80u) == 0x7f80u && (b & 0x7fu)) : ((b & 0x7c00u) == 0x7c00u && (b & 0x3ffu));
}
}  // namespace

#ifndef MELFORGE_NO_CUDA
namespace {
std::uint16_t cuda_f32_to_f16(float f) {
  __half h = __float2half_rn(f);
  std::uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
float cuda_f16_to_f32(std::uint16_t b) {
  __half_raw r;
  r.x = b;
  return __half2float(__half(r));
}
std::uint16_t cuda_f32_to_bf16(float f) {
  __nv_bfloat16 h = __float2bfloat16_rn(f);
  std::uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
float cuda_bf16_to_f32(std::uint16_t b) {
  __nv_bfloat16_raw r;
  r.x = b;
  return __bfloat162float(__nv_bfloat16(r));
}
// Same bits, or both NaN: NaN payloads and signs are not specified across
// implementations (CUDA's host conversions return a positive canonical NaN).
bool same16(std::uint16_t a, std::uint16_t b, bool bf) {
  return a == b || (is_nan16(a, bf) && is_nan16(b, bf));
}
bool same32(float a, float b) {
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b) ||
         (std::isnan(a) && std::isnan(b));
}

template <class ToF32, class RefToF32, class FromF32, class RefFromF32>
void exhaustive(bool bf, ToF32 to32, RefToF32 ref_to32, FromF32 from32, RefFromF32 ref_from32) {
  int bad_widen = 0, bad_round_trip = 0, bad_boundary = 0;
  for (std::uint32_t p = 0; p < 65536; ++p) {
    const auto b = std::uint16_t(p);
    const float f = to32(b);
    if (!same32(f, ref_to32(b))) ++bad_widen;
    if (!same16(from32(f), b, bf)) ++bad_round_trip;
    // Rounding boundaries: the midpoint to the next 16-bit value up (in
    // magnitude), and one f32 ulp either side of it.
    if (!std::isfinite(f)) continue;
    const float next = to32(std::uint16_t(b + 1));
    if (!std::isfinite(next) && !std::isinf(next)) continue;
    const double mid_d = (double(f) + double(std::isinf(next) ? (bf ? std::ldexp(1.0, 128) : 65536.0) * (f < 0 ? -1 : 1) : next)) / 2;
    const float mid = float(mid_d);
    for (float x : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, mid * 2)}) {
      if (!same16(from32(x), ref_from32(x), bf)) ++bad_boundary;
    }
  }
  CHECK(bad_widen == 0);
  CHECK(bad_round_trip == 0);
  CHECK(bad_boundary == 0);

  // A dense random sweep over all f32 patterns (NaNs, Infs and subnormals included).
  std::mt19937 rng(7);
  int bad_random = 0;
  for (int i = 0; i < 4'000'000; ++i) {
    const float x = std::bit_cast<float>(std::uint32_t(rng()));
    if (!same16(from32(x), ref_from32(x), bf)) ++bad_random;
  }
  CHECK(bad_random == 0);
}
}  // namespace

TEST_CASE("f16 conversions match CUDA's host conversions over all 65,536 patterns") {
  exhaustive(false, f16_bits_to_f32, cuda_f16_to_f32, f32_to_f16_bits, cuda_f32_to_f16);
}

TEST_CASE("bf16 conversions match CUDA's host conversions over all 65,536 patterns") {
  exhaustive(true, bf16_bits_to_f32, cuda_bf16_to_f32, f32_to_bf16_bits, cuda_f32_to_bf16);
}
#endif  // MELFORGE_NO_CUDA

TEST_CASE("f16 known values: ties to even, overflow, subnormals, signed zero, NaN") {
  CHECK(f32_to_f16_bits(1.0f) == 0x3c00);
  CHECK(f32_to_f16_bits(65504.f) == 0x7bff);
  CHECK(f32_to_f16_bits(65519.99f) == 0x7bff);
  CHECK(f32_to_f16_bits(65520.f) == 0x7c00);  // tie to even rounds up to Inf
  CHECK(f32_to_f16_bits(std::ldexp(1.f, -24)) == 0x0001);  // smallest subnormal
  CHECK(f32_to_f16_bits(std::ldexp(1.f, -25)) == 0x0000);  // tie to even: 0
  CHECK(f32_to_f16_bits(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(f32_to_f16_bits(-0.f) == 0x8000);
  CHECK(f32_to_f16_bits(1.f + std::ldexp(1.f, -11)) == 0x3c00);  // tie, even below
  CHECK(f32_to_f16_bits(1.f + 3 * std::ldexp(1.f, -11)) == 0x3c02);  // tie, even above
  CHECK(is_nan16(f32_to_f16_bits(NAN), false));
  CHECK(std::isnan(f16_bits_to_f32(0x7e00)));
  CHECK(f16_bits_to_f32(0x0001) == std::ldexp(1.f, -24));
  CHECK(bf16_bits_to_f32(f32_to_bf16_bits(3.f)) == 3.f);
  CHECK(f32_to_bf16_bits(1.f + std::ldexp(1.f, -8)) == 0x3f80);  // tie, even below
  CHECK(is_nan16(f32_to_bf16_bits(std::bit_cast<float>(0x7f800001u)), true));  // low-payload NaN stays NaN
}

TEST_CASE("parse_dtype accepts the documented spellings and rejects others") {
  CHECK(parse_dtype("bf16") == DType::bf16);
  CHECK(parse_dtype("fp16") == DType::f16);
  CHECK(parse_dtype("float32") == DType::f32);
  CHECK_THROWS_WITH_AS(parse_dtype("fp8"), doctest::Contains("expected one of f32, f16, bf16"), mf::Error);
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(dtype_size(DType::i32) == 4);
}
