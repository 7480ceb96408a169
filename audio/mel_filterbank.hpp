// The mel filter bank, as librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax,
// htk=False, norm='slaney') computes it: Slaney's mel scale (linear below
// 1 kHz, logarithmic above), triangles between adjacent mel points over the
// rfft bin frequencies, each scaled by 2 / (bandwidth in Hz). Computed in
// float64, stored as float32 (librosa's default dtype).
#pragma once

#include <cstdint>
#include <vector>

#include "audio/frontend_params.hpp"

namespace mf::audio {

double hz_to_mel_slaney(double hz);
double mel_to_hz_slaney(double mel);

struct MelFilterbank {
  std::int64_t n_mels = 0, n_bins = 0;
  std::vector<float> weights;           // [n_mels, n_bins], row-major
  // Band m's nonzero weights are bins [first[m], first[m] + count[m]): the
  // ops sum only those, in increasing bin order.
  std::vector<std::int32_t> first, count;
};

MelFilterbank mel_filterbank(const FrontendParams& p);

}  // namespace mf::audio
