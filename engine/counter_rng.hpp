// splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
// generators", 2014; the constants of Vigna's reference code): the one
// pseudorandom source of melforge, on the CPU and the GPU. Every draw is a
// pure function of a 64-bit counter, so a value depends only on (seed, index),
// never on threads, scheduling or the device: weight initialization, the
// epoch shuffle, dropout masks and the synthetic data are reproducible
// everywhere. bench/torch_train.py mirrors these functions in Python; any
// change here changes every seeded result and breaks resume of older runs.
#pragma once

#include <cstdint>

#include "engine/host_device.hpp"

namespace mf {

// The Weyl-sequence increment (2^64 / golden ratio, odd).
inline constexpr std::uint64_t kSplitmix64Gamma = 0x9e3779b97f4a7c15ull;

// The output finalizer: a bijective avalanche of all 64 bits.
MF_HOST_DEVICE_INLINE constexpr std::uint64_t splitmix64_finalize(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The draw that follows `state` (state + gamma, finalized), without advancing it.
MF_HOST_DEVICE_INLINE constexpr std::uint64_t splitmix64_hash(std::uint64_t state) {
  return splitmix64_finalize(state + kSplitmix64Gamma);
}

// Advances `state` by one step and returns its draw: the sequential generator.
MF_HOST_DEVICE_INLINE constexpr std::uint64_t splitmix64_next(std::uint64_t& state) {
  state += kSplitmix64Gamma;
  return splitmix64_finalize(state);
}

// The top 53 bits as a double in [0, 1).
MF_HOST_DEVICE_INLINE constexpr double unit_double(std::uint64_t bits) {
  return double(bits >> 11) * 0x1.0p-53;
}

}  // namespace mf
