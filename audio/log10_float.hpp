// log10 of a normal float x > 0 within ~2 ulp, as a branch-free series that
// vectorizes: the logmel ops' last step (librosa's log is numpy's float32
// log10; libm's log10 in double cost 13% of a dataset build's CPU time).
//
// x = 2^e * m with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(s) = 2 (s + s^3/3
// + ... + s^11/11) with s = (m - 1) / (m + 1), |s| <= 0.172 (the next term is
// below 2^-27). One template serves a float and eight lanes (engine/vec8.hpp),
// so both perform the same operations: lane j of log10_float(v) equals
// log10_float(v[j]) bit for bit.
#pragma once

#include <bit>
#include <cstdint>

#include "engine/vec8.hpp"

namespace mf::audio {

namespace detail {
inline float to_float(std::int32_t e) { return float(e); }
inline v8f to_float(v8i e) { return __builtin_convertvector(e, v8f); }

template <class F, class I, class U>
inline F log10_series(F x) {
  U bits = std::bit_cast<U>(x);
  // Exponent relative to sqrt(1/2): subtracting 0x3f3504f3 puts m in [sqrt(1/2), sqrt(2)).
  const I e = std::bit_cast<I>(U(bits - 0x3f3504f3u)) >> 23;
  bits -= std::bit_cast<U>(e) << 23;
  const F m = std::bit_cast<F>(bits), s = (m - 1.f) / (m + 1.f), s2 = s * s;
  const F series = s * (2.f + s2 * (2.f / 3 + s2 * (2.f / 5 + s2 * (2.f / 7 + s2 * (2.f / 9 + s2 * (2.f / 11))))));
  return (to_float(e) * 0.693147180559945f + series) * 0.434294481903252f;
}
}  // namespace detail

inline float log10_float(float x) { return detail::log10_series<float, std::int32_t, std::uint32_t>(x); }
inline v8f log10_float(v8f x) { return detail::log10_series<v8f, v8i, v8u>(x); }

// The features' dB: 10 * log10(max(power, 1e-10)), exactly -100 at the floor.
inline float power_to_db(float power) { return power > 1e-10f ? 10.f * log10_float(power) : -100.f; }
inline v8f power_to_db(v8f power) {
  const v8f floor = splat8(1e-10f);
  const v8f db = 10.f * log10_float(power > floor ? power : floor);
  return power > floor ? db : splat8(-100.f);
}

}  // namespace mf::audio
