// Writing generated test audio with libsndfile, for the audio front-end's
// tests: deterministic signals (a tone, a linear chirp, white noise, silence)
// with any number of channels at any sample rate, written as WAV (16/24/32-bit
// PCM, 32-bit float), FLAC (16/24-bit) or OGG/Vorbis. Link the target
// melforge_test_audio (tests/CMakeLists.txt).
//
// The samples depend only on the spec (no global state, no std:: random
// distributions, whose algorithms differ between standard libraries), so a
// test writes the same file on every run and machine, up to the last ulp of
// libm's sin (which the 16/24-bit formats round away).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "tests/support/temp_dir.hpp"

namespace mf::testing {

enum class TestSignal {
  tone,     // sine at frequency_hz
  chirp,    // linear sweep from frequency_hz to frequency_end_hz over the file
  noise,    // white noise, uniform in [-amplitude, amplitude)
  silence,  // zeros
};

enum class AudioFileFormat { wav_pcm16, wav_pcm24, wav_pcm32, wav_float, flac16, flac24, ogg_vorbis };

// Every format above, in declaration order.
inline constexpr AudioFileFormat kAllAudioFileFormats[] = {
    AudioFileFormat::wav_pcm16, AudioFileFormat::wav_pcm24, AudioFileFormat::wav_pcm32,
    AudioFileFormat::wav_float, AudioFileFormat::flac16,    AudioFileFormat::flac24,
    AudioFileFormat::ogg_vorbis};

struct TestAudioSpec {
  TestSignal signal = TestSignal::tone;
  std::int64_t sample_rate = 16000;  // Hz
  int channels = 1;
  std::int64_t frames = 16000;       // samples per channel
  double amplitude = 0.5;            // peak; keep below 1 (integer formats clip at 1)
  double frequency_hz = 440;         // tone; chirp start
  double frequency_end_hz = 4000;    // chirp end
  std::uint64_t seed = 0;            // noise samples and every channel's phase
};

// frames x channels samples, interleaved (frame-major, as libsndfile writes).
// Channels differ, so a mono mix is not any one channel: channel c of a tone
// or chirp runs at (1 + c/4) times the frequencies with its own phase; noise
// channels are independent.
std::vector<float> generate_test_audio(const TestAudioSpec& spec);

// Writes interleaved samples (frames x channels) in `format`; throws mf::Error
// naming the path and libsndfile's reason when it cannot.
void write_audio_file(const std::filesystem::path& path, AudioFileFormat format, std::int64_t sample_rate,
                      int channels, std::span<const float> interleaved);

// generate_test_audio, then write_audio_file; returns the samples written
// (as generated: before the format's quantization or encoding).
std::vector<float> write_test_audio(const std::filesystem::path& path, AudioFileFormat format,
                                    const TestAudioSpec& spec);

const char* format_name(AudioFileFormat format);     // "wav_pcm16", ...
const char* file_extension(AudioFileFormat format);  // ".wav", ".flac", ".ogg"

// ROOT/<class>/fNN.<ext>: `per_class` files of 0.6 s per class, formats
// (WAV 16-bit, FLAC 24-bit, WAV float), rates (8, 16, 11.025 kHz) and channel
// counts mixed; class k a tone at its own frequency (every fourth file noise),
// so the features differ by class. Deterministic.
void write_class_folders(const std::filesystem::path& root, const std::vector<std::string>& classes, int per_class);

// The strings of a 1-D dataset (variable-length UTF-8, as `melforge data
// build` writes /files) of an HDF5 file.
std::vector<std::string> read_h5_strings(const std::filesystem::path& h5, const std::string& dataset);


}  // namespace mf::testing
