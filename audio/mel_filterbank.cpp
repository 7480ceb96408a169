// The mel filter bank (audio/mel_filterbank.hpp). Each step follows
// librosa.filters.mel (librosa 0.11) operation for operation, in float64, so
// that the float32 weights round the same way (tests/audio/test_logmel.cpp
// compares them with librosa's):
//   bin frequencies  f[k] = k * (1 / (n_fft * (1 / sr)))       (np.fft.rfftfreq)
//   mel points       mel_to_hz(linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
//   triangle         max(0, min((f[k] - p[m]) / (p[m+1] - p[m]), (p[m+2] - f[k]) / (p[m+2] - p[m+1])))
//                    stored as float32 (librosa's weights array is float32) ...
//   slaney norm      ... then multiplied in float64 by 2 / (p[m+2] - p[m]) and
//                    rounded to float32 again (numpy's in-place float32 *= float64).
#include "audio/mel_filterbank.hpp"

#include <algorithm>
#include <cmath>

#include "engine/error.hpp"

namespace mf::audio {

namespace {

// Slaney's scale: linear (200/3 Hz per mel) below 1 kHz, logarithmic above
// with 27 mels per factor 6.4 in frequency.
constexpr double kMelSpacingHz = 200.0 / 3;
constexpr double kMinLogHz = 1000.0;
constexpr double kMinLogMel = kMinLogHz / kMelSpacingHz;
double log_step() { return std::log(6.4) / 27.0; }

// np.linspace(start, stop, num) for num >= 2: start + i * ((stop - start) / (num - 1)),
// the last point exactly `stop`.
std::vector<double> linspace(double start, double stop, std::int64_t num) {
  std::vector<double> y(static_cast<std::size_t>(num));
  const double step = (stop - start) / double(num - 1);
  for (std::int64_t i = 0; i < num; ++i) y[std::size_t(i)] = double(i) * step + start;
  y.back() = stop;
  return y;
}

}  // namespace

double hz_to_mel_slaney(double hz) {
  if (hz >= kMinLogHz) return kMinLogMel + std::log(hz / kMinLogHz) / log_step();
  return hz / kMelSpacingHz;
}

double mel_to_hz_slaney(double mel) {
  if (mel >= kMinLogMel) return kMinLogHz * std::exp(log_step() * (mel - kMinLogMel));
  return kMelSpacingHz * mel;
}

MelFilterbank mel_filterbank(const FrontendParams& p) {
  p.validate();
  MelFilterbank fb;
  fb.n_mels = p.n_mels;
  fb.n_bins = p.n_bins();
  fb.weights.assign(std::size_t(fb.n_mels * fb.n_bins), 0.f);
  fb.first.assign(std::size_t(fb.n_mels), 0);
  fb.count.assign(std::size_t(fb.n_mels), 0);

  const double bin_hz = 1.0 / (double(p.n_fft) * (1.0 / double(p.sample_rate)));
  std::vector<double> mel_hz = linspace(hz_to_mel_slaney(p.fmin), hz_to_mel_slaney(p.fmax_hz()), p.n_mels + 2);
  for (double& m : mel_hz) m = mel_to_hz_slaney(m);

  for (std::int64_t m = 0; m < fb.n_mels; ++m) {
    const std::size_t i = std::size_t(m);
    const double lo = mel_hz[i], mid = mel_hz[i + 1], hi = mel_hz[i + 2];
    const double enorm = 2.0 / (hi - lo);
    float* row = &fb.weights[i * std::size_t(fb.n_bins)];
    std::int64_t first = -1, last = -1;
    for (std::int64_t k = 0; k < fb.n_bins; ++k) {
      const double f = double(k) * bin_hz;
      const double lower = -(lo - f) / (mid - lo), upper = (hi - f) / (hi - mid);
      const float tri = float(std::max(0.0, std::min(lower, upper)));
      const float w = float(double(tri) * enorm);
      if (w > 0) {  // (+0 where the triangle is 0 or -0)
        row[k] = w;
        if (first < 0) first = k;
        last = k;
      }
    }
    // A triangle is one contiguous run of bins (it may be empty when the band
    // is narrower than a bin: such a band's mel power is 0, as in librosa).
    if (first >= 0) {
      fb.first[i] = std::int32_t(first);
      fb.count[i] = std::int32_t(last - first + 1);
    }
  }
  return fb;
}

}  // namespace mf::audio
