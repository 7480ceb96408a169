#include "tests/audio/test_audio_files.hpp"

#include <fmt/format.h>
#include <hdf5.h>

#include <sndfile.h>
#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <numbers>

#include "engine/error.hpp"

namespace mf::testing {
namespace {

// splitmix64: a tiny generator with a fixed, portable output sequence.
struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

int sndfile_format(AudioFileFormat format) {
  switch (format) {
    case AudioFileFormat::wav_pcm16: return SF_FORMAT_WAV | SF_FORMAT_PCM_16;
    case AudioFileFormat::wav_pcm24: return SF_FORMAT_WAV | SF_FORMAT_PCM_24;
    case AudioFileFormat::wav_pcm32: return SF_FORMAT_WAV | SF_FORMAT_PCM_32;
    case AudioFileFormat::wav_float: return SF_FORMAT_WAV | SF_FORMAT_FLOAT;
    case AudioFileFormat::flac16: return SF_FORMAT_FLAC | SF_FORMAT_PCM_16;
    case AudioFileFormat::flac24: return SF_FORMAT_FLAC | SF_FORMAT_PCM_24;
    case AudioFileFormat::ogg_vorbis: return SF_FORMAT_OGG | SF_FORMAT_VORBIS;
  }
  MF_THROW("unknown AudioFileFormat {}", int(format));
}

}  // namespace

std::vector<float> generate_test_audio(const TestAudioSpec& spec) {
  MF_CHECK(spec.channels >= 1 && spec.frames >= 0 && spec.sample_rate > 0,
           "test audio: expected channels >= 1, frames >= 0, sample_rate > 0; found {}, {}, {}", spec.channels,
           spec.frames, spec.sample_rate);
  const auto channels = std::size_t(spec.channels);
  std::vector<float> out(std::size_t(spec.frames) * channels, 0.0f);
  SplitMix64 rng{spec.seed};
  std::vector<double> phase(channels);
  for (double& p : phase) p = 2 * std::numbers::pi * rng.uniform();
  const double sr = double(spec.sample_rate);
  const double duration = double(spec.frames) / sr;
  for (std::size_t c = 0; c < channels; ++c) {
    const double scale = 1.0 + 0.25 * double(c);
    const double f0 = spec.frequency_hz * scale, f1 = spec.frequency_end_hz * scale;
    for (std::int64_t t = 0; t < spec.frames; ++t) {
      const double time = double(t) / sr;
      double v = 0;
      switch (spec.signal) {
        case TestSignal::tone: v = std::sin(2 * std::numbers::pi * f0 * time + phase[c]); break;
        case TestSignal::chirp:
          v = std::sin(2 * std::numbers::pi * (f0 * time + (f1 - f0) * time * time / (2 * duration)) + phase[c]);
          break;
        case TestSignal::noise: v = 2 * rng.uniform() - 1; break;
        case TestSignal::silence: v = 0; break;
      }
      out[std::size_t(t) * channels + c] = float(spec.amplitude * v);
    }
  }
  return out;
}

void write_audio_file(const std::filesystem::path& path, AudioFileFormat format, std::int64_t sample_rate,
                      int channels, std::span<const float> interleaved) {
  MF_CHECK(channels >= 1 && interleaved.size() % std::size_t(channels) == 0,
           "{}: {} samples are not whole frames of {} channels", path.string(), interleaved.size(), channels);
  SF_INFO info{};
  info.samplerate = int(sample_rate);
  info.channels = channels;
  info.format = sndfile_format(format);
  MF_CHECK(sf_format_check(&info), "{}: libsndfile cannot write {} at {} Hz with {} channels", path.string(),
           format_name(format), sample_rate, channels);
  SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
  MF_CHECK(f != nullptr, "cannot create {}: {}", path.string(), sf_strerror(nullptr));
  sf_command(f, SFC_SET_CLIPPING, nullptr, SF_TRUE);  // out-of-range floats clip instead of wrapping
  const auto frames = sf_count_t(interleaved.size() / std::size_t(channels));
  const sf_count_t written = frames > 0 ? sf_writef_float(f, interleaved.data(), frames) : 0;
  const std::string write_error = sf_strerror(f);
  const int close_rc = sf_close(f);
  MF_CHECK(written == frames, "{}: wrote {} of {} frames: {}", path.string(), written, frames, write_error);
  MF_CHECK(close_rc == 0, "{}: closing failed: {}", path.string(), sf_error_number(close_rc));
}

std::vector<float> write_test_audio(const std::filesystem::path& path, AudioFileFormat format,
                                    const TestAudioSpec& spec) {
  std::vector<float> samples = generate_test_audio(spec);
  write_audio_file(path, format, spec.sample_rate, spec.channels, samples);
  return samples;
}

const char* format_name(AudioFileFormat format) {
  switch (format) {
    case AudioFileFormat::wav_pcm16: return "wav_pcm16";
    case AudioFileFormat::wav_pcm24: return "wav_pcm24";
    case AudioFileFormat::wav_pcm32: return "wav_pcm32";
    case AudioFileFormat::wav_float: return "wav_float";
    case AudioFileFormat::flac16: return "flac16";
    case AudioFileFormat::flac24: return "flac24";
    case AudioFileFormat::ogg_vorbis: return "ogg_vorbis";
  }
  return "?";
}

const char* file_extension(AudioFileFormat format) {
  switch (format) {
    case AudioFileFormat::flac16:
    case AudioFileFormat::flac24: return ".flac";
    case AudioFileFormat::ogg_vorbis: return ".ogg";
    default: return ".wav";
  }
}

std::vector<std::string> read_h5_strings(const std::filesystem::path& h5, const std::string& dataset) {
  const hid_t f = H5Fopen(h5.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  MF_CHECK(f >= 0, "{}: cannot open", h5.string());
  const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  const hid_t sp = d >= 0 ? H5Dget_space(d) : -1;
  hsize_t n = 0;
  if (sp >= 0) H5Sget_simple_extent_dims(sp, &n, nullptr);
  std::vector<char*> p(n, nullptr);
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  const bool ok = d >= 0 && H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, p.data()) >= 0;
  std::vector<std::string> out;
  if (ok) {
    for (char* c : p) out.emplace_back(c ? c : "");
    H5Dvlen_reclaim(t, sp, H5P_DEFAULT, p.data());
  }
  H5Tclose(t);
  if (sp >= 0) H5Sclose(sp);
  if (d >= 0) H5Dclose(d);
  H5Fclose(f);
  MF_CHECK(ok, "{}: cannot read /{} as strings", h5.string(), dataset);
  return out;
}

void write_class_folders(const std::filesystem::path& root, const std::vector<std::string>& classes, int per_class) {
  const AudioFileFormat formats[] = {AudioFileFormat::wav_pcm16, AudioFileFormat::flac24, AudioFileFormat::wav_float};
  const std::int64_t rates[] = {8000, 16000, 11025};
  for (std::size_t c = 0; c < classes.size(); ++c) {
    std::filesystem::create_directories(root / classes[c]);
    for (int i = 0; i < per_class; ++i) {
      const auto f = formats[std::size_t(i) % 3];
      TestAudioSpec s;
      s.signal = i % 4 == 3 ? TestSignal::noise : TestSignal::tone;
      s.sample_rate = rates[std::size_t(i) % 3];
      s.frames = s.sample_rate * 6 / 10;  // 0.6 s
      s.channels = 1 + i % 2;
      s.frequency_hz = 300 + 700 * double(c) + 13 * i;
      s.seed = std::uint64_t(c * 100 + std::size_t(i));
      write_test_audio(root / classes[c] / fmt::format("f{:02d}{}", i, file_extension(f)), f, s);
    }
  }
}

}  // namespace mf::testing
