#include "audio/feature_file.hpp"

#include <algorithm>

#include "engine/atomic_file.hpp"
#include "engine/error.hpp"
#include "io/h5_writer.hpp"

namespace fs = std::filesystem;

namespace mf::audio {

std::vector<std::pair<std::string, std::variant<double, std::int64_t, std::string>>> frontend_attributes(
    const FrontendParams& p) {
  return {{"n_fft", p.n_fft},
          {"fmin", p.fmin},
          {"fmax", p.fmax_hz()},
          {"frames", p.frames},
          {"center", std::int64_t(1)},
          {"pad_mode", std::string("constant")},
          {"window", std::string("hann")},
          {"power", 2.0},
          {"mel_scale", std::string("slaney")},
          {"mel_norm", std::string("slaney")},
          {"log", std::string("dB")},
          {"db_per_unit", 1.0},
          {"amin", 1e-10},
          {"frontend", std::string("librosa.feature.melspectrogram, then 10*log10(max(S, 1e-10))")}};
}

FeatureFileResult write_feature_file(const fs::path& out, const std::vector<FeatureFileEntry>& entries,
                                     const FeatureFileSpec& spec, const PipelineProgress& progress) {
  const auto& p = spec.pipeline.frontend;
  const bool whole = spec.pipeline.whole_files;
  io::WriteSpec ws;
  ws.shape = whole ? Shape{0, p.n_mels} : Shape{0, p.long_segments, p.short_segments, p.n_mels, p.frames};
  ws.appendable = true;
  ws.ragged = whole;
  ws.dtype = spec.dtype;
  ws.storage = spec.gzip ? io::WriteStorage::gzip : io::WriteStorage::chunked;
  ws.class_names = spec.class_names;
  ws.sample_rate = double(p.sample_rate);
  ws.hop_length = p.hop_length;
  ws.attributes = frontend_attributes(p);
  const bool has_leak = !entries.empty() && std::all_of(entries.begin(), entries.end(), [](const auto& e) {
    return e.leak == 0 || e.leak == 1;
  });
  std::vector<fs::path> paths;
  for (const auto& e : entries) paths.push_back(e.source);

  FeatureFileResult r;
  FeaturePipeline pipeline(spec.pipeline);
  write_file_atomic(out, [&](const fs::path& tmp) {
    io::H5Writer w(tmp.string(), ws);
    std::vector<std::int64_t> labels;
    std::vector<std::uint8_t> leak;
    std::vector<std::string> names;
    std::vector<std::int64_t> lengths;
    const auto record = [&](std::span<const std::size_t> good) {
      for (auto g : good) {
        labels.push_back(entries[g].label);
        if (has_leak) leak.push_back(std::uint8_t(entries[g].leak));
        names.push_back(entries[g].name);
        r.written.push_back(g);
      }
    };
    if (whole) {
      r.outcomes = pipeline.run_utterances(
          paths,
          [&](std::span<const std::size_t> good, std::span<const std::int64_t> frames, const float* values) {
            std::int64_t total = 0;
            for (const std::int64_t f : frames) total += f;
            w.append(total, values);
            lengths.insert(lengths.end(), frames.begin(), frames.end());
            record(good);
          },
          progress);
    } else {
      r.outcomes = pipeline.run(
          paths,
          [&](std::span<const std::size_t> good, const float* values) {
            w.append(std::int64_t(good.size()), values);
            record(good);
          },
          progress);
    }
    if (w.rows() == 0) {
      const auto bad = std::find_if(r.outcomes.begin(), r.outcomes.end(), [](const auto& o) { return !o.ok; });
      MF_CHECK(bad != r.outcomes.end(), "{}: no audio files to write", out.string());
      MF_THROW("{}: none of its {} audio files could be used (the first, {}: {})", out.string(), entries.size(),
               paths[std::size_t(bad - r.outcomes.begin())].string(), bad->reason);
    }
    if (whole) w.finish_utterances(lengths, labels, leak, names);
    else w.finish(labels, leak, names);
  });
  r.times = pipeline.times();
  return r;
}

}  // namespace mf::audio
