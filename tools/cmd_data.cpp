// `melforge data synth`: writes a synthetic leak-detection dataset (io/synth.hpp),
// or with --speakers N a synthetic speaker dataset split by speaker (io/synth_speakers.hpp).
// `melforge data inspect FILE`: validates a dataset file and prints its schema,
// storage, label histogram and value statistics; a malformed file is an error
// (exit 1) with a message naming the file, the dataset, what was expected and
// what was found.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "engine/dtype.hpp"
#include "engine/error.hpp"
#include "io/dataset.hpp"
#include "io/synth.hpp"
#include "io/synth_speakers.hpp"
#include "tools/cli_help.hpp"
#include "tools/commands.hpp"

namespace mf::cli {

namespace {

void run_synth(const std::string& out, const io::SynthConfig& cfg) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto splits = io::write_synthetic(out, cfg);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto names = io::synth_class_names(cfg.classes);
  fmt::print("melforge data synth: {} classes ({}), segments [{} x {}] {}, {} files, L={} S={}, seed {}\n",
             cfg.classes, fmt::join(names, ", "), cfg.mels, cfg.frames, dtype_name(cfg.dtype), cfg.files,
             cfg.long_segments, cfg.short_segments, cfg.seed);
  for (const auto& sp : splits)
    fmt::print("  {:<5} {:<40} {:>6} files {:>8} segments  files per class [{}]\n", sp.name, sp.path, sp.files,
               sp.segments, fmt::join(sp.files_per_class, ", "));
  fmt::print("wrote 3 files in {:.1f} s\n", s);
}

void run_synth_speakers(const std::string& out, const io::SpeakerSynthConfig& cfg) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto splits = io::write_synthetic_speakers(out, cfg);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (cfg.utterances)
    fmt::print("melforge data synth: {} speakers, {} files per speaker, whole utterances of {}..{} frames x {} mels "
               "{}, seed {}\n", cfg.speakers, cfg.files_per_speaker, cfg.frames,
               cfg.max_frames > 0 ? cfg.max_frames : 4 * cfg.frames, cfg.mels, dtype_name(cfg.dtype), cfg.seed);
  else
    fmt::print("melforge data synth: {} speakers, {} files per speaker, segments [{} x {}] {}, L={} S={}, seed {}\n",
               cfg.speakers, cfg.files_per_speaker, cfg.mels, cfg.frames, dtype_name(cfg.dtype), cfg.long_segments,
               cfg.short_segments, cfg.seed);
  for (const auto& sp : splits)
    fmt::print("  {:<5} {:<40} {:>6} files {:>8} segments  {} speakers ({}..{})\n", sp.name, sp.path, sp.files,
               sp.segments, sp.speakers.size(), io::speaker_name(sp.speakers.front(), cfg.speakers),
               io::speaker_name(sp.speakers.back(), cfg.speakers));
  fmt::print("wrote 3 files in {:.1f} s (split by speaker: no speaker is in two files)\n", s);
}

std::string human_bytes(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return fmt::format("{:.1f} {}", b, unit[u]);
}

void run_inspect(const std::string& path, const io::DatasetNames& names, bool scan) {
  const auto ds = io::Dataset::open(path, names);
  const io::DatasetInfo& in = ds->info();
  const auto& stg = in.storage;
  fmt::print("file        {}\n", in.path);
  fmt::print("layout      {}\n", io::segment_layout_name(in.layout));
  fmt::print("segments    /{} {} {}: N = {} segments of {} mels x {} frames", names.segments, dtype_name(in.dtype),
             shape_str(in.shape), in.num_segments, in.n_mels, in.frames);
  if (in.layout == io::SegmentLayout::file_structured)
    fmt::print(" ({} files x {} long x {} short)", in.num_files, in.long_per_file, in.short_per_long);
  fmt::print("\n");
  if (in.ragged()) {
    std::int64_t lo = in.shape[0], hi = 0;
    for (std::int64_t f = 0; f < in.num_files; ++f) {
      lo = std::min(lo, in.utterance_frames(f));
      hi = std::max(hi, in.utterance_frames(f));
    }
    fmt::print("utterances  {} whole utterances of {}..{} frames (mean {:.1f}), /lengths; read as crops of {} frames "
               "({})\n", in.num_files, lo, hi, double(in.shape[0]) / double(in.num_files), in.frames,
               names.crop_frames > 0 ? "data.crop_frames" : "the shortest; training sets data.crop_frames");
  }
  const double logical = double(in.num_segments) * double(in.segment_bytes());
  fmt::print("storage     {}", io::storage_layout_name(stg.layout));
  if (stg.layout == io::StorageLayout::chunked) {
    fmt::print(", chunks {} ({} chunks of {})", shape_str(stg.chunk), stg.num_chunks,
               human_bytes(double(shape_numel(stg.chunk)) * double(dtype_size(in.dtype))));
    fmt::print(", filters [{}]", fmt::join(stg.filters, ", "));
  }
  fmt::print(", {} on disk for {} of data ({:.2f}x)\n", human_bytes(double(stg.storage_bytes)), human_bytes(logical),
             stg.storage_bytes ? logical / double(stg.storage_bytes) : 0.0);
  fmt::print("read path   {}\n", !stg.fast_path ? "H5Dread under HDF5's lock (slow path: layout or filter not handled directly)"
                                 : stg.filters.empty() ? "pread at resolved offsets, outside HDF5"
                                                       : "pread + zlib/unshuffle in the reader threads, outside HDF5");
  fmt::print("labels      /{} [{}] ({}), {} classes: {}\n", names.labels, in.num_files,
             in.layout == io::SegmentLayout::flat ? "one per segment" : "one per file", in.num_classes,
             fmt::join(in.class_names, ", "));
  // A leak target exists with a /leak dataset or a normal class (named, or
  // given): model.heads = auto's rule. Speaker or word sets have none.
  const bool leak_target = in.leak_in_file || io::find_normal_class(in.class_names) >= 0 || names.normal_class >= 0;
  if (!leak_target)
    fmt::print("leak        none: no /{} dataset and no class named normal (a class model trains without the "
               "leak head)\n", names.leak);
  else
    fmt::print("leak        {}\n", in.leak_in_file ? fmt::format("/{} (0/1)", names.leak)
                                                    : fmt::format("derived: label != {} ('{}')", in.normal_class,
                                                                  in.class_names[std::size_t(in.normal_class)]));
  if (in.sample_rate > 0 || in.hop_length > 0)
    fmt::print("attributes  sample_rate {}  hop_length {}\n", in.sample_rate, in.hop_length);
  if (in.n_fft > 0)
    fmt::print("front-end   n_fft {}, mels {} in [{}, {}] Hz, {} frames per segment (log-mel dB, as melforge data "
               "build writes)\n",
               in.n_fft, in.n_mels, in.fmin, in.fmax, in.frames_attr);
  std::vector<std::int64_t> files(std::size_t(in.num_classes), 0), segs(std::size_t(in.num_classes), 0);
  std::int64_t leak_segs = 0;
  for (auto l : in.file_labels) ++files[std::size_t(l)];
  for (std::size_t s = 0; s < in.labels.size(); ++s) {
    ++segs[std::size_t(in.labels[s])];
    leak_segs += in.leak[s];
  }
  fmt::print("histogram   {:<16} {:>8} {:>10}\n", "class", "files", "segments");
  for (int c = 0; c < in.num_classes; ++c)
    fmt::print("            {:<16} {:>8} {:>10}\n", fmt::format("{} {}", c, in.class_names[std::size_t(c)]),
               files[std::size_t(c)], segs[std::size_t(c)]);
  if (leak_target) fmt::print("            leak segments {} of {}\n", leak_segs, in.num_segments);
  if (!scan) return;
  // Value statistics over every segment, or every utterance whole (this also
  // checks that all values are finite).
  const std::int64_t block = 1024;
  std::vector<float> buf;
  std::vector<std::int64_t> rows;
  double sum = 0, sq = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
  const auto add = [&] {
    for (float v : buf) {
      sum += v;
      sq += double(v) * v;
      lo = std::min(lo, double(v));
      hi = std::max(hi, double(v));
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  if (in.ragged()) {
    for (std::int64_t f = 0; f < in.num_files; ++f) {
      buf.resize(std::size_t(in.utterance_frames(f) * in.n_mels));
      ds->read_utterance(f, DType::f32, buf.data(), true);
      add();
    }
  } else {
    for (std::int64_t r0 = 0; r0 < in.num_segments; r0 += block) {
      const std::int64_t r1 = std::min(in.num_segments, r0 + block);
      rows.resize(std::size_t(r1 - r0));
      for (std::int64_t r = r0; r < r1; ++r) rows[std::size_t(r - r0)] = r;
      buf.resize(std::size_t((r1 - r0) * in.segment_elems()));
      ds->read(rows, DType::f32, buf.data(), true);
      add();
    }
  }
  const double n = in.ragged() ? double(in.shape[0]) * double(in.n_mels)
                               : double(in.num_segments) * double(in.segment_elems());
  const double mean = sum / n, sd = std::sqrt(std::max(0.0, sq / n - mean * mean));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("values      min {:.4g}  max {:.4g}  mean {:.4g}  std {:.4g}  (all {} finite; scanned in {:.2f} s)\n", lo,
             hi, mean, sd, std::int64_t(n), s);
}

}  // namespace

void register_data(CLI::App& app) {
  auto* data = app.add_subcommand(
      "data", "Dataset tools: build makes datasets from audio files, synth writes a synthetic dataset, inspect validates a file");
  data->require_subcommand(1);
  register_data_build(*data);
  register_data_trials(*data);

  auto* synth = data->add_subcommand(
      "synth",
      "Make a synthetic leak-detection dataset split by file (or with --speakers a speaker dataset split by "
      "speaker); writes DIR/train.h5, val.h5 and test.h5");
  static std::string out;
  static io::SynthConfig cfg;
  static std::string dtype = "f16", storage = "contiguous";
  synth->add_option("--out", out, "Output directory")->required()->type_name("DIR");
  static io::SpeakerSynthConfig spk;
  spk.speakers = 0;  // 0: the leak dataset
  auto* files = synth->add_option("--files", cfg.files, "Files over the three splits (70/15/15 by file)")
                    ->capture_default_str();
  auto* classes = synth->add_option("--classes", cfg.classes, "Classes (class 0 is normal)")->capture_default_str();
  synth->add_option("--speakers", spk.speakers,
                    "Speaker mode: N synthetic speakers (classes spk0000...), split 70/15/15 by speaker, so val and "
                    "test speakers are never in training (0: the leak dataset)")
      ->capture_default_str();
  auto* per_speaker =
      synth->add_option("--files-per-speaker", spk.files_per_speaker, "Speaker mode: recordings per speaker")
          ->capture_default_str();
  auto* utterances = synth->add_flag("--utterances", spk.utterances,
                                     "Speaker mode: one whole utterance per recording, of --frames to --max-frames "
                                     "frames, in the ragged layout (docs/dataset.md); train with data.crop_frames");
  auto* max_frames = synth->add_option("--max-frames", spk.max_frames,
                                       "With --utterances: the longest utterance (default 4 x --frames)");
  synth->add_option("--mels", cfg.mels, "Mel bins")->capture_default_str();
  synth->add_option("--frames", cfg.frames, "Frames per segment")->capture_default_str();
  synth->add_option("--long", cfg.long_segments, "Long segments per file (L)")->capture_default_str();
  synth->add_option("--short", cfg.short_segments, "Short segments per long segment (S)")->capture_default_str();
  synth->add_option("--seed", cfg.seed, "Seed")->capture_default_str();
  synth->add_option("--dtype", dtype, "Element type of the segments")
      ->capture_default_str()
      ->type_name(one_of_type({"f16", "f32"}));
  synth->add_option("--storage", storage, "HDF5 storage of the segments (gzip = chunked + shuffle + deflate)")
      ->capture_default_str()
      ->type_name(one_of_type({"contiguous", "chunked", "gzip"}));
  synth->callback([files, classes, per_speaker, utterances, max_frames] {
    cfg.dtype = parse_dtype(dtype);
    cfg.storage = io::parse_write_storage(storage);
    MF_CHECK(spk.speakers > 0 || per_speaker->count() == 0, "data synth: --files-per-speaker needs --speakers N");
    MF_CHECK(spk.speakers > 0 || utterances->count() == 0, "data synth: --utterances needs --speakers N");
    MF_CHECK(spk.utterances || max_frames->count() == 0, "data synth: --max-frames needs --utterances");
    if (spk.speakers == 0) return run_synth(out, cfg);
    MF_CHECK(files->count() == 0 && classes->count() == 0,
             "data synth: --files and --classes are for the leak dataset; with --speakers use --files-per-speaker");
    spk.mels = cfg.mels;
    spk.frames = cfg.frames;
    spk.long_segments = cfg.long_segments;
    spk.short_segments = cfg.short_segments;
    spk.seed = cfg.seed;
    spk.dtype = cfg.dtype;
    spk.storage = cfg.storage;
    run_synth_speakers(out, spk);
  });

  auto* inspect = data->add_subcommand(
      "inspect", "Validate a dataset file; prints its schema, storage, label histogram and value statistics");
  static std::string file;
  static io::DatasetNames names;
  names.num_classes_from = "--classes";
  names.normal_class_from = "--normal-class";
  static bool no_scan = false;
  inspect->add_option("file", file, "HDF5 file")->required()->type_name("PATH");
  inspect->add_option("--segments", names.segments, "Name of the segments dataset")
      ->capture_default_str()
      ->type_name("NAME");
  inspect->add_option("--labels", names.labels, "Name of the labels dataset")->capture_default_str()->type_name("NAME");
  inspect->add_option("--leak", names.leak, "Name of the optional leak dataset")
      ->capture_default_str()
      ->type_name("NAME");
  inspect->add_option("--normal-class", names.normal_class, "Class meaning no leak (-1: 'normal' or 0)")
      ->capture_default_str();
  inspect->add_option("--classes", names.num_classes, "Number of classes (0: from class_names or the labels)")
      ->capture_default_str();
  inspect->add_flag("--no-scan", no_scan, "Skip the value statistics (and the full non-finite check)");
  inspect->callback([] { run_inspect(file, names, !no_scan); });
}

}  // namespace mf::cli
