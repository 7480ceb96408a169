// A training run's checkpoints: what one holds, writing it from the live
// state, reading it back, and the checks between a checkpoint and a model.
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

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/reader.hpp"
#include "model/checkpoint.hpp"
#include "model/model_config.hpp"
#include "model/run_config.hpp"
#include "model/train_step.hpp"
#include "train/early_stopping.hpp"

namespace mf::train {

// Where a run stands between two optimizer steps.
struct RunState {
  std::int64_t step = 0;           // optimizer steps done
  std::int64_t epoch = 0;          // epoch of the next step
  std::int64_t step_in_epoch = 0;  // index of the next step in its epoch
  std::int64_t samples = 0;        // training samples consumed
  BestState best;                  // best-checkpoint selection and early stopping
  double elapsed_s = 0;            // wall time of this run's earlier processes
};

// The checkpoint of `ts` at `s` (synchronizes `stream` first).
model::Checkpoint make_run_checkpoint(model::TrainStep& ts, const model::RunConfig& cfg, const RunState& s,
                                      const io::ReaderState& reader, const std::vector<std::string>& class_names,
                                      int normal_class, cudaStream_t stream);
// Weights, moments and optimizer state of `c` into `ts` (check_same_model first).
void restore_run_checkpoint(model::TrainStep& ts, const model::Checkpoint& c, cudaStream_t stream);
// The loop state a checkpoint records.
RunState run_state_of(const model::Checkpoint& c);

// The checkpoint a run continues from: none for a new run (then run.out must
// not hold an earlier run's checkpoints); --resume auto: the newest readable
// one in the run directory, if any; --resume PATH: that file, or the newest in
// that directory. Throws with the reason when --resume names nothing usable.
std::optional<model::FoundCheckpoint> find_resume_checkpoint(const model::RunConfig& cfg,
                                                             const std::filesystem::path& ckpt_dir);
// A resumed run's configuration: the checkpoint's own (/strings/config) with
// the keys the user gave again (`given_keys`: a --config file's keys, flags,
// --set) taken from `given`; run.out and run.resume are always the given ones.
model::RunConfig resumed_config(const model::FoundCheckpoint& found, const model::RunConfig& given,
                                const std::vector<std::string>& given_keys);
// "key: old -> new" for every setting of `now` that differs from the saved
// run's (run.resume and run.out left out).
std::vector<std::string> resume_differences(const model::RunConfig& saved, const model::RunConfig& now);

// Model shape checks between a checkpoint and a model built from the data;
// `what` names the source in the message ("--resume", "--init-from", ...).
// A CNN stack's checkpoint must also describe the same layers (model.arch,
// model.layers): two stacks can have the same parameter count and differ in a
// stride, a pool or an activation (dropout probabilities may differ).
void check_same_model(const model::Checkpoint& c, const model::TrainStep& ts, const std::string& what);
// The layer check of check_same_model alone (--init-from: the classes, and
// so the heads, may differ).
void check_same_layers(const model::Checkpoint& c, const model::TrainStep& ts, const std::string& what);
// The same layer check against a stack description's "layers" JSON array (as
// `melforge export` writes in model_args); `source` names the file.
void check_same_layers(const nlohmann::json& layers, const model::TrainStep& ts, const std::string& what,
                       const std::string& source);

// What a checkpoint says about its model, each value checked: a damaged or
// hand-edited file gets an error naming it, the entry, what was expected and
// what was found.
// The configuration the checkpoint's run saved (/strings/config); its errors
// name the checkpoint and the entry.
model::RunConfig checkpoint_config(const model::Checkpoint& c);
model::Precision checkpoint_precision(const model::Checkpoint& c);
// checkpoint_model also checks the declared sizes against these bounds and the
// parameter count they imply against /arrays/master before returning.
inline constexpr std::int64_t kMaxCheckpointInputSide = std::int64_t(1) << 20;    // mel bins or frames
inline constexpr std::int64_t kMaxCheckpointInputValues = std::int64_t(1) << 24;  // mels x frames of a segment
inline constexpr std::int64_t kMaxCheckpointClasses = std::int64_t(1) << 24;
model::ModelConfig checkpoint_model(const model::Checkpoint& c, const model::RunConfig& cfg);
std::vector<std::string> checkpoint_class_names(const model::Checkpoint& c, int classes);

}  // namespace mf::train
