// The synthetic datasets' shared pieces (io/synth.hpp, io/synth_speakers.hpp):
// splitmix64 draws as doubles, Box-Muller normals, dB -> power, and the
// averaging of a finer mel rendering down to the requested bands. One
// generator per file, seeded from the run's seed and the file, keeps the
// bytes independent of the thread count.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

#include "engine/counter_rng.hpp"

namespace mf::io::synth_detail {

struct Rng {
  std::uint64_t s;
  explicit Rng(std::uint64_t seed) : s(seed) {}
  std::uint64_t next() { return splitmix64_next(s); }
  double uniform() { return unit_double(next()); }                        // [0, 1)
  double uniform(double a, double b) { return a + (b - a) * uniform(); }
  double open01() { return (double(next() >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
  double normal() { return std::sqrt(-2 * std::log(open01())) * std::cos(2 * std::numbers::pi * uniform()); }
  int below(int n) { return int(next() % std::uint64_t(n)); }
};

// Power of x decibels.
inline double db(double x) { return std::pow(10.0, x / 10.0); }

// Below 64 mel bands a scene is rendered at R = ceil(64 / mels) times the
// bands (1 from 64 up); `band_average` then averages each R adjacent bands in
// power (values are log10 power) into `out` [nseg, mels, frames], as a filter
// bank with R times wider bands would.
inline std::int64_t render_factor(std::int64_t mels) { return mels >= 64 ? 1 : (64 + mels - 1) / mels; }
inline void band_average(const float* hi, std::int64_t R, std::int64_t nseg, std::int64_t mels, std::int64_t frames,
                         float* out) {
  const std::int64_t HM = mels * R, T = frames;
  for (std::int64_t s = 0; s < nseg; ++s)
    for (std::int64_t m = 0; m < mels; ++m)
      for (std::int64_t t = 0; t < T; ++t) {
        double p = 0;
        for (std::int64_t k = 0; k < R; ++k) p += std::pow(10.0, double(hi[(s * HM + m * R + k) * T + t]));
        out[(s * mels + m) * T + t] = float(std::log10(p / double(R) + 1e-12));
      }
}

}  // namespace mf::io::synth_detail
