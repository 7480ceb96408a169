// Fuzz target: an audio file as `melforge data build` reads it
// (audio/feature_pipeline.cpp): audio::decode_mono (libsndfile, the mono mix,
// the truncation and non-finite checks), a prefix read as load_mono does at
// the file's own rate, then the resampling to the front-end's rate (libsoxr).
//
// The input bytes are the file. Its extension matters to libsndfile only when
// no header is recognised (then ".au" reads any bytes as raw u-law and ".mp3"
// tries libmpg123), so it is the usual one for a known leading signature and
// otherwise picked by the first byte among the extensions melforge accepts.
//
// Findings beyond the sanitizers: an exception other than mf::Error (the
// builder reports a bad file only through audio::AudioError: any other type
// from decode_mono would stop the whole build), samples that are not finite
// or not as many as the contract says, a prefix that differs from the whole
// file's start, a resampled length other than ceil(n * to / from), and (with
// -malloc_limit_mb) memory sized from what a header declares rather than from
// what the file holds.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "audio/decode.hpp"
#include "engine/error.hpp"
#include "fuzz/fuzz_support.hpp"

namespace {
constexpr const char* kTarget = "audio_decode";
constexpr std::int64_t kPrefix = 100;               // decode_mono(path, kPrefix)
constexpr double kMaxResampled = double(1 << 20);   // resample only when in and out are at most this long

const char* extension_for(const std::uint8_t* data, std::size_t size) {
  struct Magic {
    const char* bytes;
    const char* ext;
  };
  static constexpr Magic kMagic[] = {{"RIFF", ".wav"}, {"RIFX", ".wav"}, {"RF64", ".rf64"}, {"fLaC", ".flac"},
                                     {"OggS", ".ogg"},  {"FORM", ".aiff"}, {".snd", ".au"},   {"caff", ".caf"}};
  for (const Magic& m : kMagic)
    if (size >= 4 && std::memcmp(data, m.bytes, 4) == 0) return m.ext;
  static constexpr const char* kOther[] = {".wav", ".flac", ".ogg", ".aiff", ".au", ".mp3"};
  return kOther[size == 0 ? 0 : data[0] % std::size(kOther)];
}

// What decode_mono promises for a file it accepted; `limit` as passed (-1: all).
void check_decoded(const mf::audio::MonoAudio& a, std::int64_t limit) {
  FUZZ_CHECK(a.sample_rate > 0 && a.channels >= 1 && a.file_frames > 0, kTarget);
  FUZZ_CHECK(!a.format.empty(), kTarget);
  const std::int64_t want = limit < 0 ? a.file_frames : std::min(limit, a.file_frames);
  FUZZ_CHECK(std::int64_t(a.samples.size()) == want, kTarget);
  for (const float v : a.samples) FUZZ_CHECK(std::isfinite(v), kTarget);
}

// The builder's next step: to the front-end's rate (another one when equal).
void check_resample(const mf::audio::MonoAudio& a) {
  const double from = double(a.sample_rate), to = a.sample_rate == 16000 ? 22050.0 : 16000.0;
  const double out_len = std::ceil(double(a.samples.size()) * (to / from));
  if (double(a.samples.size()) > kMaxResampled || out_len > kMaxResampled) return;  // fast iterations
  const std::vector<float> y = mf::audio::resample(a.samples, from, to);
  FUZZ_CHECK(double(y.size()) == out_len, kTarget);
  for (const float v : y) FUZZ_CHECK(std::isfinite(v), kTarget);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mf::fuzz::quiet();
  const std::string path = mf::fuzz::write_input(data, size, extension_for(data, size));
  bool whole_ok = false;
  mf::audio::MonoAudio whole;
  try {
    whole = mf::audio::decode_mono(path);
    whole_ok = true;
    check_decoded(whole, -1);
  } catch (const mf::audio::AudioError&) {
    // the expected answer to a file that is not audio
  } catch (...) {
    mf::fuzz::fail_uncaught(kTarget);
  }
  try {
    const mf::audio::MonoAudio prefix = mf::audio::decode_mono(path, kPrefix);
    check_decoded(prefix, kPrefix);
    if (whole_ok) {
      FUZZ_CHECK(prefix.file_frames == whole.file_frames && prefix.sample_rate == whole.sample_rate, kTarget);
      FUZZ_CHECK(std::equal(prefix.samples.begin(), prefix.samples.end(), whole.samples.begin()), kTarget);
    }
  } catch (const mf::audio::AudioError&) {
    // A prefix may be refused where the whole file is not only when the
    // whole read fails too (the checks before reading are the same).
    FUZZ_CHECK(!whole_ok, kTarget);
  } catch (...) {
    mf::fuzz::fail_uncaught(kTarget);
  }
  if (!whole_ok) return 0;
  try {
    check_resample(whole);
  } catch (const mf::Error&) {
    // libsoxr refusing a ratio: a clear error naming the rates
  } catch (...) {
    mf::fuzz::fail_uncaught(kTarget);
  }
  return 0;
}
