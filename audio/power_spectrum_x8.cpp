#include "audio/power_spectrum_x8.hpp"

#include <bit>
#include <cmath>
#include <numbers>

#include "engine/error.hpp"
#include "engine/vec8.hpp"

namespace mf::audio {

namespace {

// Complex element t of a buffer: re lanes at 16t, im lanes at 16t + 8.
constexpr std::int64_t kElem = 2 * PowerSpectrumX8::kLanes;

// e^{-2 pi i num / den} as (re, im), computed in double, rounded to float.
void unit_root(std::int64_t num, std::int64_t den, float* out) {
  const double a = 2.0 * std::numbers::pi * double(num) / double(den);
  out[0] = float(std::cos(a));
  out[1] = float(-std::sin(a));
}

// One radix-4 decimation-in-frequency Stockham pass: L points per
// sub-transform, s sub-transforms (L * s = n/2). For p < L/4 and q < s, with
// a, b, c, d = X[q + s (p + j L/4)], j = 0..3, and w = e^{-2 pi i p / L}:
//   Y[q + s (4p)]     = (a + c) + (b + d)
//   Y[q + s (4p + 1)] = ((a - c) - i (b - d)) w
//   Y[q + s (4p + 2)] = ((a + c) - (b + d)) w^2
//   Y[q + s (4p + 3)] = ((a - c) + i (b - d)) w^3
// tw: w, w^2, w^3 as (re, im) for each p.
MF_SIMD_CLONES void radix4_pass(const float* X, float* Y, std::int64_t L, std::int64_t s, const float* tw) {
  const std::int64_t m = L / 4;
  for (std::int64_t p = 0; p < m; ++p) {
    const float* w = tw + 6 * p;
    const float w1r = w[0], w1i = w[1], w2r = w[2], w2i = w[3], w3r = w[4], w3i = w[5];
    for (std::int64_t q = 0; q < s; ++q) {
      const float* a = X + kElem * (q + s * p);
      const float* b = a + kElem * s * m;
      const float* c = b + kElem * s * m;
      const float* d = c + kElem * s * m;
      const v8f ar = load8(a), ai = load8(a + 8), br = load8(b), bi = load8(b + 8);
      const v8f cr = load8(c), ci = load8(c + 8), dr = load8(d), di = load8(d + 8);
      const v8f apc_r = ar + cr, apc_i = ai + ci, amc_r = ar - cr, amc_i = ai - ci;
      const v8f bpd_r = br + dr, bpd_i = bi + di, bmd_r = br - dr, bmd_i = bi - di;
      // -i (b - d) = (bmd_i, -bmd_r)
      const v8f y1r = amc_r + bmd_i, y1i = amc_i - bmd_r;
      const v8f y2r = apc_r - bpd_r, y2i = apc_i - bpd_i;
      const v8f y3r = amc_r - bmd_i, y3i = amc_i + bmd_r;
      float* y0 = Y + kElem * (q + s * 4 * p);
      float* y1 = y0 + kElem * s;
      float* y2 = y1 + kElem * s;
      float* y3 = y2 + kElem * s;
      store8(y0, apc_r + bpd_r);
      store8(y0 + 8, apc_i + bpd_i);
      store8(y1, y1r * w1r - y1i * w1i);
      store8(y1 + 8, y1r * w1i + y1i * w1r);
      store8(y2, y2r * w2r - y2i * w2i);
      store8(y2 + 8, y2r * w2i + y2i * w2r);
      store8(y3, y3r * w3r - y3i * w3i);
      store8(y3 + 8, y3r * w3i + y3i * w3r);
    }
  }
}

// The last pass when log2(n/2) is odd: L = 2, s = n/4; Y[q] = X[q] + X[q + s],
// Y[q + s] = X[q] - X[q + s].
MF_SIMD_CLONES void radix2_pass(const float* X, float* Y, std::int64_t s) {
  for (std::int64_t q = 0; q < s; ++q) {
    const float* a = X + kElem * q;
    const float* b = a + kElem * s;
    const v8f ar = load8(a), ai = load8(a + 8), br = load8(b), bi = load8(b + 8);
    float* y0 = Y + kElem * q;
    float* y1 = y0 + kElem * s;
    store8(y0, ar + br);
    store8(y0 + 8, ai + bi);
    store8(y1, ar - br);
    store8(y1 + 8, ai - bi);
  }
}

// Z = FFT of z[t] = x[2t] + i x[2t+1] (h = n/2 points) to the power of the
// real FFT's bins k = 0..h: with C = conj(Z[(h - k) mod h]),
//   E = (Z[k] + C) / 2,  O = (Z[k] - C) / (2i),  X[k] = E + e^{-2 pi i k / n} O.
MF_SIMD_CLONES void split_power(const float* Z, std::int64_t h, const float* tw, float* power) {
  for (std::int64_t k = 0; k <= h; ++k) {
    const float* zk = Z + kElem * (k == h ? 0 : k);
    const float* zc = Z + kElem * (k == 0 ? 0 : h - k);
    const v8f zr = load8(zk), zi = load8(zk + 8), cr = load8(zc), ci = load8(zc + 8);
    const v8f er = 0.5f * (zr + cr), ei = 0.5f * (zi - ci);
    const v8f orr = 0.5f * (zi + ci), oi = 0.5f * (cr - zr);
    const float wr = tw[2 * k], wi = tw[2 * k + 1];
    const v8f xr = er + (orr * wr - oi * wi), xi = ei + (orr * wi + oi * wr);
    store8(power + PowerSpectrumX8::kLanes * k, xr * xr + xi * xi);
  }
}

}  // namespace

bool PowerSpectrumX8::supports(std::int64_t n_fft) {
  return n_fft >= 16 && n_fft <= 65536 && std::has_single_bit(std::uint64_t(n_fft));
}

PowerSpectrumX8::PowerSpectrumX8(std::int64_t n_fft) : n_(n_fft), half_(n_fft / 2) {
  MF_CHECK(supports(n_fft), "power spectrum (8 lanes): n_fft {}: expected a power of two in 16..65536", n_fft);
  for (std::int64_t L = half_; L >= 4; L /= 4) {
    for (std::int64_t p = 0; p < L / 4; ++p) {
      float w[6];
      unit_root(p, L, w);
      unit_root(2 * p, L, w + 2);
      unit_root(3 * p, L, w + 4);
      stage_twiddles_.insert(stage_twiddles_.end(), w, w + 6);
    }
  }
  split_twiddles_.resize(std::size_t(2 * (half_ + 1)));
  for (std::int64_t k = 0; k <= half_; ++k) unit_root(k, n_, &split_twiddles_[std::size_t(2 * k)]);
}

void PowerSpectrumX8::compute(float* x, float* power, float* scratch) const {
  float* from = x;
  float* to = scratch;
  const float* tw = stage_twiddles_.data();
  std::int64_t L = half_, s = 1;
  for (; L >= 4; L /= 4, s *= 4) {
    radix4_pass(from, to, L, s, tw);
    tw += 6 * (L / 4);
    std::swap(from, to);
  }
  if (L == 2) {
    radix2_pass(from, to, s);
    std::swap(from, to);
  }
  split_power(from, half_, split_twiddles_.data(), power);
}

}  // namespace mf::audio
