// The mel filter bank and the logmel op's CPU twin against librosa 0.11
// (tests/oracle/librosa_logmel.py, in the venv tools/audio-oracle-venv.sh
// makes), plus determinism and parameter validation.
//
// Tolerances (tests/audio/README.md says why and gives the measured errors):
//   filter bank: the same nonzero bins as librosa's, each weight within 1e-6
//     of its row's largest (measured: bit for bit equal).
//   features: |op - librosa| <= 0.001 + 2e-6 * 10^(h/20) dB, where h is how
//     far (dB) the band's mean power per unit weight lies below the frame's
//     strongest rfft bin (compare_features): 0.001 dB near the top, 0.003 dB
//     60 dB down, 0.02 dB 80 dB down, then tenfold per 20 dB. float32 FFT
//     rounding adds errors of a fixed fraction of the frame's power to every
//     bin, so their share of a band's power grows as the band gets weaker.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "audio/logmel.hpp"
#include "audio/mel_filterbank.hpp"
#include "engine/parallel.hpp"
#include "tests/audio/logmel_testing.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using audio::FrontendParams;
namespace fs = std::filesystem;

namespace {

using testing::logmel::describe;
using testing::logmel::params;

// A scratch directory for the oracle's files, removed at the end.
struct ScratchDir {
  explicit ScratchDir(const std::string& name)
      : path(fs::temp_directory_path() / fmt::format("mf_{}_{}", name, ::getpid())) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
  fs::path path;
};

template <class T>
void write_raw(const fs::path& p, const std::vector<T>& v) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
  REQUIRE(bool(f));
}

std::vector<float> read_f32(const fs::path& p, std::size_t n) {
  std::vector<float> v(n);
  std::ifstream f(p, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(float)));
  REQUIRE_MESSAGE(std::size_t(f.gcount()) == n * sizeof(float), "oracle output ", p.string(), " is short");
  return v;
}

// ---------------------------------------------------------------- signals

// Deterministic uniform numbers in [-1, 1) (splitmix64; no std::
// distributions, whose algorithms differ between standard libraries).
struct Uniform {
  std::uint64_t s;
  float next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return float(double(z >> 40) / double(1ull << 23) - 1.0);
  }
};

struct Signal {
  std::string name;
  std::vector<float> y;  // the whole file
};

std::vector<float> tone(std::int64_t n, double sr, double hz, double amplitude, double phase = 0.3) {
  std::vector<float> y(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    y[std::size_t(i)] = float(amplitude * std::sin(2 * std::numbers::pi * hz * double(i) / sr + phase));
  return y;
}

// Files longer than the op's window (the op sees only their first
// window_samples(); librosa the whole file), a file shorter than one frame,
// and impulses at the window's last sample and just past it.
std::vector<Signal> test_signals(const FrontendParams& p) {
  const double sr = double(p.sample_rate), nyq = sr / 2;
  const std::int64_t w = p.window_samples(), n = w + 3 * p.hop_length + 37;
  std::vector<Signal> s;
  s.push_back({"tone 440 Hz, amplitude 0.5", tone(n, sr, 440, 0.5)});
  s.push_back({"tone 0.23 sr, amplitude 1e-3", tone(n, sr, 0.23 * sr, 1e-3)});
  s.push_back({"tone 1234.5 Hz, amplitude 1e-5 (-100 dBFS)", tone(n, sr, 1234.5, 1e-5)});
  {
    std::vector<float> y = tone(n, sr, 100, 0.3), hi = tone(n, sr, 0.41 * sr, 3e-4, 1.1);
    for (std::size_t i = 0; i < y.size(); ++i) y[i] += hi[i];
    s.push_back({"tones 100 Hz at 0.3 + 0.41 sr at 3e-4", std::move(y)});
  }
  {
    std::vector<float> y(static_cast<std::size_t>(n));
    const double f0 = 20, f1 = 0.45 * sr, dur = double(n) / sr;
    for (std::int64_t i = 0; i < n; ++i) {
      const double t = double(i) / sr;
      y[std::size_t(i)] = float(0.25 * std::sin(2 * std::numbers::pi * (f0 * t + 0.5 * (f1 - f0) / dur * t * t)));
    }
    s.push_back({"linear chirp 20 Hz .. 0.45 sr, amplitude 0.25", std::move(y)});
  }
  {
    std::vector<float> y(static_cast<std::size_t>(n));
    Uniform u{std::uint64_t(p.n_fft * 131 + p.hop_length)};
    for (float& v : y) v = 0.5f * u.next();
    s.push_back({"white noise, uniform in [-0.5, 0.5)", std::move(y)});
  }
  s.push_back({"silence", std::vector<float>(std::size_t(n), 0.f)});
  s.push_back({"tone 0.3 nyquist, shorter than one frame", tone(p.n_fft / 3, sr, 0.3 * nyq, 0.5)});
  for (std::int64_t at : {p.hop_length + 3, w - 1, w}) {
    std::vector<float> y(std::size_t(n), 0.f);
    y[std::size_t(at)] = 1.f;
    s.push_back({fmt::format("impulse at sample {} (window {})", at, w), std::move(y)});
  }
  return s;
}

// The op's input: each file's first window_samples(), zeros past its end.
std::vector<float> op_input(const FrontendParams& p, const std::vector<Signal>& signals) {
  const std::size_t w = std::size_t(p.window_samples());
  std::vector<float> wave(signals.size() * w, 0.f);
  for (std::size_t b = 0; b < signals.size(); ++b)
    std::copy_n(signals[b].y.begin(), std::min(w, signals[b].y.size()), wave.begin() + std::ptrdiff_t(b * w));
  return wave;
}

std::vector<float> run_cpu(const FrontendParams& p, const std::vector<float>& wave,
                           audio::LogmelCpuAlgo algo = audio::LogmelCpuAlgo::automatic) {
  const std::int64_t batch = std::int64_t(wave.size()) / p.window_samples();
  std::vector<float> out(std::size_t(batch * p.segments() * p.n_mels * p.frames), NAN);
  audio::make_logmel_cpu(p, true, algo)->compute(batch, wave.data(), out.data(), nullptr);
  return out;
}

constexpr audio::LogmelCpuAlgo kCpuAlgos[] = {audio::LogmelCpuAlgo::fftw, audio::LogmelCpuAlgo::simd8};

// ---------------------------------------------------------------- tolerance

// dB allowed at depth h (dB; see compare_features): a floor of a few hundred
// float32 ulps of the dB value, plus the float32 FFT's rounding, whose
// measured err / 10^(h/20) is at most 5.8e-7 here (tests/audio/README.md).
double logmel_tolerance_db(double h) { return 0.001 + 2e-6 * std::pow(10.0, h / 20); }

// The largest error seen in each 20 dB band of depth (0-20, ..., 100-120,
// >= 120), and, from 40 dB down, the largest err / 10^(h/20) (the constant
// of the FFT rounding model, logmel_tolerance_db).
struct ErrorByDepth {
  static constexpr int kBands = 7;
  double worst[kBands] = {};
  std::int64_t n[kBands] = {};
  double worst_scaled = 0;
  void add(double h, double err) {
    const int i = std::clamp(int(h / 20), 0, kBands - 1);
    worst[i] = std::max(worst[i], err);
    ++n[i];
    if (h >= 40) worst_scaled = std::max(worst_scaled, err / std::pow(10.0, h / 20));
  }
  void merge(const ErrorByDepth& o) {
    for (int i = 0; i < kBands; ++i) {
      worst[i] = std::max(worst[i], o.worst[i]);
      n[i] += o.n[i];
    }
    worst_scaled = std::max(worst_scaled, o.worst_scaled);
  }
  std::string str() const {
    std::string s;
    for (int i = 0; i < kBands; ++i)
      if (n[i] > 0)
        s += fmt::format(" [{}..{} dB: {} values, max {:.2g}]", 20 * i, i + 1 < kBands ? 20 * (i + 1) : 999, n[i],
                         worst[i]);
    return s + fmt::format("; max err / 10^(h/20) at h >= 40 dB: {:.3g}", worst_scaled);
  }
};

struct FeatureCase {
  FrontendParams p;
  fs::path dir;
  std::vector<Signal> signals;
};

// Compares one case's output with librosa's (ref; peak: each frame's
// strongest rfft bin power in dB); returns the count of values outside the
// tolerance (the first few reported). A value's depth h is how far its band's
// mean power per unit weight, mel / sum(w), lies below the frame's strongest
// bin: float32 FFT rounding adds errors of a fixed fraction of the frame's
// power to every bin, so their relative share grows as 10^(h/20) (amplitude).
std::int64_t compare_features(const FeatureCase& c, const std::vector<float>& out, const std::vector<float>& ref,
                              const std::vector<float>& peak, ErrorByDepth& dist) {
  const FrontendParams& p = c.p;
  const std::int64_t S = p.segments(), M = p.n_mels, F = p.frames, T = p.total_frames();
  const audio::MelFilterbank fb = audio::mel_filterbank(p);
  std::vector<double> weight_db(static_cast<std::size_t>(M));
  for (std::int64_t m = 0; m < M; ++m) {
    double sum = 0;
    for (std::int64_t k = 0; k < fb.n_bins; ++k) sum += fb.weights[std::size_t(m * fb.n_bins + k)];
    weight_db[std::size_t(m)] = sum > 0 ? 10 * std::log10(sum) : NAN;  // NaN: an empty band
  }
  std::int64_t bad = 0;
  for (std::size_t b = 0; b < c.signals.size(); ++b) {
    for (std::int64_t t = 0; t < T; ++t) {
      const std::int64_t s = t / F, f = t % F;
      for (std::int64_t m = 0; m < M; ++m) {
        const std::size_t at = std::size_t(((std::int64_t(b) * S + s) * M + m) * F + f);
        const double o = out[at], r = ref[at], err = std::fabs(o - r);
        const double wdb = weight_db[std::size_t(m)];
        // Where librosa clamps (-100 dB: its power is at most 1e-10), h is a
        // lower bound of the depth, so the tolerance is too. An empty band is
        // -100 dB exactly in the op, -100.0000076 in librosa (numpy's float32
        // log10(1e-10f) is 1 ulp low; the op's log is taken in double).
        const double h =
            std::isnan(wdb) ? 0 : std::max(0.0, double(peak[b * std::size_t(T) + std::size_t(t)]) - (r - wdb));
        const bool librosa_floor = std::fabs(r + 100) < 1e-5;
        const bool ok = std::isnan(wdb) ? o == -100.f && librosa_floor : err <= logmel_tolerance_db(h);
        if (!librosa_floor || o != -100.f) dist.add(h, err);  // the distribution leaves out values both clamp
        if (!ok && ++bad <= 5)
          FAIL_CHECK(fmt::format("{}: {}: frame {} mel {}: op {} dB, librosa {} dB ({:.1f} dB below the frame's "
                                 "strongest bin; tolerance {:.3g} dB)",
                                 describe(p), c.signals[b].name, t, m, o, r, h, logmel_tolerance_db(h)));
      }
    }
  }
  return bad;
}

}  // namespace

TEST_CASE("Slaney mel scale: linear below 1 kHz, 27 mels per factor 6.4 above, and its inverse") {
  CHECK(audio::hz_to_mel_slaney(0) == 0);
  CHECK(audio::hz_to_mel_slaney(200) == doctest::Approx(3.0).epsilon(1e-15));
  CHECK(audio::hz_to_mel_slaney(1000) == doctest::Approx(15.0).epsilon(1e-15));
  CHECK(audio::hz_to_mel_slaney(6400) == doctest::Approx(42.0).epsilon(1e-15));
  CHECK(audio::hz_to_mel_slaney(40960) == doctest::Approx(69.0).epsilon(1e-15));
  for (double hz : {0.0, 50.0, 999.0, 1000.0, 1001.0, 8000.0, 96000.0})
    CHECK(audio::mel_to_hz_slaney(audio::hz_to_mel_slaney(hz)) == doctest::Approx(hz).epsilon(1e-13));
}

TEST_CASE("mel filter bank equals librosa.filters.mel (slaney scale and norm)") {
  const FrontendParams cases[] = {
      params(16000, 1024, 256, 64, 0, 0),     params(22050, 2048, 512, 128, 0, 0),
      params(8000, 256, 64, 40, 50, 3800),    params(44100, 4096, 1024, 80, 0, 0),
      params(16000, 400, 160, 40, 0, 0),      params(11025, 300, 75, 24, 20, 5000),
      params(16000, 256, 64, 128, 0, 0),   // bands narrower than a bin: 13 are empty
      params(48000, 2048, 480, 96, 1000.5, 20000),
  };
  ScratchDir dir("mel_fb_oracle");
  {
    std::ofstream list(dir.path / "cases.txt");
    for (std::size_t i = 0; i < std::size(cases); ++i) {
      const FrontendParams& p = cases[i];
      fs::create_directories(dir.path / std::to_string(i));
      list << fmt::format("fb {} {} {} {} {} {}\n", (dir.path / std::to_string(i)).string(), p.sample_rate, p.n_fft,
                          p.n_mels, p.fmin, p.fmax_hz());
    }
  }
  REQUIRE(testing::run_audio_oracle("librosa_logmel.py", (dir.path / "cases.txt").string()) == 0);

  for (std::size_t i = 0; i < std::size(cases); ++i) {
    const FrontendParams& p = cases[i];
    CAPTURE(describe(p));
    const audio::MelFilterbank fb = audio::mel_filterbank(p);
    REQUIRE(fb.n_mels == p.n_mels);
    REQUIRE(fb.n_bins == p.n_bins());
    const std::vector<float> ref = read_f32(dir.path / std::to_string(i) / "weights.bin", fb.weights.size());
    double worst = 0;
    std::int64_t differing = 0, empty = 0;
    for (std::int64_t m = 0; m < fb.n_mels; ++m) {
      const std::size_t row = std::size_t(m * fb.n_bins);
      const float row_max = *std::max_element(ref.begin() + std::ptrdiff_t(row), ref.begin() + std::ptrdiff_t(row + std::size_t(fb.n_bins)));
      empty += row_max == 0;
      for (std::int64_t k = 0; k < fb.n_bins; ++k) {
        const float w = fb.weights[row + std::size_t(k)], r = ref[row + std::size_t(k)];
        const bool inside = k >= fb.first[std::size_t(m)] && k < fb.first[std::size_t(m)] + fb.count[std::size_t(m)];
        // first/count are exactly the nonzero bins, and they are librosa's.
        if (inside != (w > 0) || (w > 0) != (r > 0))
          FAIL_CHECK(fmt::format("band {} bin {}: weight {} (librosa {}), [first, first + count) = [{}, {})", m, k, w,
                                 r, fb.first[std::size_t(m)], fb.first[std::size_t(m)] + fb.count[std::size_t(m)]));
        differing += w != r;
        if (row_max > 0) worst = std::max(worst, std::fabs(double(w) - double(r)) / double(row_max));
      }
    }
    MESSAGE(fmt::format("{}: {} weights differ from librosa's, max |diff| / row max {:.3g}; {} empty bands",
                        describe(p), differing, worst, empty));
    CHECK(worst <= 1e-6);
    if (p.n_fft == 256 && p.n_mels == 128) CHECK(empty == 13);  // the case covers empty bands
  }
}

TEST_CASE("logmel CPU twin equals librosa's melspectrogram in dB") {
  const FrontendParams cases[] = {
      params(16000, 1024, 256, 64, 0, 0, 6, 1, 2),       // the defaults' FFT
      params(16000, 400, 160, 40, 0, 0, 5, 2, 3),        // n_fft not a power of two; L and S > 1
      params(22050, 2048, 512, 128, 0, 0, 4, 1, 1),
      params(8000, 256, 64, 40, 50, 3800, 16, 2, 1),     // fmin, fmax
      params(44100, 4096, 1024, 80, 0, 0, 3, 1, 2),
      params(16000, 512, 512, 32, 300, 6000, 3, 1, 1),   // hop = n_fft
      params(11025, 300, 75, 24, 20, 5000, 7, 1, 1),     // n_fft = 2^2 3 5^2
      params(16000, 256, 64, 128, 0, 0, 4, 1, 1),        // 13 empty bands: -100 dB
  };
  ScratchDir dir("logmel_oracle");
  std::vector<FeatureCase> fc;
  {
    std::ofstream list(dir.path / "cases.txt");
    for (const FrontendParams& p : cases) {
      FeatureCase c{p, dir.path / std::to_string(fc.size()), test_signals(p)};
      fs::create_directories(c.dir);
      std::vector<float> all;
      std::vector<std::int64_t> lengths;
      for (const Signal& s : c.signals) {
        all.insert(all.end(), s.y.begin(), s.y.end());
        lengths.push_back(std::int64_t(s.y.size()));
      }
      write_raw(c.dir / "signals.bin", all);
      write_raw(c.dir / "lengths.bin", lengths);
      list << fmt::format("mel {} {} {} {} {} {} {} {} {} {}\n", c.dir.string(), p.sample_rate, p.n_fft, p.hop_length,
                          p.n_mels, p.fmin, p.fmax_hz(), p.frames, p.long_segments, p.short_segments);
      fc.push_back(std::move(c));
    }
  }
  REQUIRE(testing::run_audio_oracle("librosa_logmel.py", (dir.path / "cases.txt").string()) == 0);

  for (const audio::LogmelCpuAlgo requested : kCpuAlgos) {
    ErrorByDepth all;
    for (const FeatureCase& c : fc) {
      const FrontendParams& p = c.p;
      const audio::LogmelCpuAlgo algo = audio::resolve_logmel_cpu_algo(p, requested);
      if (algo != requested) continue;  // simd8 needs a power-of-two n_fft: those cases ran as fftw already
      CAPTURE(audio::logmel_cpu_algo_name(algo));
      const std::vector<float> out = run_cpu(p, op_input(p, c.signals), algo);
      const std::vector<float> ref = read_f32(c.dir / "ref.bin", out.size());
      const std::vector<float> peak = read_f32(c.dir / "peak.bin", c.signals.size() * std::size_t(p.total_frames()));
      ErrorByDepth dist;
      CHECK(compare_features(c, out, ref, peak, dist) == 0);
      MESSAGE((fmt::format("{} ({}): |op - librosa| by depth below the frame's strongest bin:", describe(p),
                           audio::logmel_cpu_algo_name(algo)) +
               dist.str()));
      all.merge(dist);
      // Silence, and the impulse just past the window (which no frame covers),
      // are -100 dB exactly.
      const std::size_t per_file = out.size() / c.signals.size();
      for (std::size_t b = 0; b < c.signals.size(); ++b) {
        if (c.signals[b].name != "silence" && c.signals[b].name.find(fmt::format("impulse at sample {} ", p.window_samples())) != 0) continue;
        CAPTURE(c.signals[b].name);
        CHECK(std::all_of(out.begin() + std::ptrdiff_t(b * per_file), out.begin() + std::ptrdiff_t((b + 1) * per_file),
                          [](float v) { return v == -100.f; }));
      }
    }
    MESSAGE((fmt::format("all cases ({}):", audio::logmel_cpu_algo_name(requested)) + all.str()));
  }
}

TEST_CASE("logmel CPU twin: the same bits on 1 and 2 threads and on a second call") {
  for (const audio::LogmelCpuAlgo algo : kCpuAlgos) {
    CAPTURE(audio::logmel_cpu_algo_name(algo));
    // simd8 needs a power-of-two n_fft; 9 frames per segment put a group of
    // eight frames across a segment boundary.
    const FrontendParams p = algo == audio::LogmelCpuAlgo::fftw ? params(16000, 400, 160, 40, 0, 0, 9, 2, 2)
                                                                : params(16000, 512, 160, 40, 0, 0, 9, 2, 2);
    REQUIRE(audio::resolve_logmel_cpu_algo(p, algo) == algo);
    std::vector<Signal> signals = test_signals(p);
    const std::vector<float> wave = op_input(p, signals);
    const int threads = cpu_threads();
    set_cpu_threads(1);
    const std::vector<float> one = run_cpu(p, wave, algo);
    set_cpu_threads(2);
    const std::vector<float> two = run_cpu(p, wave, algo);
    auto op = audio::make_logmel_cpu(p, true, algo);
    std::vector<float> again(one.size(), NAN), third(one.size(), NAN);
    op->compute(std::int64_t(signals.size()), wave.data(), again.data(), nullptr);
    op->compute(std::int64_t(signals.size()), wave.data(), third.data(), nullptr);
    set_cpu_threads(threads);
    CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(one.data(), again.data(), one.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(one.data(), third.data(), one.size() * sizeof(float)) == 0);
    CHECK(std::none_of(one.begin(), one.end(), [](float v) { return std::isnan(v); }));
    // A batch of one file gives that file's rows of the batch.
    const std::size_t w = std::size_t(p.window_samples()), per_file = one.size() / signals.size();
    std::vector<float> single(per_file, NAN);
    op->compute(1, wave.data() + 4 * w, single.data(), nullptr);
    CHECK(std::memcmp(single.data(), one.data() + 4 * per_file, per_file * sizeof(float)) == 0);
    CHECK_FALSE(op->on_device());
  }
}

TEST_CASE("logmel CPU simd8: a frame's values do not depend on its lane or group") {
  // The same audio delayed by one hop: its frame t + 1 covers the samples of
  // the original's frame t, in the next lane (or the next group's lane 0),
  // for every frame whose window the shorter op input still holds.
  const FrontendParams p = params(16000, 512, 160, 40, 0, 0, 9, 1, 3);
  REQUIRE(audio::resolve_logmel_cpu_algo(p, audio::LogmelCpuAlgo::simd8) == audio::LogmelCpuAlgo::simd8);
  const std::int64_t T = p.total_frames(), M = p.n_mels, F = p.frames;
  std::vector<Signal> signals = test_signals(p);
  std::vector<Signal> delayed = signals;
  for (Signal& d : delayed) d.y.insert(d.y.begin(), std::size_t(p.hop_length), 0.f);
  const std::vector<float> a = run_cpu(p, op_input(p, signals), audio::LogmelCpuAlgo::simd8);
  const std::vector<float> b = run_cpu(p, op_input(p, delayed), audio::LogmelCpuAlgo::simd8);
  const auto at = [&](std::size_t file, std::int64_t t, std::int64_t m) {
    return std::size_t(((std::int64_t(file) * p.segments() + t / F) * M + m) * F + t % F);
  };
  for (std::size_t f = 0; f < signals.size(); ++f) {
    CAPTURE(signals[f].name);
    for (std::int64_t t = 0; t + 1 < T; ++t)
      for (std::int64_t m = 0; m < M; ++m) REQUIRE(std::memcmp(&a[at(f, t, m)], &b[at(f, t + 1, m)], sizeof(float)) == 0);
  }
}

TEST_CASE("logmel CPU twin refuses bad parameters, naming the parameter and the allowed range") {
  auto err = [](const FrontendParams& p) { return testing::error_of([&] { audio::make_logmel_cpu(p); }); };
  FrontendParams p;
  p.n_fft = 1023;
  CHECK(err(p) == "front-end: n_fft 1023: expected an even number in 16..65536");
  p = FrontendParams{};
  p.hop_length = 2048;
  CHECK(err(p) == "front-end: hop_length 2048: expected 1..n_fft (1024)");
  p = FrontendParams{};
  p.fmax = 9000;
  CHECK(err(p) == "front-end: fmax 9000 Hz: expected 0 (= sample_rate / 2) or at most sample_rate / 2 = 8000");
  p = FrontendParams{};
  p.fmin = 5000;
  p.fmax = 4000;
  CHECK(err(p) == "front-end: fmin 5000 Hz must be below fmax 4000 Hz");
  p = FrontendParams{};
  p.n_mels = 0;
  CHECK(err(p) == "front-end: n_mels 0: expected 1..1024");
  p = FrontendParams{};
  p.frames = 0;
  CHECK(err(p) == "front-end: frames 0: expected 1..65536");
  CHECK(testing::error_of([] { audio::mel_filterbank(params(16000, 1024, 256, 64, -1, 0)); }) ==
        "front-end: fmin -1 Hz: expected >= 0");
  auto op = audio::make_logmel_cpu(FrontendParams{});
  float x = 0;
  CHECK(testing::error_of([&] { op->compute(-1, &x, &x, nullptr); }) == "logmel (CPU): batch -1: expected >= 0");
  CHECK(testing::error_of([&] { op->compute(1, nullptr, &x, nullptr); }) ==
        "logmel (CPU): null wave or out pointer for a batch of 1");
  CHECK(testing::error_of([&] { op->compute(0, nullptr, nullptr, nullptr); }) == "<no error>");
}
