#include "io/synth.hpp"

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
}  // namespace

std::vector<std::string> synth_class_names(int classes) {
  static const char* named[] = {"normal", "leak_low", "leak_mid", "leak_high"};
  std::vector<std::string> v;
  for (int c = 0; c < classes; ++c) v.push_back(classes <= 4 ? named[c] : (c == 0 ? "normal" : "leak_" + std::to_string(c)));
  return v;
}

namespace {
void synth_file_at(const SynthConfig& cfg, int cls, std::uint64_t file_seed, float* out);
}

// Below 64 mel bands the scene is rendered at R = ceil(64 / mels) times the
// resolution and each R adjacent bands are averaged in power, as a filter bank with
// R times wider bands would: tones and leak bands keep their widths in Hz.
void synth_file(const SynthConfig& cfg, int cls, std::uint64_t file_seed, float* out) {
  const std::int64_t R = synth_detail::render_factor(cfg.mels);
  if (R == 1) return synth_file_at(cfg, cls, file_seed, out);
  SynthConfig hi = cfg;
  hi.mels = cfg.mels * R;
  const std::int64_t M = cfg.mels, T = cfg.frames, nseg = cfg.long_segments * cfg.short_segments;
  std::vector<float> buf(static_cast<std::size_t>(nseg * hi.mels * T));
  synth_file_at(hi, cls, file_seed, buf.data());
  synth_detail::band_average(buf.data(), R, nseg, M, T, out);
}

namespace {
void synth_file_at(const SynthConfig& cfg, int cls, std::uint64_t file_seed, float* out) {
  Rng r(file_seed);
  const std::int64_t M = cfg.mels, T = cfg.frames, nseg = cfg.long_segments * cfg.short_segments;
  const std::int64_t total_frames = nseg * T;
  // Background spectrum (dB): level and tilt.
  const double level = r.uniform(-4, 4), tilt = r.uniform(8, 28), curve = r.uniform(-3, 3);
  std::vector<double> bg(static_cast<std::size_t>(M));
  for (std::int64_t m = 0; m < M; ++m) {
    const double u = double(m) / double(M - 1 > 0 ? M - 1 : 1);
    bg[std::size_t(m)] = db(level - tilt * u + curve * u * (1 - u) * 4);
  }
  // Machinery tones.
  struct Tone { double pos, width, gain, mod_rate, mod_depth, phase; };
  std::vector<Tone> tones;
  for (int k = 0, n = r.below(4); k < n; ++k)
    tones.push_back({r.uniform(2, double(M) - 3), r.uniform(0.4, 1.2), db(r.uniform(3, 18)), r.uniform(0.002, 0.05),
                     r.uniform(0, 0.8), r.uniform(0, 6.3)});
  // Leak hiss.
  double centre = 0, bw = 1, leak_gain = 0;
  bool intermittent = false;
  if (cls > 0) {
    const int nleak = std::max(1, cfg.classes - 1);
    const double frac = nleak == 1 ? 0.5 : 0.15 + 0.7 * double(cls - 1) / double(nleak - 1);
    centre = (frac + r.uniform(-0.04, 0.04)) * double(M);
    bw = (0.05 + 0.035 * double((cls - 1) % 3)) * double(M) * r.uniform(0.8, 1.25);
    const double snr = r.uniform(-3, 12);
    const std::size_t cb = std::size_t(std::clamp<std::int64_t>(std::int64_t(centre), 0, M - 1));
    leak_gain = bg[cb] * db(snr);
    intermittent = r.uniform() < 0.3;
  }
  // Envelopes over the file's timeline: drift, leak on/off runs, transients.
  std::vector<double> drift(static_cast<std::size_t>(total_frames)), on(static_cast<std::size_t>(total_frames), 1.0),
      burst(static_cast<std::size_t>(total_frames), 0.0);
  double d = 0;
  for (auto& x : drift) {
    d = 0.995 * d + 0.1 * r.normal();
    x = db(d);
  }
  if (intermittent) {
    bool state = r.uniform() < 0.5;
    for (std::int64_t t = 0; t < total_frames;) {
      const std::int64_t run = 8 + std::int64_t(r.uniform() * double(T) * 1.5);
      for (std::int64_t u = t; u < std::min(total_frames, t + run); ++u) on[std::size_t(u)] = state ? 1.0 : 0.0;
      t += run;
      state = !state;
    }
  }
  for (std::int64_t t = 0; t < total_frames; ++t)
    if (r.uniform() < 0.004) {
      const double g = db(r.uniform(3, 12));
      for (std::int64_t u = t; u < std::min(total_frames, t + 1 + r.below(3)); ++u) burst[std::size_t(u)] = g;
    }
  for (std::int64_t t = 0; t < total_frames; ++t) {
    float* col = out + (t / T) * M * T + (t % T);
    for (std::int64_t m = 0; m < M; ++m) {
      const double b = bg[std::size_t(m)];
      double p = b * drift[std::size_t(t)] * (1 + burst[std::size_t(t)]);
      for (const Tone& tn : tones) {
        const double am = 1 + tn.mod_depth * std::sin(tn.mod_rate * double(t) + tn.phase);
        const double z1 = (double(m) - tn.pos) / tn.width, z2 = (double(m) - 2 * tn.pos) / (2 * tn.width);
        p += b * tn.gain * am * (std::exp(-0.5 * z1 * z1) + 0.3 * std::exp(-0.5 * z2 * z2));
      }
      if (cls > 0 && on[std::size_t(t)] > 0) {
        const double z = (double(m) - centre) / bw;
        p += leak_gain * std::exp(-0.5 * z * z);
      }
      // Speckle: a mel-band power estimate fluctuates like a gamma variate (shape 2 here).
      p *= -0.5 * std::log(r.open01() * r.open01());
      col[m * T] = float(std::log10(p + 1e-12));  // dB / 10
    }
  }
}
}  // namespace

std::vector<SynthSplit> write_synthetic(const std::string& dir, const SynthConfig& cfg) {
  MF_CHECK(cfg.files >= 3, "data synth: --files must be >= 3 (train, val and test each need a file), found {}", cfg.files);
  MF_CHECK(cfg.classes >= 2, "data synth: --classes must be >= 2 (normal + at least one leak class), found {}", cfg.classes);
  MF_CHECK(cfg.mels >= 4 && cfg.frames >= 4, "data synth: --mels and --frames must be >= 4");
  MF_CHECK(cfg.long_segments >= 1 && cfg.short_segments >= 1, "data synth: --long and --short must be >= 1");
  MF_CHECK(cfg.dtype == DType::f16 || cfg.dtype == DType::f32, "data synth: --dtype must be f16 or f32");
  std::filesystem::create_directories(dir);
  // Files: classes round-robin, then each class's files split by the fractions.
  std::vector<std::vector<std::int64_t>> split_files(3);
  for (int c = 0; c < cfg.classes; ++c) {
    std::vector<std::int64_t> fs;
    for (std::int64_t f = c; f < cfg.files; f += cfg.classes) fs.push_back(f);
    const auto n = std::int64_t(fs.size());
    std::int64_t nv = std::int64_t(std::llround(double(n) * cfg.val_fraction));
    std::int64_t nt = std::int64_t(std::llround(double(n) * cfg.test_fraction));
    if (n >= 3) { nv = std::max<std::int64_t>(nv, 1); nt = std::max<std::int64_t>(nt, 1); }
    nv = std::min(nv, n);
    nt = std::min(nt, n - nv);
    for (std::int64_t i = 0; i < n; ++i) split_files[i < n - nv - nt ? 0 : (i < n - nt ? 1 : 2)].push_back(fs[std::size_t(i)]);
  }
  // Tiny datasets: make sure val and test get a file each (taken from train).
  for (int s = 1; s < 3; ++s)
    if (split_files[std::size_t(s)].empty() && split_files[0].size() > 1) {
      split_files[std::size_t(s)].push_back(split_files[0].back());
      split_files[0].pop_back();
    }
  const char* names[3] = {"train", "val", "test"};
  const std::int64_t spf = cfg.long_segments * cfg.short_segments, seg_elems = cfg.mels * cfg.frames;
  std::vector<SynthSplit> out;
  for (int s = 0; s < 3; ++s) {
    auto& fs = split_files[std::size_t(s)];
    MF_CHECK(!fs.empty(), "data synth: the {} split has no files: use more --files", names[s]);
    // Interleave classes inside the file (the reader shuffles anyway; eval sees all classes early).
    std::sort(fs.begin(), fs.end());
    SynthSplit sp;
    sp.name = names[s];
    sp.path = (std::filesystem::path(dir) / (std::string(names[s]) + ".h5")).string();
    sp.files = std::int64_t(fs.size());
    sp.segments = sp.files * spf;
    sp.files_per_class.assign(std::size_t(cfg.classes), 0);
    WriteSpec ws;
    ws.shape = {sp.files, cfg.long_segments, cfg.short_segments, cfg.mels, cfg.frames};
    ws.dtype = cfg.dtype;
    ws.storage = cfg.storage;
    ws.class_names = synth_class_names(cfg.classes);
    ws.sample_rate = 16000;
    ws.hop_length = 256;
    ws.attributes = {{"db_per_unit", 10.0}};  // values are dB / 10
    for (std::int64_t f : fs) {
      const int c = int(f % cfg.classes);
      ws.labels.push_back(c);
      ws.leak.push_back(c != 0);
      ++sp.files_per_class[std::size_t(c)];
    }
    H5Writer w(sp.path, ws);
    const std::int64_t block = std::max<std::int64_t>(1, (std::int64_t(64) << 20) / (spf * seg_elems * 4));
    std::vector<float> buf;
    for (std::int64_t f0 = 0; f0 < sp.files; f0 += block) {
      const std::int64_t f1 = std::min(sp.files, f0 + block);
      buf.resize(std::size_t((f1 - f0) * spf * seg_elems));
      parallel_for(f1 - f0, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
          const std::int64_t f = fs[std::size_t(f0 + i)];
          const std::uint64_t file_seed = cfg.seed * kSplitmix64Gamma + std::uint64_t(f) * 0x632be59bd9b4e019ull + 1;
          synth_file(cfg, int(f % cfg.classes), file_seed, buf.data() + i * spf * seg_elems);
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
