// audio/decode: decode_mono, resample and load_mono against librosa.load and
// librosa.resample (tests/oracle/librosa_load.py) on generated files of every
// format the front-end is tested with, and every way a file can be refused.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "audio/decode.hpp"
#include "tests/audio/test_audio_files.hpp"
#include "tests/support/testing.hpp"

namespace fs = std::filesystem;
using mf::audio::AudioError;
using mf::testing::AudioFileFormat;
using mf::testing::TestAudioSpec;
using mf::testing::TestSignal;

namespace {

// Tolerances against librosa, absolute, for signals peaking at 0.8-0.9
// (a float32 ulp there is 6e-8):
// - Decoding PCM, float and FLAC is bit-exact: the same libsndfile integer to
//   float conversion (Debian's 1.2.0 here, soundfile's bundled 1.2.2 there),
//   and the mono mix repeats numpy's float32 summation order.
// - Vorbis decoding is floating point (libvorbis' inverse MDCT), and soundfile
//   bundles its own libvorbis build: measured up to 3.6e-7 apart (about 6 ulp).
// - Resampling: python-soxr 1.1.0 bundles libsoxr 0.1.3-14-ga66f3ee, melforge
//   links the system's (Debian: 0.1.3); measured bit-equal, but another build
//   may round its FFTs differently. 1e-6 still tells any other soxr quality
//   apart (VHQ and MQ differ from HQ by 8e-3 or more on these signals), as
//   well as a wrong length, delay or ratio.
constexpr double kVorbisTol = 2e-6;
constexpr double kResampleTol = 1e-6;

std::vector<float> read_f32(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "oracle output missing: ", p.string());
  in.seekg(0, std::ios::end);
  const auto bytes = std::size_t(in.tellg());
  in.seekg(0);
  std::vector<float> v(bytes / sizeof(float));
  in.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  return v;
}

void write_f32(const fs::path& p, const std::vector<float>& v) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  REQUIRE(out.good());
}

// The message of the AudioError f throws; fails the test on any other outcome.
template <class F>
std::string audio_error_of(F&& f) {
  try {
    f();
  } catch (const AudioError& e) {
    return e.message();
  } catch (const std::exception& e) {
    FAIL("expected mf::audio::AudioError, got another exception: ", e.what());
  }
  FAIL("expected mf::audio::AudioError, got no error");
  return {};
}

struct Mismatch {
  std::size_t count = 0;     // samples that differ
  double max_abs = 0;        // largest |a - b|
  std::size_t first = 0;     // first differing index
};

Mismatch compare(const std::vector<float>& a, const std::vector<float>& b) {
  Mismatch m;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] == b[i]) continue;
    if (m.count++ == 0) m.first = i;
    m.max_abs = std::max(m.max_abs, std::abs(double(a[i]) - double(b[i])));
  }
  return m;
}

struct FileCase {
  AudioFileFormat format;
  int channels;
  std::int64_t rate;
  TestSignal signal;
  std::int64_t target;  // a second rate to load at (the first is the file's own)
};

std::vector<FileCase> file_cases() {
  const std::int64_t rates[] = {8000, 16000, 22050, 44100, 48000};
  const TestSignal signals[] = {TestSignal::chirp, TestSignal::noise, TestSignal::tone};
  std::vector<FileCase> cases;
  int k = 0;
  for (AudioFileFormat f : mf::testing::kAllAudioFileFormats)
    for (int ch : {1, 2}) {
      const std::int64_t rate = rates[k % 5];
      cases.push_back({f, ch, rate, signals[k % 3], rate == 16000 ? 22050 : 16000});
      ++k;
    }
  // More channels: numpy's mean sums 8 or more channels pairwise.
  cases.push_back({AudioFileFormat::wav_float, 3, 22050, TestSignal::noise, 44100});
  cases.push_back({AudioFileFormat::wav_pcm24, 9, 16000, TestSignal::chirp, 8000});
  cases.push_back({AudioFileFormat::wav_float, 17, 8000, TestSignal::noise, 16000});
  cases.push_back({AudioFileFormat::flac16, 1, 48000, TestSignal::silence, 16000});
  return cases;
}

}  // namespace

TEST_SUITE("test_audio_decode") {

TEST_CASE("decode, resample and load_mono equal librosa.load and librosa.resample") {
  mf::testing::TempDir dir("mf_audio_decode");
  std::ofstream manifest(dir.path() / "manifest.tsv");

  // Files: each loaded at its own rate (no resampling) and at another.
  const std::vector<FileCase> cases = file_cases();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const FileCase& c = cases[i];
    TestAudioSpec spec;
    spec.signal = c.signal;
    spec.sample_rate = c.rate;
    spec.channels = c.channels;
    spec.frames = c.rate * 3 / 4 + 37;  // not a round number of anything
    spec.amplitude = 0.8;
    spec.frequency_hz = 300;
    spec.frequency_end_hz = double(c.rate) * 0.45;
    spec.seed = i;
    const fs::path audio = dir.path() / fmt::format("f{}{}", i, mf::testing::file_extension(c.format));
    mf::testing::write_test_audio(audio, c.format, spec);
    for (std::int64_t sr : {c.rate, c.target})
      manifest << "load\t" << audio.string() << '\t' << sr << '\t' << (dir.path() / fmt::format("f{}_{}.f32", i, sr)).string()
               << '\n';
  }

  // resample() alone: lengths from 1 sample up, integer and non-integer ratios.
  const std::pair<double, double> pairs[] = {{44100, 16000}, {8000, 22050}, {48000, 44100},
                                             {16000, 8000},  {22050, 16000}, {11025.5, 16000}};
  const std::size_t lengths[] = {1, 2, 7, 100, 1001, 48000};
  for (std::size_t n : lengths) {
    write_f32(dir.path() / fmt::format("x{}.f32", n), mf::testing::random_floats(n, n, -0.9f, 0.9f));
    for (std::size_t p = 0; p < std::size(pairs); ++p)
      manifest << "resample\t" << (dir.path() / fmt::format("x{}.f32", n)).string() << '\t' << pairs[p].first << '\t'
               << pairs[p].second << '\t' << (dir.path() / fmt::format("r{}_{}.f32", n, p)).string() << '\n';
  }
  manifest.close();
  REQUIRE(mf::testing::run_audio_oracle("librosa_load.py", (dir.path() / "manifest.tsv").string()) == 0);

  double worst_exact = 0, worst_file = 0, worst_vorbis = 0, worst_resample = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const FileCase& c = cases[i];
    const fs::path audio = dir.path() / fmt::format("f{}{}", i, mf::testing::file_extension(c.format));
    for (std::int64_t sr : {c.rate, c.target}) {
      INFO(fmt::format("{}: {}, {} channels, {} Hz -> {} Hz", audio.filename().string(),
                       mf::testing::format_name(c.format), c.channels, c.rate, sr));
      const std::vector<float> want = read_f32(dir.path() / fmt::format("f{}_{}.f32", i, sr));
      const mf::audio::MonoAudio got = mf::audio::load_mono(audio, sr);
      CHECK(got.sample_rate == sr);
      CHECK(got.channels == c.channels);
      CHECK(got.file_frames == c.rate * 3 / 4 + 37);
      REQUIRE(got.samples.size() == want.size());
      const Mismatch m = compare(got.samples, want);
      const bool vorbis = c.format == AudioFileFormat::ogg_vorbis;
      const double tol = (vorbis ? kVorbisTol : 0.0) + (sr == c.rate ? 0.0 : kResampleTol);
      double& worst = vorbis ? worst_vorbis : sr == c.rate ? worst_exact : worst_file;
      worst = std::max(worst, m.max_abs);
      if (tol == 0) {
        // No resampling: the same libsndfile decode and numpy's float32 mean, bit for bit.
        CHECK_MESSAGE(m.count == 0, m.count, " samples differ, first at ", m.first, ", max |diff| ", m.max_abs);
      } else {
        CHECK_MESSAGE(m.max_abs <= tol, "max |diff| ", m.max_abs, " (", m.count, " samples differ), allowed ", tol);
      }
    }
  }
  for (std::size_t n : lengths) {
    const std::vector<float> x = read_f32(dir.path() / fmt::format("x{}.f32", n));
    for (std::size_t p = 0; p < std::size(pairs); ++p) {
      INFO(fmt::format("resample {} samples {} Hz -> {} Hz", n, pairs[p].first, pairs[p].second));
      const std::vector<float> want = read_f32(dir.path() / fmt::format("r{}_{}.f32", n, p));
      const std::vector<float> got = mf::audio::resample(x, pairs[p].first, pairs[p].second);
      REQUIRE(got.size() == want.size());
      CHECK(want.size() == std::size_t(std::ceil(double(n) * (pairs[p].second / pairs[p].first))));
      const Mismatch m = compare(got, want);
      worst_resample = std::max(worst_resample, m.max_abs);
      CHECK_MESSAGE(m.max_abs <= kResampleTol, "max |diff| ", m.max_abs, " (", m.count, " samples differ)");
    }
  }
  MESSAGE(fmt::format("largest |melforge - librosa|: files at their rate {:.3g}, resampled {:.3g}, Vorbis {:.3g}; "
                      "resample() {:.3g}",
                      worst_exact, worst_file, worst_vorbis, worst_resample));
}

TEST_CASE("resample: equal rates copy, lengths are ceil(n * to / from), bad rates are refused") {
  const std::vector<float> x = mf::testing::random_floats(1000, 7);
  CHECK(mf::audio::resample(x, 16000, 16000) == x);
  CHECK(mf::audio::resample({}, 44100, 16000).empty());
  CHECK(mf::audio::resample(x, 44100, 16000).size() == 363);   // 362.8...
  CHECK(mf::audio::resample(x, 8000, 22050).size() == 2757);   // 2756.25: soxr gives 2756, then a zero
  CHECK(mf::audio::resample(x, 8000, 22050).back() == 0.0f);
  CHECK(mf::testing::error_of([&] { mf::audio::resample(x, 0, 16000); })
            .find("expected positive sample rates, found 0 Hz -> 16000 Hz") != std::string::npos);
  CHECK(mf::testing::error_of([&] { mf::audio::resample(x, 16000, NAN); }).find("positive sample rates") !=
        std::string::npos);
}

TEST_CASE("decode_mono: format, prefix reads, load_mono's prefix at the file's rate") {
  mf::testing::TempDir dir("mf_audio_prefix");
  TestAudioSpec spec;
  spec.signal = TestSignal::chirp;
  spec.sample_rate = 22050;
  spec.channels = 2;
  spec.frames = 30000;
  const std::pair<AudioFileFormat, const char*> formats[] = {
      {AudioFileFormat::wav_pcm16, "WAV PCM 16-bit"}, {AudioFileFormat::wav_pcm24, "WAV PCM 24-bit"},
      {AudioFileFormat::wav_pcm32, "WAV PCM 32-bit"}, {AudioFileFormat::wav_float, "WAV float 32-bit"},
      {AudioFileFormat::flac16, "FLAC PCM 16-bit"},   {AudioFileFormat::flac24, "FLAC PCM 24-bit"},
      {AudioFileFormat::ogg_vorbis, "OGG Vorbis"}};
  for (const auto& [format, name] : formats) {
    INFO(name);
    const fs::path p = dir.path() / (std::string("a") + mf::testing::file_extension(format));
    mf::testing::write_test_audio(p, format, spec);
    const mf::audio::MonoAudio whole = mf::audio::decode_mono(p);
    CHECK(whole.format == name);
    CHECK(whole.sample_rate == 22050);
    CHECK(whole.channels == 2);
    CHECK(whole.file_frames == 30000);
    REQUIRE(whole.samples.size() == 30000);
    const mf::audio::MonoAudio prefix = mf::audio::decode_mono(p, 1234);
    CHECK(prefix.file_frames == 30000);
    CHECK(prefix.samples == std::vector<float>(whole.samples.begin(), whole.samples.begin() + 1234));
    CHECK(mf::audio::decode_mono(p, 0).samples.empty());
    CHECK(mf::audio::decode_mono(p, 99999).samples == whole.samples);  // a limit past the end: the whole file
    // load_mono: at the file's rate a limit may cut the read; resampling reads it all.
    CHECK(mf::audio::load_mono(p, 22050, 1234).samples == prefix.samples);
    CHECK(mf::audio::load_mono(p, 16000, 100).samples == mf::audio::load_mono(p, 16000).samples);
    CHECK(mf::audio::load_mono(p, 16000).samples == mf::audio::resample(whole.samples, 22050, 16000));
  }
  // Stereo mixes to the float32 mean of the channels (one channel alone is not the mix).
  const fs::path p = dir.path() / "mix.wav";
  const std::vector<float> written = mf::testing::write_test_audio(p, AudioFileFormat::wav_float, spec);
  const std::vector<float> mono = mf::audio::decode_mono(p).samples;
  for (std::size_t t = 0; t < mono.size(); ++t) REQUIRE(mono[t] == (written[2 * t] + written[2 * t + 1]) / 2.0f);
  CHECK(mono[100] != written[200]);
}

TEST_CASE("decode_mono refuses what is not audio, with the path and the reason") {
  mf::testing::TempDir dir("mf_audio_errors");
  TestAudioSpec spec;
  spec.frames = 10000;
  spec.channels = 2;

  const fs::path missing = dir.path() / "missing.wav";
  std::string e = audio_error_of([&] { mf::audio::decode_mono(missing); });
  CHECK_MESSAGE(e.find(missing.string()) != std::string::npos, e);
  CHECK_MESSAGE(e.find("cannot open: ") != std::string::npos, e);
  CHECK_MESSAGE(e.find("No such file or directory") != std::string::npos, e);

  const fs::path text = dir.path() / "notes.wav";
  std::ofstream(text) << "these are not the samples you are looking for\n";
  e = audio_error_of([&] { mf::audio::decode_mono(text); });
  CHECK_MESSAGE(e.find(text.string()) != std::string::npos, e);
  CHECK_MESSAGE(e.find("not an audio format libsndfile reads") != std::string::npos, e);

  const fs::path empty = dir.path() / "empty.wav";  // a header and no data
  mf::testing::write_audio_file(empty, AudioFileFormat::wav_pcm16, 16000, 1, {});
  REQUIRE(fs::file_size(empty) > 0);
  e = audio_error_of([&] { mf::audio::decode_mono(empty); });
  CHECK_MESSAGE(e == "audio file " + empty.string() + ": no samples: expected at least 1 frame, found 0", e);

  // A NaN at frame 1234 of channel 1: refused with its place, by load_mono too;
  // a prefix read that stops before it returns the samples read.
  const fs::path nan = dir.path() / "nan.wav";
  std::vector<float> x = mf::testing::generate_test_audio(spec);
  x[2 * 1234 + 1] = std::numeric_limits<float>::quiet_NaN();
  mf::testing::write_audio_file(nan, AudioFileFormat::wav_float, 16000, 2, x);
  e = audio_error_of([&] { mf::audio::decode_mono(nan); });
  CHECK_MESSAGE(e == "audio file " + nan.string() + ": a non-finite sample (nan) at frame 1234, channel 1", e);
  CHECK(audio_error_of([&] { mf::audio::load_mono(nan, 8000); }) == e);
  CHECK(mf::audio::decode_mono(nan, 1234).samples.size() == 1234);
  x[2 * 1234 + 1] = -std::numeric_limits<float>::infinity();
  mf::testing::write_audio_file(nan, AudioFileFormat::wav_float, 16000, 2, x);
  CHECK(audio_error_of([&] { mf::audio::decode_mono(nan); }).find("(-inf) at frame 1234, channel 1") !=
        std::string::npos);

  // A WAV cut in the middle of its data: libsndfile (and soundfile, so
  // librosa.load) would return the frames present; decode_mono refuses it.
  for (AudioFileFormat f : {AudioFileFormat::wav_pcm16, AudioFileFormat::wav_pcm24, AudioFileFormat::wav_float}) {
    const fs::path cut = dir.path() / fmt::format("cut_{}.wav", mf::testing::format_name(f));
    mf::testing::write_test_audio(cut, f, spec);
    fs::resize_file(cut, fs::file_size(cut) / 2 + 1);  // an odd size: a partial frame at the end too
    e = audio_error_of([&] { mf::audio::decode_mono(cut); });
    INFO(e);
    CHECK(e.find(cut.string()) != std::string::npos);
    CHECK(e.find("truncated: its WAV header declares 10000 frames") != std::string::npos);
    CHECK(audio_error_of([&] { mf::audio::decode_mono(cut, 10); }) == e);  // checked before any read
  }

  // A FLAC cut short: the header's frame count is more than the decoder delivers.
  for (AudioFileFormat f : {AudioFileFormat::flac16, AudioFileFormat::flac24}) {
    const fs::path cut = dir.path() / fmt::format("cut_{}.flac", mf::testing::format_name(f));
    spec.signal = TestSignal::noise;  // incompressible: the cut lands well inside the frames
    mf::testing::write_test_audio(cut, f, spec);
    fs::resize_file(cut, fs::file_size(cut) / 2);
    e = audio_error_of([&] { mf::audio::decode_mono(cut); });
    INFO(e);
    CHECK(e.find(cut.string()) != std::string::npos);
    CHECK(e.find("truncated or unreadable: read ") != std::string::npos);
    CHECK(e.find(" of the 10000 frames its header declares") != std::string::npos);
  }

  CHECK(mf::testing::error_of([&] { mf::audio::load_mono(missing, 0); })
            .find("expected a positive sample rate, found 0") != std::string::npos);
}

// Found by fuzz/fuzz_audio_decode (tests/fuzz_regressions/audio_decode/).
TEST_CASE("decode_mono sizes nothing from a header's frame count, and refuses samples past 2^32") {
  mf::testing::TempDir dir("mf_audio_fuzzed");
  // A FLAC of 1000 frames whose STREAMINFO declares 2^36 - 1 (the field's
  // largest): read_mono used to allocate the declared count up front (256 GiB,
  // std::bad_alloc escaped); now it reads what is there and reports the cut.
  TestAudioSpec spec;
  spec.frames = 1000;
  const fs::path flac = dir.path() / "huge.flac";
  mf::testing::write_test_audio(flac, AudioFileFormat::flac16, spec);
  std::fstream f(flac, std::ios::in | std::ios::out | std::ios::binary);
  char head[26];
  REQUIRE(f.read(head, sizeof head).good());
  REQUIRE(std::string(head, 4) == "fLaC");
  REQUIRE((head[4] & 0x7F) == 0);  // STREAMINFO, its 34 bytes from offset 8
  // The 36-bit total-samples field: block byte 13's low nibble (0 here: 1000 < 2^32), then bytes 14-17.
  REQUIRE((std::uint8_t(head[21]) & 0x0F) == 0);
  head[21] = char(std::uint8_t(head[21]) | 0x0F);
  for (int i = 22; i < 26; ++i) head[i] = char(0xFF);
  f.seekp(0);
  REQUIRE(f.write(head, sizeof head).good());
  f.close();
  std::string e = audio_error_of([&] { mf::audio::decode_mono(flac); });
  CHECK_MESSAGE(e.find("truncated or unreadable: read 1000 of the 68719476735 frames its header declares") !=
                    std::string::npos,
                e);
  CHECK(mf::audio::decode_mono(flac, 500).samples.size() == 500);  // a prefix within the frames present reads

  // Float samples past 2^32 in magnitude: a file of finite samples at 1.9e38
  // resampled to inf (soxr rings past the peak), and two channels at 3e38 mixed
  // to inf (numpy's mean too); the logmel op's float32 power would overflow
  // as well. Refused with the place; 2^32 itself (integer-scaled float files
  // go up to 2^31) is accepted.
  const fs::path big = dir.path() / "big.wav";
  std::vector<float> x(2 * 100, 0.25f);
  x[2 * 42] = 4294967296.0f;
  x[2 * 43 + 1] = -4294967296.0f;
  mf::testing::write_audio_file(big, AudioFileFormat::wav_float, 16000, 2, x);
  CHECK(mf::audio::decode_mono(big).samples[42] == 4294967296.0f / 2 + 0.125f);
  x[2 * 50 + 1] = std::nextafter(-4294967296.0f, -INFINITY);
  mf::testing::write_audio_file(big, AudioFileFormat::wav_float, 16000, 2, x);
  e = audio_error_of([&] { mf::audio::decode_mono(big); });
  CHECK_MESSAGE(e == "audio file " + big.string() +
                         ": a sample of -4294968000 at frame 50, channel 1: expected audio, at most 2^32 in magnitude "
                         "(larger values overflow float32 in resampling and in the power spectrum)",
                e);
  x[2 * 50 + 1] = 0.25f;
  x[2 * 7] = x[2 * 7 + 1] = 3e38f;
  mf::testing::write_audio_file(big, AudioFileFormat::wav_float, 16000, 2, x);
  CHECK(audio_error_of([&] { mf::audio::decode_mono(big); }).find("a sample of 3e+38 at frame 7, channel 0: ") !=
        std::string::npos);
  CHECK(mf::audio::decode_mono(big, 7).samples == std::vector<float>(7, 0.25f));
}

}  // TEST_SUITE
