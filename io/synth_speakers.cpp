#include "io/synth_speakers.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numbers>

#include "engine/counter_rng.hpp"
#include "engine/error.hpp"
#include "engine/parallel.hpp"
#include "io/synth_rng.hpp"

namespace mf::io {

namespace {

using synth_detail::db;
using synth_detail::Rng;

// Seeds: a speaker's voice from (seed, speaker), a recording from (seed, speaker, rec).
std::uint64_t speaker_seed(std::uint64_t seed, int speaker) {
  return splitmix64_hash(splitmix64_hash(seed * kSplitmix64Gamma + 0x5eed5eed) ^ std::uint64_t(speaker));
}
std::uint64_t recording_seed(std::uint64_t seed, int speaker, std::int64_t rec) {
  return splitmix64_hash(speaker_seed(seed, speaker) ^ (std::uint64_t(rec) * 0x632be59bd9b4e019ull + 1));
}

constexpr int kFormants = 4;
constexpr double kFmaxHz = 8000;  // sample rate 16 kHz
double hz_to_mel(double f) { return 2595.0 * std::log10(1.0 + f / 700.0); }

struct Formant {
  double pos, width, gain;  // position and width in fractions of the mel axis, gain in dB
};

struct Voice {
  double f0 = 0, level = 0, tilt = 0, breath = 0;
  Formant formant[kFormants];
};

Voice draw_voice(std::uint64_t seed, int speaker) {
  Rng r(speaker_seed(seed, speaker));
  Voice v;
  v.f0 = 90.0 * std::exp(r.uniform() * std::log(260.0 / 90.0));
  v.level = r.uniform(-4, 4);
  v.tilt = r.uniform(10, 26);
  v.breath = db(r.uniform(-16, -6));
  static const double lo[kFormants] = {0.12, 0.30, 0.48, 0.66}, hi[kFormants] = {0.30, 0.48, 0.66, 0.86};
  for (int j = 0; j < kFormants; ++j)
    v.formant[j] = {r.uniform(lo[j], hi[j]), r.uniform(0.025, 0.07), r.uniform(6, 22) - 2.0 * j};
  return v;
}

// A syllable: [begin, end) frames, its vowel (formant shifts) and pitch contour.
struct Syllable {
  std::int64_t begin, end;
  double shift[kFormants], gain[kFormants];
  double pitch_slope;
};

// What a recording draws besides its syllables.
struct Recording {
  double f0 = 0;
  std::vector<double> log_f0_drift;      // per frame
  std::vector<double> channel_db;        // per band
  std::vector<double> noise;             // background power per band
  double snr_db = 0;
  std::vector<Syllable> syllables;
};

Recording draw_recording(Rng& r, const Voice& v, std::int64_t M, std::int64_t total_frames) {
  Recording rec;
  rec.f0 = v.f0 * std::exp(0.06 * r.normal());
  rec.log_f0_drift.resize(std::size_t(total_frames));
  double d = 0;
  for (auto& x : rec.log_f0_drift) {
    d = 0.98 * d + 0.01 * r.normal();
    x = d;
  }
  const double ch_level = r.uniform(-3, 3), ch_tilt = r.uniform(-3, 3);
  double bump_pos[2], bump_width[2], bump_gain[2];
  for (int k = 0; k < 2; ++k) {
    bump_pos[k] = r.uniform(0, 1);
    bump_width[k] = r.uniform(0.08, 0.25);
    bump_gain[k] = r.uniform(-2, 2);
  }
  const double n_tilt = r.uniform(8, 24), n_curve = r.uniform(-3, 3);
  rec.snr_db = r.uniform(15, 25);
  rec.channel_db.resize(std::size_t(M));
  rec.noise.resize(std::size_t(M));
  for (std::int64_t m = 0; m < M; ++m) {
    const double u = (double(m) + 0.5) / double(M);
    double c = ch_level + ch_tilt * (u - 0.5);
    for (int k = 0; k < 2; ++k) {
      const double z = (u - bump_pos[k]) / bump_width[k];
      c += bump_gain[k] * std::exp(-0.5 * z * z);
    }
    rec.channel_db[std::size_t(m)] = c;
    rec.noise[std::size_t(m)] = db(-n_tilt * u + n_curve * 4 * u * (1 - u));  // scaled to the SNR later
  }
  for (std::int64_t t = r.below(8); t < total_frames;) {
    Syllable s{};
    s.begin = t;
    s.end = std::min(total_frames, t + 6 + r.below(16));
    for (int j = 0; j < kFormants; ++j) {
      s.shift[j] = r.uniform(-0.035, 0.035);
      s.gain[j] = r.uniform(-3, 3);
    }
    s.pitch_slope = r.uniform(-0.15, 0.1);
    rec.syllables.push_back(s);
    t = s.end + 2 + r.below(12);
  }
  return rec;
}

// The voice's power in each band for one syllable frame (before the energy
// envelope): the envelope times (aspiration floor + harmonic lines). `env` is scratch.
void voiced_frame(const Voice& v, const Syllable& s, double f0, std::int64_t M, std::vector<double>& env,
                  std::vector<double>& p) {
  for (std::int64_t m = 0; m < M; ++m) {
    const double u = (double(m) + 0.5) / double(M);
    double e = v.level + 10 - v.tilt * u;
    for (int j = 0; j < kFormants; ++j) {
      const double z = (u - v.formant[j].pos - s.shift[j]) / v.formant[j].width;
      e += (v.formant[j].gain + s.gain[j]) * std::exp(-0.5 * z * z);
    }
    env[std::size_t(m)] = db(e);
    p[std::size_t(m)] = env[std::size_t(m)] * v.breath;
  }
  // Harmonic lines: a Gaussian of 0.45 bands (of the rendering resolution) at each k*f0.
  const double w = 0.45, mel_max = hz_to_mel(kFmaxHz);
  for (int k = 1; k * f0 < kFmaxHz; ++k) {
    const double b = hz_to_mel(k * f0) / mel_max * double(M) - 0.5;
    const auto m0 = std::max<std::int64_t>(0, std::int64_t(std::floor(b - 4 * w)));
    const auto m1 = std::min<std::int64_t>(M - 1, std::int64_t(std::ceil(b + 4 * w)));
    for (std::int64_t m = m0; m <= m1; ++m) {
      const double z = (double(m) - b) / w;
      p[std::size_t(m)] += env[std::size_t(m)] * std::exp(-0.5 * z * z);
    }
  }
}

void render_recording(const SpeakerSynthConfig& cfg, int speaker, std::int64_t rec_id, float* out) {
  Rng r(recording_seed(cfg.seed, speaker, rec_id));
  const Voice v = draw_voice(cfg.seed, speaker);
  const std::int64_t M = cfg.mels, T = cfg.frames, total_frames = cfg.long_segments * cfg.short_segments * T;
  const Recording rec = draw_recording(r, v, M, total_frames);
  // Voiced power per frame (zero in pauses), and its mean over voiced frames for the SNR.
  const auto Ms = static_cast<std::size_t>(M);
  std::vector<double> voiced(static_cast<std::size_t>(total_frames) * Ms, 0.0), p(Ms), env(Ms);
  double voiced_sum = 0;
  std::int64_t voiced_bins = 0;
  for (const Syllable& s : rec.syllables)
    for (std::int64_t t = s.begin; t < s.end; ++t) {
      const double x = (double(t - s.begin) + 0.5) / double(s.end - s.begin);
      const double f0 = rec.f0 * std::exp(rec.log_f0_drift[std::size_t(t)] + s.pitch_slope * (x - 0.5));
      voiced_frame(v, s, f0, M, env, p);
      const double level = std::pow(std::sin(std::numbers::pi * x), 2.0);
      for (std::int64_t m = 0; m < M; ++m) {
        voiced[std::size_t(t * M + m)] = p[std::size_t(m)] * level;
        voiced_sum += p[std::size_t(m)];
        ++voiced_bins;
      }
    }
  double noise_mean = 0;
  for (double n : rec.noise) noise_mean += n / double(M);
  const double voiced_mean = voiced_bins > 0 ? voiced_sum / double(voiced_bins) : db(v.level);
  const double noise_gain = voiced_mean / noise_mean * db(-rec.snr_db);
  for (std::int64_t t = 0; t < total_frames; ++t) {
    float* col = out + (t / T) * M * T + (t % T);
    for (std::int64_t m = 0; m < M; ++m) {
      double q = voiced[std::size_t(t * M + m)] + rec.noise[std::size_t(m)] * noise_gain;
      q *= db(rec.channel_db[std::size_t(m)]);
      q *= -0.5 * std::log(r.open01() * r.open01());  // speckle: gamma, shape 2
      col[m * T] = float(std::log10(q + 1e-12));      // dB / 10
    }
  }
}

}  // namespace

std::string speaker_name(int speaker, int speakers) {
  int digits = 4;
  for (int n = speakers - 1; n >= 10000; n /= 10) ++digits;
  return fmt::format("spk{:0{}d}", speaker, digits);
}

std::string speaker_file_name(int speaker, int speakers, std::int64_t rec, std::int64_t files_per_speaker) {
  int digits = 2;
  for (std::int64_t n = files_per_speaker - 1; n >= 100; n /= 10) ++digits;
  return fmt::format("{}/rec{:0{}d}", speaker_name(speaker, speakers), rec, digits);
}

std::array<std::vector<int>, 3> speaker_splits(const SpeakerSynthConfig& cfg) {
  MF_CHECK(cfg.speakers >= 6, "data synth: --speakers must be >= 6 (train, val and test each need 2), found {}",
           cfg.speakers);
  const int n = cfg.speakers;
  const int nv = std::max(2, int(std::lround(double(n) * cfg.val_fraction)));
  const int nt = std::max(2, int(std::lround(double(n) * cfg.test_fraction)));
  MF_CHECK(n - nv - nt >= 2, "data synth: {} speakers leave {} for training after {} val and {} test (need >= 2)", n,
           n - nv - nt, nv, nt);
  std::array<std::vector<int>, 3> s;
  for (int i = 0; i < n; ++i) s[i < n - nv - nt ? 0 : (i < n - nt ? 1 : 2)].push_back(i);
  return s;
}

// Below 64 mel bands: rendered at R times the bands, each R adjacent averaged in power.
void synth_speaker_file(const SpeakerSynthConfig& cfg, int speaker, std::int64_t rec, float* out) {
  const std::int64_t R = synth_detail::render_factor(cfg.mels);
  if (R == 1) return render_recording(cfg, speaker, rec, out);
  SpeakerSynthConfig hi = cfg;
  hi.mels = cfg.mels * R;
  const std::int64_t M = cfg.mels, T = cfg.frames, nseg = cfg.long_segments * cfg.short_segments;
  std::vector<float> buf(static_cast<std::size_t>(nseg * hi.mels * T));
  render_recording(hi, speaker, rec, buf.data());
  synth_detail::band_average(buf.data(), R, nseg, M, T, out);
}

std::int64_t synth_utterance_frames(const SpeakerSynthConfig& cfg, int speaker, std::int64_t rec) {
  const std::int64_t lo = cfg.frames, hi = cfg.max_frames > 0 ? cfg.max_frames : 4 * cfg.frames;
  const std::uint64_t h = splitmix64_hash(recording_seed(cfg.seed, speaker, rec) ^ 0x6c656e677468ull);  // "length"
  return lo + std::int64_t(h % std::uint64_t(hi - lo + 1));
}

void synth_speaker_utterance(const SpeakerSynthConfig& cfg, int speaker, std::int64_t rec, float* out) {
  SpeakerSynthConfig one = cfg;  // the utterance as one segment of its own length: [mels, length]
  one.frames = synth_utterance_frames(cfg, speaker, rec);
  one.long_segments = one.short_segments = 1;
  const std::int64_t M = cfg.mels, T = one.frames;
  std::vector<float> seg(std::size_t(M * T));
  synth_speaker_file(one, speaker, rec, seg.data());
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t m = 0; m < M; ++m) out[t * M + m] = seg[std::size_t(m * T + t)];
}

namespace {

// One split of whole utterances: appended in blocks of recordings, then /lengths.
void write_utterance_split(const SpeakerSynthConfig& cfg, const SpeakerSplit& sp, WriteSpec ws) {
  const std::int64_t fps = cfg.files_per_speaker, M = cfg.mels;
  std::vector<std::int64_t> labels = std::move(ws.labels), lengths(std::size_t(sp.files));
  std::vector<std::string> files = std::move(ws.files);
  std::int64_t T = 0;
  for (std::int64_t f = 0; f < sp.files; ++f) {
    lengths[std::size_t(f)] = synth_utterance_frames(cfg, sp.speakers[std::size_t(f / fps)], f % fps);
    T += lengths[std::size_t(f)];
  }
  ws.shape = {T, M};  // the storage as --storage says (contiguous by default; chunks of 256 frames otherwise)
  ws.ragged = true;
  ws.labels.clear();
  ws.files.clear();
  H5Writer w(sp.path, ws);
  std::int64_t written = 0;
  std::vector<float> buf;
  for (std::int64_t f0 = 0; f0 < sp.files;) {
    std::int64_t f1 = f0, frames = 0;  // about 64 MB of f32 a block
    while (f1 < sp.files && (f1 == f0 || (frames + lengths[std::size_t(f1)]) * M * 4 <= (std::int64_t(64) << 20)))
      frames += lengths[std::size_t(f1++)];
    buf.resize(std::size_t(frames * M));
    std::vector<std::int64_t> at(std::size_t(f1 - f0), 0);
    for (std::int64_t i = 1; i < f1 - f0; ++i) at[std::size_t(i)] = at[std::size_t(i - 1)] + lengths[std::size_t(f0 + i - 1)];
    parallel_for(f1 - f0, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        const std::int64_t f = f0 + i;
        synth_speaker_utterance(cfg, sp.speakers[std::size_t(f / fps)], f % fps, buf.data() + at[std::size_t(i)] * M);
      }
    });
    w.write_segments(written, frames, buf.data());
    written += frames;
    f0 = f1;
  }
  w.finish_utterances(lengths, labels, {}, files);
}

}  // namespace

std::vector<SpeakerSplit> write_synthetic_speakers(const std::string& dir, const SpeakerSynthConfig& cfg) {
  MF_CHECK(cfg.files_per_speaker >= 2,
           "data synth: --files-per-speaker must be >= 2 (a target trial needs two), found {}", cfg.files_per_speaker);
  MF_CHECK(cfg.mels >= 4 && cfg.frames >= 4, "data synth: --mels and --frames must be >= 4");
  MF_CHECK(cfg.long_segments >= 1 && cfg.short_segments >= 1, "data synth: --long and --short must be >= 1");
  MF_CHECK(!cfg.utterances || cfg.max_frames == 0 || cfg.max_frames >= cfg.frames,
           "data synth: --max-frames {} is below --frames {} (the shortest utterance)", cfg.max_frames, cfg.frames);
  MF_CHECK(cfg.dtype == DType::f16 || cfg.dtype == DType::f32, "data synth: --dtype must be f16 or f32");
  const auto splits = speaker_splits(cfg);
  std::filesystem::create_directories(dir);
  const char* names[3] = {"train", "val", "test"};
  const std::int64_t spf = cfg.long_segments * cfg.short_segments, seg_elems = cfg.mels * cfg.frames;
  const std::int64_t fps = cfg.files_per_speaker;
  std::vector<SpeakerSplit> out;
  for (int s = 0; s < 3; ++s) {
    SpeakerSplit sp;
    sp.name = names[s];
    sp.path = (std::filesystem::path(dir) / (std::string(names[s]) + ".h5")).string();
    sp.speakers = splits[std::size_t(s)];
    sp.files = std::int64_t(sp.speakers.size()) * fps;
    sp.segments = sp.files * spf;
    WriteSpec ws;
    ws.shape = {sp.files, cfg.long_segments, cfg.short_segments, cfg.mels, cfg.frames};
    ws.dtype = cfg.dtype;
    ws.storage = cfg.storage;
    ws.sample_rate = 16000;
    ws.hop_length = 256;
    ws.attributes = {{"db_per_unit", 10.0}};  // values are dB / 10
    for (std::size_t k = 0; k < sp.speakers.size(); ++k) {
      ws.class_names.push_back(speaker_name(sp.speakers[k], cfg.speakers));
      for (std::int64_t rec = 0; rec < fps; ++rec) {
        ws.labels.push_back(std::int64_t(k));
        ws.files.push_back(speaker_file_name(sp.speakers[k], cfg.speakers, rec, fps));
      }
    }
    if (cfg.utterances) {
      write_utterance_split(cfg, sp, std::move(ws));
      sp.segments = sp.files;
      out.push_back(std::move(sp));
      continue;
    }
    H5Writer w(sp.path, ws);
    const std::int64_t block = std::max<std::int64_t>(1, (std::int64_t(64) << 20) / (spf * seg_elems * 4));
    std::vector<float> buf;
    for (std::int64_t f0 = 0; f0 < sp.files; f0 += block) {
      const std::int64_t f1 = std::min(sp.files, f0 + block);
      buf.resize(std::size_t((f1 - f0) * spf * seg_elems));
      parallel_for(f1 - f0, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
          const std::int64_t f = f0 + i;
          synth_speaker_file(cfg, sp.speakers[std::size_t(f / fps)], f % fps, buf.data() + i * spf * seg_elems);
        }
      });
      w.write_segments(f0 * spf, (f1 - f0) * spf, buf.data());
    }
    w.close();
    out.push_back(std::move(sp));
  }
  return out;
}

}  // namespace mf::io
