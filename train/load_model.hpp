// Models rebuilt from files: a checkpoint for inference and export (`eval`,
// `predict`, `export`), and initial weights for a new run (--init-from).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model/model_config.hpp"
#include "model/run_config.hpp"
#include "model/train_step.hpp"

namespace mf::train {

// A model rebuilt from a checkpoint for inference/export.
struct LoadedModel {
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

// Initial weights from a .safetensors file (PyTorch names and layouts, as
// `melforge export` writes) or a melforge checkpoint (its master weights only).
void init_weights_from(model::TrainStep& ts, const std::filesystem::path& path);

}  // namespace mf::train
