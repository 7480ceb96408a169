// Reading audio files: libsndfile decodes (WAV with 8/16/24/32-bit integer or
// float samples, FLAC, OGG/Vorbis, AIFF, ...), channels are averaged to mono
// (librosa.to_mono), and libsoxr resamples with the quality librosa.load uses
// by default (res_type 'soxr_hq'), so `load_mono` equals
// librosa.load(path, sr=rate, mono=True) up to float rounding.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "engine/error.hpp"

namespace mf::audio {

// A file that cannot become audio: the message names the path and the reason
// (cannot be opened, not a format libsndfile reads, no samples, a non-finite
// sample or one past 2^32 in magnitude, a read error or a truncated file).
class AudioError : public Error {
 public:
  using Error::Error;
};

struct MonoAudio {
  std::vector<float> samples;   // mono, [-1, 1] for integer formats
  std::int64_t sample_rate = 0; // of `samples`
  int channels = 0;             // of the file
  std::int64_t file_frames = 0; // frames in the file (at its own rate)
  std::string format;           // e.g. "WAV PCM 16-bit", "FLAC PCM 24-bit"
};

// Decodes `path` to mono at the file's own rate. max_frames >= 0 reads at most
// that many frames (a prefix); -1 reads the whole file. Throws AudioError.
MonoAudio decode_mono(const std::filesystem::path& path, std::int64_t max_frames = -1);

// decode_mono reading only what a caller resampling to `rate` needs: at most
// max_frames_at_rate frames when the file is already at `rate` (-1: all),
// the whole file otherwise (soxr's output near a cut depends on where the
// input ends). load_mono is this, then resample; the feature pipeline calls
// the two itself to time them apart.
MonoAudio decode_mono_for(const std::filesystem::path& path, std::int64_t rate, std::int64_t max_frames_at_rate);

// Resamples with libsoxr (SOXR_HQ, as python-soxr's 'HQ'); rates equal: a copy.
std::vector<float> resample(std::span<const float> x, double from_rate, double to_rate);

// decode_mono, then resample to `rate`. max_frames_at_rate >= 0: the caller
// needs only that many output samples; the decoder may then read less of the
// file (never changing the samples returned), and the result may be longer.
MonoAudio load_mono(const std::filesystem::path& path, std::int64_t rate, std::int64_t max_frames_at_rate = -1);

}  // namespace mf::audio
