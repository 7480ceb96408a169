// Models rebuilt from files: a checkpoint for inference and export (`eval`,
// `predict`, `embed`, `verify`, `export`) with the dataset reader of an
// inference pass, and initial weights for a new run (--init-from).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "io/reader.hpp"
#include "model/model_config.hpp"
#include "model/run_config.hpp"
#include "model/train_step.hpp"

namespace mf::train {

// A model rebuilt from a checkpoint for inference/export.
struct LoadedModel {
  std::string source;  // the checkpoint's path, for messages
  model::RunConfig cfg;
  model::ModelConfig model;
  model::Precision precision = model::Precision::fp32;
  std::vector<std::string> class_names;
  int normal_class = 0;
  std::int64_t step = 0;
  std::unique_ptr<model::TrainStep> ts;
};
// precision: "" keeps the checkpoint's; device as parse_device. Every entry
// the model is built from is checked; a bad one is an error naming the file.
LoadedModel load_model(const std::filesystem::path& checkpoint, const std::string& device,
                       const std::string& precision, cudaStream_t stream = nullptr);

// A dataset for an inference pass with lm, opened with the checkpoint's
// dataset names; its segments must be the model's input size (else an error
// that starts with `what`, e.g. "--data x.h5").
std::shared_ptr<const io::Dataset> open_model_data(const LoadedModel& lm, const std::string& path,
                                                   const std::string& what);
// The reader of an inference pass (eval, predict, embed, verify): dataset
// order, the last batch padded, the checkpoint's reader threads, on the
// model's device in its activation dtype, resident when it fits.
io::ReaderConfig inference_reader(const LoadedModel& lm, std::int64_t batch_size);

// What --init-from did, by parameter name.
struct InitFromReport {
  std::vector<std::string> loaded;         // the source's values
  std::vector<std::string> reinitialised;  // "name (why)": a head of another shape, or absent there
  std::vector<std::string> unused;         // the source's tensors this model has no parameter for
};
// Initial weights from a .safetensors file (PyTorch names and layouts, as
// `melforge export` writes) or a melforge checkpoint (its master weights
// only): every parameter whose name and PyTorch shape the source has is
// loaded. A head (ParamInfo::head: class_head.*, leak_head.*, loss.*) of
// another shape, or absent there, keeps its initialisation from the run's
// seed (a fresh run's values: new classes, new speakers); a trunk parameter
// that differs or is absent is an error naming it and both shapes, as is a
// CNN stack with other layers. The moments stay zero.
InitFromReport init_weights_from(model::TrainStep& ts, const std::filesystem::path& path);

}  // namespace mf::train
