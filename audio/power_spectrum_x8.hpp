// The power spectrum |rfft(x)|^2 of eight real frames at once, one frame per
// SIMD lane (engine/vec8.hpp): the FFT of the logmel op's CPU variant 2
// (audio/logmel_cpu_x8.cpp). For a power-of-two n_fft in 16..65536.
//
// Layout, "lane-interleaved": sample i of frame j at x[i * 8 + j]; bin k of
// frame j at power[k * 8 + j], k in [0, n_fft / 2].
//
// Method: the n real samples as n/2 complex ones (z[t] = x[2t] + i x[2t+1]),
// a complex FFT of n/2 points (Stockham autosort: radix-4 passes, one radix-2
// pass when log2(n/2) is odd, ping-pong between the input and a scratch
// buffer, so no bit reversal), then the split that gives the real FFT's bins
// (X[k] = E[k] + W^k O[k], E and O the spectra of the even and odd samples).
// Twiddles are computed in double and rounded once to float. Every lane runs
// the same operations, so a frame's bits do not depend on its lane or on the
// other frames of its group; f32 throughout, no FMA (same bits in every clone).
#pragma once

#include <cstdint>
#include <vector>

namespace mf::audio {

class PowerSpectrumX8 {
 public:
  static constexpr int kLanes = 8;
  static bool supports(std::int64_t n_fft);  // a power of two in 16..65536

  explicit PowerSpectrumX8(std::int64_t n_fft);
  std::int64_t n_fft() const { return n_; }
  // Floats of scratch compute() needs: n_fft * 8.
  std::int64_t scratch_floats() const { return n_ * kLanes; }

  // x: [n_fft][8] frames, overwritten (it is one of the FFT's two buffers);
  // power: [n_fft/2 + 1][8]; scratch: scratch_floats() floats. No aliasing.
  void compute(float* x, float* power, float* scratch) const;

 private:
  std::int64_t n_ = 0, half_ = 0;       // real points, complex points
  std::vector<float> stage_twiddles_;   // per radix-4 pass, per p: w^p, w^2p, w^3p (re, im)
  std::vector<float> split_twiddles_;   // per k in [0, half]: cos, -sin of 2 pi k / n
};

}  // namespace mf::audio
