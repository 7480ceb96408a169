// The trainer behind `melforge train`, and the model loading shared by
// `eval`, `predict` and `export`.
//
// Run directory (run.out):
//   config.toml        the resolved configuration (every key)
//   metrics.jsonl      a line per log interval ("train"), per epoch ("epoch":
//                      phase times, bottleneck) and per evaluation ("eval")
//   checkpoints/       ckpt-<step>.h5 (the last checkpoint.keep_last) and best.h5
//   report.json        the final summary (written at the end, also after SIGINT)
//   loss.svg accuracy.svg throughput.svg
//
// Checkpoint contents (model/checkpoint.hpp's file format):
//   arrays  master, adam_m, adam_v (flat f32, ParamBuffer layout); weights
//           (the bf16/f16 working copy, when not fp32); adamw_state (the
//           device-held kernels::AdamWState, raw bytes)
//   ints    step, epoch, step_in_epoch, reader_epoch, reader_position, seed,
//           samples, best_step, bad_evals, in_mels, in_frames, classes,
//           normal_class, adamw_iteration, adamw_step, adamw_skipped_steps
//   floats  best_metric, loss_scale, lr, elapsed_s
//   strings config (TOML), precision, class_names (JSON), params (JSON: names,
//           offsets, shapes), rng (what the random streams derive from)
// There is no other RNG state: initialization and dropout derive from the seed
// (dropout: a hash of seed and optimizer iteration), shuffling from seed and
// epoch, so (weights, moments, AdamW state, reader position) is the whole state.
#pragma once

#include <cuda_runtime_api.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/device.hpp"
#include "io/dataset.hpp"
#include "io/reader.hpp"
#include "model/checkpoint.hpp"
#include "model/metrics.hpp"
#include "model/run_config.hpp"
#include "model/train_step.hpp"

namespace mf::tools {

// "auto" -> bf16 on a GPU, fp32 on the CPU.
model::Precision resolve_precision(const std::string& precision, Device dev);
io::DatasetNames dataset_names(const model::RunConfig& cfg);
model::LeakCNNConfig model_config(const model::RunConfig& cfg, std::int64_t mels, std::int64_t frames, int classes);

// Everything an evaluation pass produces.
struct EvalRun {
  model::EvalResult result;
  model::SegmentOutputs segments;
  std::optional<model::FileVote> vote;  // file-structured data only
  std::int64_t files = 0;               // files voted on
};

struct EvalOptions {
  double threshold = 0.5;
  double class_loss_weight = 1.0, leak_loss_weight = 1.0;
  std::int64_t max_segments = 0;  // 0: all; else the first N (whole files when the data has files)
};

// Runs the model over `reader` (shuffle off, last batch padded) in dataset
// order: segment metrics on the host, the file vote on the model's device in
// one launch.
EvalRun evaluate(model::TrainStep& ts, io::BatchReader& reader, const EvalOptions& o, cudaStream_t stream);

// A model rebuilt from a checkpoint for inference/export.
struct LoadedModel {
  model::RunConfig cfg;
  model::LeakCNNConfig model;
  model::Precision precision = model::Precision::fp32;
  std::vector<std::string> class_names;
  int normal_class = 0;
  std::int64_t step = 0;
  std::unique_ptr<model::TrainStep> ts;
};
// precision: "" keeps the checkpoint's; device as parse_device.
LoadedModel load_model(const std::filesystem::path& checkpoint, const std::string& device,
                       const std::string& precision, cudaStream_t stream = nullptr);

// Initial weights from a .safetensors file (PyTorch names and layouts, as
// `melforge export` writes) or a melforge checkpoint (its master weights only).
void init_weights_from(model::TrainStep& ts, const std::filesystem::path& path);

// `melforge train`: returns the process exit code (0 also after SIGINT/SIGTERM).
int run_train(model::RunConfig cfg);

}  // namespace mf::tools
