// `melforge predict --audio`: audio files -> the features the model was
// trained on, as a temporary log-mel HDF5 file that the ordinary evaluation
// path then reads. The front-end parameters come from the checkpoint (the
// trainer copies the training set's into its [frontend] keys); `--set
// frontend.KEY=V` may restate them (a different value is an error: the model
// would see features it was not trained on) or, for a checkpoint trained on
// data built elsewhere, supply them all.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "audio/feature_pipeline.hpp"
#include "audio/frontend_params.hpp"
#include "model/run_config.hpp"

namespace mf::train {

// The checkpoint's front-end with `sets` (frontend.* assignments) applied and
// checked as above; the model's input must be n_mels x frames.
audio::FrontendParams predict_frontend(const model::RunConfig& checkpoint_cfg, const std::vector<std::string>& sets,
                                       std::int64_t model_mels, std::int64_t model_frames);

// Every audio file named: a file as given, a folder's audio files
// (recursively, by extension, sorted). Throws for a path that does not exist.
std::vector<std::filesystem::path> list_audio_inputs(const std::vector<std::string>& args);

struct AudioFeatures {
  std::filesystem::path dir;            // temporary folder, removed by the destructor
  std::filesystem::path dataset;        // dir/audio.h5: row i is sources[written[i]]
  std::vector<std::filesystem::path> sources;
  std::vector<std::size_t> written;
  std::vector<audio::FileOutcome> outcomes;  // one per source
  AudioFeatures() = default;
  AudioFeatures(const AudioFeatures&) = delete;
  AudioFeatures& operator=(const AudioFeatures&) = delete;
  ~AudioFeatures();
};

std::unique_ptr<AudioFeatures> audio_features(const std::vector<std::filesystem::path>& sources,
                                              const audio::PipelineOptions& opt,
                                              const std::vector<std::string>& class_names);

// What `predict --audio` and `embed --audio` share: the features of the audio
// files and folders `inputs` for a model trained with `checkpoint_cfg`
// (frontend.* `sets` applied), in a temporary dataset; each skipped file is
// reported on stderr as "melforge TOOL: skipped PATH: reason", then a count.
struct AudioInputOptions {
  std::vector<std::string> sets;
  bool pad = false;
  int threads = 0;
  std::string device = "auto";
};
std::unique_ptr<AudioFeatures> audio_features_for_model(const std::vector<std::string>& inputs,
                                                        const model::RunConfig& checkpoint_cfg,
                                                        std::int64_t model_mels, std::int64_t model_frames,
                                                        const std::vector<std::string>& class_names,
                                                        const AudioInputOptions& opt, std::string_view tool);

}  // namespace mf::train
