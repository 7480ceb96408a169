// Shared by the logmel op's suites (test_logmel.cpp, test_logmel_gpu.cpp):
// a front-end from its numbers, and its description for messages.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "audio/frontend_params.hpp"

namespace mf::testing::logmel {

inline audio::FrontendParams params(std::int64_t sr, std::int64_t n_fft, std::int64_t hop, std::int64_t n_mels,
                                    double fmin, double fmax, std::int64_t frames = 1, std::int64_t n_long = 1,
                                    std::int64_t n_short = 1) {
  audio::FrontendParams p;
  p.sample_rate = sr;
  p.n_fft = n_fft;
  p.hop_length = hop;
  p.n_mels = n_mels;
  p.fmin = fmin;
  p.fmax = fmax;
  p.frames = frames;
  p.long_segments = n_long;
  p.short_segments = n_short;
  return p;
}

inline std::string describe(const audio::FrontendParams& p) {
  return fmt::format("sr {} n_fft {} hop {} n_mels {} fmin {} fmax {} frames {} L {} S {}", p.sample_rate, p.n_fft,
                     p.hop_length, p.n_mels, p.fmin, p.fmax_hz(), p.frames, p.long_segments, p.short_segments);
}

}  // namespace mf::testing::logmel
