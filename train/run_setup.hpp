// What a run configuration means for each component: the precision on the
// chosen device, the dataset names, the LeakCNN shape, the training step's
// and the readers' configurations. Pure translations, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "audio/frontend_params.hpp"
#include "engine/device.hpp"
#include "engine/dtype.hpp"
#include "io/dataset.hpp"
#include "io/reader.hpp"
#include "model/model_config.hpp"
#include "model/run_config.hpp"
#include "model/train_step.hpp"

namespace mf::train {

// nullopt (auto) -> bf16 on a GPU, fp32 on the CPU; otherwise the precision given.
model::Precision resolve_precision(std::optional<model::Precision> precision, Device dev);
io::DatasetNames dataset_names(const model::RunConfig& cfg);
// The same for evaluation data (validation, test, eval, embed, verify): whole
// utterances read as eval.crops crops of eval.crop_frames (else
// data.crop_frames) each.
io::DatasetNames eval_dataset_names(const model::RunConfig& cfg);
// Whole-utterance evaluation data (opened with eval_dataset_names) against
// the model that evaluates it: crops of another length than the model's
// (eval.crop_frames, --crop-frames) or whole utterances (eval.crops = full,
// --crops full) need a stack ending in global or attentive pooling; else an
// error that starts with `what` and says what to set. Other data: nothing.
void check_whole_utterance_eval(const model::ModelConfig& mc, const io::DatasetInfo& in, const std::string& what);
// The LeakCNN for inputs of mels x frames and `classes` classes, with the
// heads of cfg.heads (resolved: class or class+leak); throws when the
// configuration does not make a valid model for them.
model::ModelConfig model_config(const model::RunConfig& cfg, std::int64_t mels, std::int64_t frames, int classes);
// total_steps sizes the learning-rate schedule (at least 1).
model::TrainConfig step_config(const model::RunConfig& cfg, const model::ModelConfig& mc, model::Precision p,
                               std::int64_t total_steps);
// train: shuffled (unless --overfit-batches), last batch dropped per
// train.drop_last; evaluation: dataset order, last batch padded.
// The [augment] keys as the step's augmentation (model::TrainConfig::augment
// and augment_noise): the noise file is read whole (its segments must be the
// training set's mels x frames); db_per_unit from the key, else the training
// set's attribute, else 1.
void set_augmentation(model::TrainConfig& tc, const model::RunConfig& cfg, const io::DatasetInfo& train);
// The augmentation a step runs, for the run's start line: "off", or each
// part on ("2 time masks of <= 8 frames, mixup alpha 0.4").
std::string augmentation_summary(const model::TrainConfig& tc);

// The [frontend] keys from the training set's front-end attributes (a set
// built by `melforge data build`): filled in where the configuration leaves
// them unset (sample_rate = 0); where it sets them, each must agree with the
// data, or the error names the key, both values and the file. Data without
// the attributes leaves the keys as configured.
void resolve_frontend(model::RunConfig& cfg, const io::DatasetInfo& train);
// The [frontend] keys as the front-end's parameters, and back.
audio::FrontendParams frontend_of(const model::RunConfig& cfg);
void set_frontend(model::RunConfig& cfg, const audio::FrontendParams& p);
io::ReaderConfig reader_config(const model::RunConfig& cfg, Device dev, DType dtype, bool train);

}  // namespace mf::train
