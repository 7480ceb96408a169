// The audio front-end's parameters: how a waveform becomes log-mel segments.
// The same numbers describe a dataset built by `melforge data build` (written
// as attributes of every output file), the features `melforge predict --audio`
// computes (copied into the checkpoint at training time) and the op itself
// (audio/logmel.hpp).
//
// The features are librosa's, exactly:
//   S = librosa.feature.melspectrogram(y=y, sr=sample_rate, n_fft=n_fft,
//         hop_length=hop_length, n_mels=n_mels, fmin=fmin, fmax=fmax,
//         center=True, pad_mode='constant', power=2.0, htk=False, norm='slaney')
//   features = 10 * log10(max(S, 1e-10))            (dB, no reference, no top_db)
// with the periodic Hann window of n_fft samples (librosa's default window).
// A file gives long_segments * short_segments segments of `frames` frames:
// segment s holds frames [s * frames, (s + 1) * frames) of its spectrogram,
// long segment l holds short segments l*S .. l*S + S - 1; later frames are not
// used.
#pragma once

#include <cstdint>
#include <string>

namespace mf::audio {

struct FrontendParams {
  std::int64_t sample_rate = 16000;  // Hz; audio is resampled to it
  std::int64_t n_fft = 1024;         // FFT size = window length (even)
  std::int64_t hop_length = 256;     // samples between frames
  std::int64_t n_mels = 64;
  double fmin = 0;                   // Hz
  double fmax = 0;                   // Hz; 0 means sample_rate / 2
  std::int64_t frames = 64;          // frames per segment
  std::int64_t long_segments = 1;    // L
  std::int64_t short_segments = 1;   // S

  double fmax_hz() const { return fmax > 0 ? fmax : double(sample_rate) / 2; }
  std::int64_t n_bins() const { return n_fft / 2 + 1; }  // rfft bins
  std::int64_t segments() const { return long_segments * short_segments; }
  std::int64_t total_frames() const { return segments() * frames; }
  // The samples of a file that its first total_frames() frames depend on
  // (center=True: frame t covers samples [t*hop - n_fft/2, t*hop + n_fft/2),
  // zeros outside the file). The op takes each file as this many samples.
  std::int64_t window_samples() const { return (total_frames() - 1) * hop_length + n_fft / 2; }
  // The shortest file (samples at sample_rate) whose spectrogram has
  // total_frames() frames: librosa gives 1 + len / hop_length frames.
  std::int64_t min_samples() const { return (total_frames() - 1) * hop_length; }

  // Throws mf::Error naming the parameter, its value and the allowed range.
  void validate() const;
  bool operator==(const FrontendParams&) const = default;
};

// The first parameter where a and b differ, as "n_fft = 256 vs 512" (fmax
// compared as fmax_hz()); empty when they describe the same features.
std::string first_difference(const FrontendParams& a, const FrontendParams& b);

}  // namespace mf::audio
