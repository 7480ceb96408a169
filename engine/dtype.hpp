// Element types and host-side float conversions.
//
// f16 and bf16 are stored as their raw 16-bit patterns on the host (layout-
// compatible with CUDA's __half and __nv_bfloat16). Conversions from f32 round
// to nearest, ties to even, keep Inf, keep NaN a NaN (quiet, sign kept), and
// produce/consume subnormals exactly.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mf {

enum class DType : std::uint8_t { f32, f16, bf16, i32, u8 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::u8: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::u8: return "u8";
  }
  return "?";
}

constexpr bool dtype_is_float(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

// Parses "f32"/"fp32"/"float32", "f16"/"fp16"/"float16"/"half", "bf16"/"bfloat16",
// "i32"/"int32", "u8"/"uint8". Throws mf::Error naming the accepted spellings.
DType parse_dtype(std::string_view name);

// ---- bit-exact host conversions --------------------------------------------

constexpr float f16_bits_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0x1f) {  // Inf / NaN (payload kept, quiet bit set by the shift)
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {  // normal
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {  // zero
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | (std::uint32_t(112 - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

constexpr std::uint16_t f32_to_f16_bits(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = std::uint16_t((x >> 16) & 0x8000u);
  const std::uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u)  // NaN: keep the top payload bits, force quiet
    return std::uint16_t(sign | 0x7e00u | ((absx >> 13) & 0x3ffu));
  if (absx >= 0x477ff000u)  // rounds to >= 65520 -> Inf (also Inf itself)
    return std::uint16_t(sign | 0x7c00u);
  if (absx < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    if (absx < 0x33000000u) return sign;  // < 2^-25 rounds to zero (2^-25 ties to even = 0)
    const std::uint32_t e = absx >> 23;              // 102..112
    const std::uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - e;            // 14..24
    std::uint32_t r = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return std::uint16_t(sign | r);
  }
  // Normal: rebias the exponent and round the mantissa to 10 bits (RNE).
  std::uint32_t r = absx - 0x38000000u;  // exponent 127 -> 15 bias
  r = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
  return std::uint16_t(sign | r);
}

constexpr float bf16_bits_to_f32(std::uint16_t b) {
  return std::bit_cast<float>(std::uint32_t(b) << 16);
}

constexpr std::uint16_t f32_to_bf16_bits(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u)  // NaN: keep sign and top payload, force quiet
    return std::uint16_t((x >> 16) | 0x0040u);
  return std::uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Host storage types for 16-bit floats (trivially copyable, 2 bytes).
struct f16 {
  std::uint16_t bits = 0;
  f16() = default;
  constexpr explicit f16(float v) : bits(f32_to_f16_bits(v)) {}
  static constexpr f16 from_bits(std::uint16_t b) { f16 h; h.bits = b; return h; }
  constexpr explicit operator float() const { return f16_bits_to_f32(bits); }
};

struct bf16 {
  std::uint16_t bits = 0;
  bf16() = default;
  constexpr explicit bf16(float v) : bits(f32_to_bf16_bits(v)) {}
  static constexpr bf16 from_bits(std::uint16_t b) { bf16 h; h.bits = b; return h; }
  constexpr explicit operator float() const { return bf16_bits_to_f32(bits); }
};

static_assert(sizeof(f16) == 2 && sizeof(bf16) == 2);

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<f16> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<bf16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<std::uint8_t> { static constexpr DType value = DType::u8; };
template <class T> inline constexpr DType dtype_of_v = dtype_of<T>::value;

// Generic host load/store through f32, for twins templated on the storage type.
template <class T> constexpr float to_f32(T v) { return static_cast<float>(v); }
template <class T> constexpr T from_f32(float v) { return static_cast<T>(v); }

}  // namespace mf
