#include "train/predict_audio.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "audio/feature_file.hpp"
#include "audio/source_files.hpp"
#include "engine/device.hpp"
#include "engine/error.hpp"
#include "train/run_setup.hpp"

namespace fs = std::filesystem;

namespace mf::train {


audio::FrontendParams predict_frontend(const model::RunConfig& checkpoint_cfg, const std::vector<std::string>& sets,
                                       std::int64_t model_mels, std::int64_t model_frames) {
  model::RunConfig c = checkpoint_cfg;
  for (const auto& s : sets) {
    MF_CHECK(s.rfind("frontend.", 0) == 0, "--set {}: predict takes frontend.* keys only (the model's own settings "
                                           "come from the checkpoint)", s);
    model::apply_override(c, s);
  }
  const bool recorded = checkpoint_cfg.fe_sample_rate > 0;
  MF_CHECK(c.fe_sample_rate > 0,
           "the checkpoint does not record how its training features were made (data built outside melforge "
           "data build): give them with --set frontend.sample_rate=... frontend.n_fft=... frontend.hop_length=... "
           "frontend.n_mels=... frontend.frames=... frontend.long=... frontend.short=... (and fmin, fmax)");
  if (recorded) {
    const std::string diff = audio::first_difference(frontend_of(checkpoint_cfg), frontend_of(c));
    MF_CHECK(diff.empty(),
             "--set frontend.*: the checkpoint's model was trained on other features ({}: trained vs given); other "
             "features would silently change its predictions",
             diff);
  }
  audio::FrontendParams p = frontend_of(c);
  p.validate();
  MF_CHECK(p.n_mels == model_mels && p.frames == model_frames,
           "front-end: {} mels x {} frames, but the model takes {} x {}", p.n_mels, p.frames, model_mels, model_frames);
  return p;
}

std::vector<fs::path> list_audio_inputs(const std::vector<std::string>& args) {
  std::vector<fs::path> out;
  for (const auto& a : args) {
    const fs::path p(a);
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> found;
      for (const auto& e : fs::recursive_directory_iterator(p, fs::directory_options::follow_directory_symlink))
        if (!e.is_directory() && audio::has_audio_extension(e.path())) found.push_back(e.path());
      MF_CHECK(!found.empty(), "--audio {}: no audio files in this folder (.wav, .flac, .ogg, ...)", a);
      std::sort(found.begin(), found.end());
      out.insert(out.end(), found.begin(), found.end());
    } else {
      MF_CHECK(fs::exists(p, ec), "--audio {}: no such file or folder", a);
      out.push_back(p);
    }
  }
  return out;
}

AudioFeatures::~AudioFeatures() {
  std::error_code ec;
  if (!dir.empty()) fs::remove_all(dir, ec);
}

std::unique_ptr<AudioFeatures> audio_features(const std::vector<fs::path>& sources, const audio::PipelineOptions& opt,
                                              const std::vector<std::string>& class_names) {
  auto f = std::make_unique<AudioFeatures>();
  f->sources = sources;
  std::error_code ec;
  fs::path base = fs::temp_directory_path(ec);
  if (ec) base = ".";
  for (int i = 0;; ++i) {
    f->dir = base / fmt::format("melforge-predict-{}-{}", getpid(), i);
    if (fs::create_directory(f->dir, ec)) break;
    MF_CHECK(i < 100 && !ec, "cannot make a temporary folder under {}: {}", base.string(), ec.message());
  }
  f->dataset = f->dir / "audio.h5";
  std::vector<audio::FeatureFileEntry> entries;
  for (const auto& s : sources) entries.push_back({s, s.string(), 0, -1});
  audio::FeatureFileSpec spec;
  spec.class_names = class_names;
  spec.dtype = DType::f32;
  spec.pipeline = opt;
  auto r = audio::write_feature_file(f->dataset, entries, spec);
  f->written = std::move(r.written);
  f->outcomes = std::move(r.outcomes);
  return f;
}

std::unique_ptr<AudioFeatures> audio_features_for_model(const std::vector<std::string>& inputs,
                                                        const model::RunConfig& checkpoint_cfg,
                                                        std::int64_t model_mels, std::int64_t model_frames,
                                                        const std::vector<std::string>& class_names,
                                                        const AudioInputOptions& opt, std::string_view tool) {
  audio::PipelineOptions po;
  po.frontend = predict_frontend(checkpoint_cfg, opt.sets, model_mels, model_frames);
  po.pad = opt.pad;
  po.threads = opt.threads;
  po.device = parse_device(opt.device);
  const auto sources = list_audio_inputs(inputs);
  auto feats = audio_features(sources, po, class_names);
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < feats->outcomes.size(); ++i)
    if (!feats->outcomes[i].ok) {
      fmt::print(stderr, "melforge {}: skipped {}: {}\n", tool, sources[i].string(), feats->outcomes[i].reason);
      ++bad;
    }
  if (bad) fmt::print(stderr, "melforge {}: {} of {} audio files skipped (no row in --out)\n", tool, bad, sources.size());
  return feats;
}

}  // namespace mf::train
