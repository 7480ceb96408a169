// The synthetic datasets' generator (io/synth.hpp, io/synth_speakers.hpp):
// splitmix64 draws as doubles, Box-Muller normals, and dB -> power. One
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

}  // namespace mf::io::synth_detail
