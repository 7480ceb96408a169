// The logmel op's eight-lane FFT (audio/power_spectrum_x8.hpp) against a
// float64 DFT written here, the 8x8 register transpose it packs frames with
// (engine/vec8.hpp), and the eight-lane log against the scalar one.
//
// Tolerance: the FFT's error in a bin's magnitude, |sqrt(power) - |X||, at most
// 5e-8 * log2(n) * ||X||_2 (||X||_2^2 = n * sum x^2, Parseval): a float32
// FFT's rounding grows with the number of passes and is a fraction of the
// whole spectrum, not of the bin (tests/audio/README.md). Measured worst
// (n 16..4096, printed): 1.4e-8 * log2(n) * ||X||_2.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include <fmt/format.h>

#include "audio/log10_float.hpp"
#include "audio/power_spectrum_x8.hpp"
#include "engine/vec8.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using audio::PowerSpectrumX8;

namespace {

constexpr int kLanes = PowerSpectrumX8::kLanes;

float uniform(std::uint64_t& s) {  // splitmix64 to [-1, 1)
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return float(double(z >> 40) / double(1ull << 23) - 1.0);
}

// |DFT(x)[k]| for k in [0, n/2], in float64.
std::vector<double> dft_magnitude(const std::vector<float>& x) {
  const std::size_t n = x.size();
  std::vector<double> mag(n / 2 + 1);
  for (std::size_t k = 0; k <= n / 2; ++k) {
    double re = 0, im = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double a = 2 * std::numbers::pi * double((k * i) % n) / double(n);
      re += double(x[i]) * std::cos(a);
      im -= double(x[i]) * std::sin(a);
    }
    mag[k] = std::hypot(re, im);
  }
  return mag;
}

// Eight frames of n samples: lane 0 an impulse, 1 a constant, 2 a cosine on
// bin 3, 3 alternating signs (Nyquist), 4 zeros, 5..7 uniform noise at
// amplitudes 1, 1e-3 and 1e4.
std::vector<std::vector<float>> test_frames(std::size_t n) {
  std::vector<std::vector<float>> f(kLanes, std::vector<float>(n, 0.f));
  std::uint64_t seed = n;
  f[0][1] = 1.f;
  for (std::size_t i = 0; i < n; ++i) {
    f[1][i] = 0.25f;
    f[2][i] = float(std::cos(2 * std::numbers::pi * 3.0 * double(i) / double(n)));
    f[3][i] = i % 2 ? -1.f : 1.f;
    f[5][i] = uniform(seed);
    f[6][i] = 1e-3f * uniform(seed);
    f[7][i] = 1e4f * uniform(seed);
  }
  return f;
}

std::vector<float> interleave(const std::vector<std::vector<float>>& frames) {
  const std::size_t n = frames[0].size();
  std::vector<float> x(n * kLanes);
  for (std::size_t i = 0; i < n; ++i)
    for (int j = 0; j < kLanes; ++j) x[i * kLanes + std::size_t(j)] = frames[std::size_t(j)][i];
  return x;
}

std::vector<float> power_of(const PowerSpectrumX8& fft, std::vector<float> x) {
  std::vector<float> power(std::size_t(fft.n_fft() / 2 + 1) * kLanes, NAN), scratch(std::size_t(fft.scratch_floats()));
  fft.compute(x.data(), power.data(), scratch.data());
  return power;
}

}  // namespace

TEST_CASE("8x8 register transpose: r[i][j] becomes r[j][i]") {
  v8f r[8];
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) r[i][j] = float(10 * i + j);
  transpose8x8(r);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) CHECK(float(r[i][j]) == float(10 * j + i));  // a copy: doctest binds a reference
}

TEST_CASE("eight-lane log10 and dB equal the scalar ones bit for bit") {
  std::uint64_t seed = 7;
  for (int rep = 0; rep < 2000; ++rep) {
    v8f v;
    for (int j = 0; j < 8; ++j) {
      const float e = 40.f * uniform(seed);  // 10^-40 .. 10^40, plus specials below
      v[j] = std::pow(10.f, e);
    }
    if (rep == 0) v = v8f{0.f, 1e-10f, 1.1e-10f, 1.f, NAN, INFINITY, 1e-45f, 3.4e38f};
    const v8f l = audio::log10_float(v), d = audio::power_to_db(v);
    for (int j = 0; j < 8; ++j) {
      const float lj = audio::log10_float(v[j]), dj = audio::power_to_db(v[j]);
      const float lane_l = l[j], lane_d = d[j];  // copies: a vector element has no address in clang
      CHECK(std::memcmp(&lane_l, &lj, sizeof lj) == 0);
      CHECK(std::memcmp(&lane_d, &dj, sizeof dj) == 0);
      if (v[j] > 1e-10f && std::isfinite(v[j])) CHECK(std::fabs(lj - std::log10(double(v[j]))) <= 3e-7 * std::max(1.0, std::fabs(std::log10(double(v[j])))));
    }
    if (rep == 0) {
      CHECK(float(d[0]) == -100.f);
      CHECK(float(d[1]) == -100.f);
      CHECK(float(d[4]) == -100.f);  // NaN power: the floor, as std::max(NaN, 1e-10f) then the compare gives
    }
  }
}

TEST_CASE("eight-lane power spectrum against a float64 DFT, n = 16 .. 4096") {
  for (std::size_t n : {16u, 32u, 64u, 128u, 256u, 1024u, 4096u}) {
    CAPTURE(n);
    const PowerSpectrumX8 fft{std::int64_t(n)};
    const auto frames = test_frames(n);
    const std::vector<float> power = power_of(fft, interleave(frames));
    double worst = 0;
    for (int j = 0; j < kLanes; ++j) {
      const std::vector<double> ref = dft_magnitude(frames[std::size_t(j)]);
      double energy = 0;
      for (float v : frames[std::size_t(j)]) energy += double(v) * double(v);
      const double norm = std::sqrt(double(n) * energy), bound = 5e-8 * std::log2(double(n)) * norm;
      for (std::size_t k = 0; k <= n / 2; ++k) {
        const float p = power[k * kLanes + std::size_t(j)];
        REQUIRE(p >= 0.f);
        const double err = std::fabs(std::sqrt(double(p)) - ref[k]);
        if (norm > 0) worst = std::max(worst, err / (std::log2(double(n)) * norm));
        if (err > bound)
          FAIL_CHECK(fmt::format("lane {} bin {}: |X| {} vs DFT {} (bound {:.3g})", j, k, std::sqrt(p), ref[k], bound));
      }
    }
    // Exact cases: an impulse's power is 1 in every bin, zeros give zeros.
    for (std::size_t k = 0; k <= n / 2; ++k) {
      CHECK(power[k * kLanes + 0] == doctest::Approx(1.0).epsilon(1e-6));
      CHECK(power[k * kLanes + 4] == 0.f);
    }
    MESSAGE(fmt::format("n {}: worst |err| / (log2(n) ||X||) = {:.3g} (bound 5e-8)", n, worst));
  }
}

TEST_CASE("eight-lane power spectrum: a frame's bits do not depend on its lane or its neighbours") {
  const std::size_t n = 1024;
  const PowerSpectrumX8 fft{std::int64_t(n)};
  auto frames = test_frames(n);
  const std::vector<float> base = power_of(fft, interleave(frames));
  // Rotate the lanes and replace the others with fresh noise: lane (j + 3) % 8 now holds frame j.
  std::uint64_t seed = 99;
  std::vector<std::vector<float>> moved(kLanes, std::vector<float>(n));
  for (auto& f : moved)
    for (float& v : f) v = uniform(seed);
  const int j = 7, to = (j + 3) % kLanes;
  moved[std::size_t(to)] = frames[std::size_t(j)];
  const std::vector<float> got = power_of(fft, interleave(moved));
  for (std::size_t k = 0; k <= n / 2; ++k) {
    const float a = base[k * kLanes + std::size_t(j)], b = got[k * kLanes + std::size_t(to)];
    REQUIRE(std::memcmp(&a, &b, sizeof a) == 0);
  }
}

TEST_CASE("eight-lane power spectrum refuses sizes it does not handle") {
  CHECK(PowerSpectrumX8::supports(16));
  CHECK(PowerSpectrumX8::supports(65536));
  CHECK_FALSE(PowerSpectrumX8::supports(8));
  CHECK_FALSE(PowerSpectrumX8::supports(400));
  CHECK_FALSE(PowerSpectrumX8::supports(131072));
  CHECK(testing::error_of([] { PowerSpectrumX8{400}; }) ==
        "power spectrum (8 lanes): n_fft 400: expected a power of two in 16..65536");
}
