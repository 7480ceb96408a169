// `melforge data build`: audio files -> log-mel HDF5 datasets (audio/dataset_builder.hpp).
// Shows a progress line (files/s, hours of audio per second) and ends with the
// splits written, the files skipped and why, and where the time went.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "audio/dataset_builder.hpp"
#include "engine/error.hpp"
#include "tools/cli_help.hpp"
#include "tools/commands.hpp"

namespace mf::cli {

namespace {
struct BuildArgs {
  audio::BuildOptions opt;
  std::string split = "0.7,0.15,0.15", device = "auto", dtype = "f16", compress = "none", progress = "auto";
};

// A live line on a terminal (redrawn at most 5 times a second), a plain line every 10 s otherwise.
class BuildProgressLine {
 public:
  explicit BuildProgressLine(const std::string& mode)
      : tty_(mode == "tty" || (mode == "auto" && isatty(fileno(stderr)))), off_(mode == "off") {}
  void update(const std::string& split, std::int64_t done, std::int64_t total, double audio_s) {
    const double t = std::chrono::duration<double>(Clock::now() - t0_).count();
    if (split != split_) split_ = split, split_t0_ = t;  // the builder reports 0 files done as a split starts
    const double dt = std::max(1e-3, t - split_t0_);
    if (off_ || done == 0 || (t - last_ < (tty_ ? 0.2 : 10.0) && done < total)) return;
    last_ = t;
    const std::string line = fmt::format("{:<5} {:>7}/{} files  {:>8.0f} files/s  {:>7.2f} h audio/s  {:.1f} s", split,
                                         done, total, double(done) / dt, audio_s / 3600 / dt, t);
    if (tty_)
      fmt::print(stderr, "\r{}\033[K{}", line, done == total ? "\n" : "");
    else
      fmt::print(stderr, "{}\n", line);
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point t0_ = Clock::now();
  bool tty_, off_;
  std::string split_;
  double split_t0_ = 0, last_ = -1e9;
};

void print_times(const audio::BuildReport& r) {
  audio::PipelineTimes t;
  for (const auto& s : r.splits) {
    t.decode_thread_s += s.times.decode_thread_s;
    t.resample_thread_s += s.times.resample_thread_s;
    t.features_thread_s += s.times.features_thread_s;
    t.decode_wall_s += s.times.decode_wall_s;
    t.features_s += s.times.features_s;
    t.ok_files += s.times.ok_files;
    t.audio_seconds += s.times.audio_seconds;
    t.threads = std::max(t.threads, s.times.threads);
  }
  // The decode threads' wall time, split between reading+decoding,
  // resampling and (CPU) the features in proportion to the thread-seconds
  // each took; on a GPU the features are the device's own time (overlapped).
  const double thr = t.decode_thread_s + t.resample_thread_s + t.features_thread_s;
  const auto share = [&](double x) { return thr > 0 ? t.decode_wall_s * x / thr : 0; };
  const double dec = share(t.decode_thread_s), res = share(t.resample_thread_s);
  const double fft = t.features_s + share(t.features_thread_s);
  const std::pair<const char*, double> parts[] = {
      {"read+decode", dec}, {"resample", res}, {"FFT+mel", fft}, {"write", r.write_s}};
  const auto* worst = std::max_element(std::begin(parts), std::end(parts),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
  fmt::print("time        {:.2f} s wall for {} files, {:.2f} h of audio: {:.0f} files/s, {:.1f} h of audio/s "
             "({} decode threads)\n",
             r.wall_s, t.ok_files, t.audio_seconds / 3600, double(t.ok_files) / r.wall_s,
             t.audio_seconds / 3600 / r.wall_s, t.threads);
  fmt::print("            read+decode {:.2f} s, resample {:.2f} s, FFT+mel {:.2f} s, write {:.2f} s (overlapped)\n",
             dec, res, fft, r.write_s);
  fmt::print("bottleneck  {} ({:.0f}% of the wall time)\n", worst->first, 100 * worst->second / r.wall_s);
}

void print_report(const audio::BuildReport& r, const audio::BuildOptions& opt) {
  const auto& p = opt.pipeline.frontend;
  const std::string layout = opt.pipeline.whole_files
                                 ? fmt::format("whole utterances of >= {} frames", p.frames)
                                 : fmt::format("{} x {} segments of {} frames per file", p.long_segments,
                                               p.short_segments, p.frames);
  fmt::print("melforge data build: {} classes ({}), {} Hz, n_fft {}, hop {}, {} mels [{}, {}] Hz, {}, {} on {}\n",
             r.class_names.size(), fmt::join(r.class_names, ", "), p.sample_rate, p.n_fft, p.hop_length, p.n_mels,
             p.fmin, p.fmax_hz(), layout, dtype_name(opt.dtype), opt.pipeline.device.str());
  for (const auto& s : r.splits) {
    if (s.path.empty()) {
      fmt::print("  {:<5} no files (not written)\n", s.name);
      continue;
    }
    fmt::print("  {:<5} {:<40} {:>7} of {:>7} files  per class [{}]\n", s.name, s.path.string(), s.files_written,
               s.files_listed, fmt::join(s.files_per_class, ", "));
  }
  if (!r.skipped.empty()) {
    fmt::print("skipped     {} files ({}):\n", r.skipped.size(), (opt.out_dir / "skipped.csv").string());
    for (std::size_t i = 0; i < std::min<std::size_t>(10, r.skipped.size()); ++i)
      fmt::print("            {}: {}\n", r.skipped[i].path, r.skipped[i].reason);
    if (r.skipped.size() > 10) fmt::print("            ... and {} more\n", r.skipped.size() - 10);
  }
  if (r.padded) fmt::print("padded      {} files shorter than needed, padded with silence (--pad)\n", r.padded);
  if (!r.ignored.empty())
    fmt::print("ignored     {} files that are not audio or not in a class folder (e.g. {})\n", r.ignored.size(),
               r.ignored.front());
  print_times(r);
}
}  // namespace

void register_data_build(CLI::App& data) {
  static BuildArgs a;
  auto& o = a.opt;
  auto& p = o.pipeline.frontend;
  auto* b = data.add_subcommand(
      "build", "Build log-mel datasets from audio: DIR/<class>/*.wav (or --labels) -> OUT/train.h5, val.h5, test.h5");
  b->add_option("--audio", o.audio_root, "Audio folder: one sub-folder per class, or the root of --labels' paths")
      ->required()
      ->type_name("DIR");
  b->add_option("--out", o.out_dir, "Output folder")->required()->type_name("DIR");
  b->add_option("--labels", o.labels_csv, "CSV of path,label[,leak] (paths relative to --audio)")->type_name("PATH");
  b->add_option("--split", a.split, "Train,val,test fractions, by file, stratified per class")
      ->capture_default_str()
      ->type_name("F,F,F");
  b->add_option("--split-by", o.split_by_csv, "CSV of path,group: groups never cross splits (or train/val/test)")
      ->type_name("PATH");
  b->add_option("--seed", o.seed, "Seed of the split")->capture_default_str();
  b->add_option("--sample-rate", p.sample_rate, "Sample rate the audio is resampled to (Hz)")->capture_default_str();
  b->add_option("--n-fft", p.n_fft, "FFT size and window length")->capture_default_str();
  b->add_option("--hop", p.hop_length, "Hop length (samples)")->capture_default_str();
  b->add_option("--mels", p.n_mels, "Mel bands")->capture_default_str();
  b->add_option("--fmin", p.fmin, "Lowest mel frequency (Hz)")->capture_default_str();
  b->add_option("--fmax", p.fmax, "Highest mel frequency (Hz; 0 = sample rate / 2)")->capture_default_str();
  b->add_option("--frames", p.frames, "Frames per segment (with --utterances: the shortest utterance kept)")
      ->capture_default_str();
  auto* long_opt = b->add_option("--long", p.long_segments, "Long segments per file (L)")->capture_default_str();
  auto* short_opt =
      b->add_option("--short", p.short_segments, "Short segments per long segment (S)")->capture_default_str();
  b->add_flag("--utterances", o.pipeline.whole_files,
              "Whole utterances: each file's whole spectrogram in the ragged layout (/segments [T, mels] + /lengths, "
              "docs/dataset.md), for random-crop training (data.crop_frames); the front-end runs on the CPU");
  b->add_flag("--pad", o.pipeline.pad, "Pad files too short for L*S segments with silence (default: skip them)");
  b->add_flag("--strict", o.pipeline.strict, "Stop at the first file that cannot be used (default: skip, report)");
  checked_one_of(b->add_option("--compress", a.compress, "Compression of /segments")->capture_default_str(),
                 {"none", "gzip"});
  checked_one_of(b->add_option("--dtype", a.dtype, "Element type of /segments")->capture_default_str(), {"f16", "f32"});
  b->add_option("--device", a.device, "Where the FFT and mel projection run")->capture_default_str()->type_name(kDeviceType);
  b->add_option("--threads", o.pipeline.threads, "Decode threads (0: one per core)")->capture_default_str();
  b->add_option("--batch-files", o.pipeline.batch_files, "Files per batch (0: 64 on the CPU, 256 on a GPU)")
      ->capture_default_str();
  checked_one_of(b->add_option("--progress", a.progress, "Progress display")->capture_default_str(),
                 {"auto", "tty", "plain", "off"});
  b->callback([long_opt, short_opt] {
    a.opt.split = audio::parse_split(a.split);
    if (a.opt.pipeline.whole_files) {
      MF_CHECK(long_opt->count() == 0 && short_opt->count() == 0,
               "data build --utterances: each file is one whole utterance; --long and --short cut fixed segments");
      a.opt.pipeline.frontend.long_segments = a.opt.pipeline.frontend.short_segments = 1;
      if (a.device == "auto") a.device = "cpu";
    }
    a.opt.pipeline.device = parse_device(a.device);
    a.opt.dtype = parse_dtype(a.dtype);
    a.opt.gzip = a.compress == "gzip";
    BuildProgressLine line(a.progress);
    const auto report = audio::build_dataset(
        a.opt, [&](const std::string& s, std::int64_t d, std::int64_t n, double au) { line.update(s, d, n, au); });
    print_report(report, a.opt);
  });
}

}  // namespace mf::cli
