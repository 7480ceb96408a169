// RunConfig: every setting of `melforge train`, with one table of keys that
// drives TOML loading, `--set key=value` overrides, validation, the resolved
// TOML written into the run directory, and the help text. A key is
// "section.name" (the TOML table and the field), e.g. "optim.lr".
//
// Errors name the key and what is accepted: an unknown key gets a "did you
// mean", a wrong type says which type was expected, an impossible value says
// the accepted range or choices.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/named_enum.hpp"
#include "io/reader.hpp"
#include "kernels/adamw.hpp"
#include "model/cnn_layers.hpp"
#include "model/model_config.hpp"

namespace mf::model {

// The words of the choice keys live in these tables (and kLossTypeNames,
// kPrecisionNames in model/model_config.hpp, kResidencyNames in
// io/reader.hpp): the configuration parses them into enums once, and
// everything downstream switches on the enum.
// model.heads (model/heads.hpp); auto is resolved from the training data.
enum class Heads : std::uint8_t { automatic, class_only, class_and_leak };
inline constexpr NamedEnum<Heads> kHeadsNames[] = {
    {Heads::automatic, "auto"}, {Heads::class_only, "class"}, {Heads::class_and_leak, "class+leak"}};
// model.input_norm: none, or instance normalisation of each mel band (kernels/instance_norm.hpp).
enum class InputNorm : std::uint8_t { none, instance };
inline constexpr NamedEnum<InputNorm> kInputNormNames[] = {{InputNorm::none, "none"},
                                                           {InputNorm::instance, "instance"}};
// optim.schedule after warmup (kernels/adamw.hpp).
inline constexpr NamedEnum<kernels::LrSchedule> kLrScheduleNames[] = {{kernels::LrSchedule::cosine, "cosine"},
                                                                      {kernels::LrSchedule::linear, "linear"},
                                                                      {kernels::LrSchedule::constant, "constant"}};
// log.progress (train/progress.hpp): auto is a live line on a terminal, plain lines otherwise.
// dist.reduce: how a data-parallel job combines its processes' gradients
// (docs/training.md, "Several processes"): `ordered`, every micro-batch's
// gradient gathered and added in one process's order (bit-identical to one
// process); `fast`, each process's accumulated gradient summed by the
// library's all-reduce (fewer bytes; the same bits run to run at one world
// size, not one process's).
enum class DistReduce : std::uint8_t { ordered, fast };
inline constexpr NamedEnum<DistReduce> kDistReduceNames[] = {{DistReduce::ordered, "ordered"},
                                                            {DistReduce::fast, "fast"}};
// dist.transport: how GPU processes exchange gradients (dist/collectives.hpp):
// `auto`, NCCL where built and each process has its own GPU, else MPI through
// host memory; `nccl`; `mpi`. CPU processes always use MPI.
enum class DistTransport : std::uint8_t { automatic, nccl, mpi };
inline constexpr NamedEnum<DistTransport> kDistTransportNames[] = {
    {DistTransport::automatic, "auto"}, {DistTransport::nccl, "nccl"}, {DistTransport::mpi, "mpi"}};
enum class ProgressMode : std::uint8_t { automatic, tty, plain, off };
inline constexpr NamedEnum<ProgressMode> kProgressModeNames[] = {
    {ProgressMode::automatic, "auto"}, {ProgressMode::tty, "tty"}, {ProgressMode::plain, "plain"},
    {ProgressMode::off, "off"}};

struct RunConfig {
  // [data]
  std::string train_path;        // data.train
  std::string val_path;          // data.val
  std::string test_path;         // data.test (optional)
  std::string segments_name = "segments";
  std::string labels_name = "labels";
  std::string leak_name = "leak";
  std::int64_t normal_class = -1;  // leak = (label != normal_class) when /leak is absent; -1: the class named "normal", else 0
  std::int64_t per_class = 0;      // speaker-balanced batches: segments per class per batch (0: off)
  std::int64_t crop_frames = 0;    // whole utterances: frames per crop (a new random crop each epoch); 0: unset

  // [model]
  // model.arch: leakcnn, cnn (the layers below) or a preset of
  // model/cnn_layers.hpp, held as arch = cnn with the preset's name.
  Arch arch = Arch::leakcnn;
  std::string arch_preset;       // "" unless model.arch names a preset
  std::vector<CnnLayer> layers;  // arch = cnn: the stack (model/cnn_layers.hpp)
  std::vector<std::int64_t> channels{32, 64, 128};
  std::vector<std::int64_t> pools{2, 2, 2};
  std::int64_t kernel = 3;
  std::int64_t dense = 256;
  double dropout = 0.0;
  std::int64_t num_classes = 0;  // 0: from the dataset's labels
  // auto | class | class+leak (model/heads.hpp). A run records the resolved
  // value (never auto) in its config.toml and checkpoints.
  Heads heads = Heads::automatic;
  std::int64_t embedding = 0;         // 0: auto (none with softmax; 256 on leakcnn with a metric loss)
  InputNorm input_norm = InputNorm::none;

  // [loss]
  LossType loss_type = LossType::softmax;
  double margin = 0.2;        // AM/AAM-softmax's margin m
  double margin_scale = 30.0; // AM/AAM-softmax's scale s (not the fp16 loss scale)

  // [train]
  std::int64_t epochs = 10;
  std::int64_t batch_size = 0;  // 0: auto, resolved by the trainer from the training set (train/batch_size.hpp)
  std::int64_t grad_accum = 1;
  std::optional<Precision> precision;  // nullopt: auto (bf16 on a GPU, fp32 on the CPU)
  std::string device = "auto";     // auto | cpu | cuda | cuda:N
  std::int64_t seed = 0;
  std::int64_t limit_batches = 0;   // optimizer steps per epoch at most (0: the whole epoch)
  std::int64_t overfit_batches = 0; // >0: train (and validate) on the same first N steps' batches, unshuffled
  bool fast_dev_run = false;        // 1 batch of train and val, 1 epoch, no checkpoints kept
  bool cuda_graphs = true;
  bool drop_last = true;
  // Parameter names or prefixes that do not train (model/param_buffer.hpp's
  // name_matches; checked against the model when it is built); empty: none.
  std::vector<std::string> freeze;
  // dist.timeout: seconds a process of a data-parallel job waits for the
  // others in one exchange before it ends the job (dist/world.hpp).
  double dist_timeout = 300;
  // dist.bucket_mb: dist.reduce = fast sums the gradient in buckets of at
  // most this many MiB of f32 values, each started as soon as the backward
  // has written it (model/gradient_buckets.hpp).
  double dist_bucket_mb = 4;
  DistReduce dist_reduce = DistReduce::ordered;
  DistTransport dist_transport = DistTransport::automatic;

  // [optim]
  double lr = 1e-3;
  kernels::LrSchedule schedule = kernels::LrSchedule::cosine;
  std::int64_t warmup_steps = 0;
  double min_lr_ratio = 0.0;
  double weight_decay = 0.01;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double clip_norm = 1.0;  // 0: no clipping
  double label_smoothing = 0.0;
  double class_loss_weight = 1.0;
  double leak_loss_weight = 1.0;
  double initial_loss_scale = 65536.0;  // fp16: the dynamic loss scale's start
  std::int64_t loss_scale_window = 2000;

  // [reader]
  std::int64_t reader_threads = 2;
  std::int64_t reader_ring = 4;
  io::Residency gpu_cache = io::Residency::automatic;
  double gpu_cache_fraction = 0.5;

  // [eval]
  std::int64_t val_every = 1;  // epochs (eval.every)
  std::int64_t eval_crops = 1;        // whole utterances: evaluation crops per utterance; 0: full (eval.crops = full)
  std::int64_t eval_crop_frames = 0;  // their frames; 0: data.crop_frames
  double threshold = 0.5;      // leak decision threshold
  // Early stopping / best checkpoint; auto: val.file.macro_f1, or val.eer for
  // an embedding model (a metric loss), resolved by the trainer.
  std::string metric = "auto";
  std::int64_t patience = 0;   // 0: no early stopping
  double min_delta = 0.0;

  // [checkpoint]
  std::int64_t keep_last = 3;
  std::int64_t checkpoint_every = 1;  // epochs

  // [log]
  std::int64_t log_interval = 50;  // steps
  ProgressMode progress = ProgressMode::automatic;

  // [augment] On-device augmentation of training batches (kernels/augment.hpp),
  // never of evaluation batches. Off by default (every count/width 0).
  std::int64_t aug_time_masks = 0;
  std::int64_t aug_time_mask_width = 0;
  std::int64_t aug_freq_masks = 0;
  std::int64_t aug_freq_mask_width = 0;
  std::int64_t aug_time_shift = 0;
  double aug_gain_db = 0;
  std::string aug_noise;                        // HDF5 file of noise segments (same mels x frames); "" = none
  std::vector<double> aug_noise_snr_db{0, 20};  // [lo, hi] dB
  double aug_db_per_unit = 0;                   // dB per unit of the data's values; 0: from the data (1 or 10)
  double aug_mixup_alpha = 0;                   // mixup's Beta(alpha, alpha) (kernels/mixup.hpp); 0 = off

  // [frontend] How the training data's log-mel segments were made from audio
  // (audio/frontend_params.hpp): the trainer copies them from the training
  // set's attributes (`melforge data build` writes them), so checkpoints carry
  // them and `melforge predict --audio` computes the same features.
  // sample_rate = 0: not known (data built elsewhere without the attributes).
  std::int64_t fe_sample_rate = 0;
  std::int64_t fe_n_fft = 0;
  std::int64_t fe_hop_length = 0;
  std::int64_t fe_n_mels = 0;
  double fe_fmin = 0;
  double fe_fmax = 0;  // 0: sample_rate / 2
  std::int64_t fe_frames = 0;
  std::int64_t fe_long = 0;
  std::int64_t fe_short = 0;

  // [run]
  std::string out = "runs/leakcnn";
  std::string resume;     // "" | auto | PATH
  std::string init_from;  // a .safetensors (or checkpoint) to start from
  std::string profile_steps;  // "A:B": cudaProfilerStart before step A, Stop after step B-1

  // Derived from profile_steps (valid after validate()); -1 when unset.
  std::int64_t profile_begin() const;
  std::int64_t profile_end() const;
  // "max" for metrics where larger is better, "min" for losses.
  bool metric_higher_is_better() const;
};

// model.arch as the user wrote it: leakcnn, cnn or the preset's name.
std::string_view arch_name(const RunConfig& cfg);

// What a key is, for help text and error messages.
struct ConfigKeyInfo {
  std::string key;       // "optim.lr"
  std::string type;      // "string", "integer", "float", "boolean", "integer list"
  std::string accepted;  // "> 0", "one of cosine, linear, constant", ...
  std::string help;
};
const std::vector<ConfigKeyInfo>& config_keys();

// Loads a TOML file over `cfg` (only the keys present change; `keys`, when
// given, gets each of them). Throws mf::Error naming the file, the key and
// what is accepted.
void load_toml_file(RunConfig& cfg, const std::filesystem::path& path, std::vector<std::string>* keys = nullptr);
// Same from TOML text (`origin` names it in messages).
void load_toml_string(RunConfig& cfg, std::string_view text, std::string_view origin);
// The configuration a run saved (its config.toml, a checkpoint's
// /strings/config), over the defaults, with model.heads resolved: runs saved
// before the key existed (or by a trainer that left it auto) trained both
// heads, so a saved configuration without the key, or with auto, reads as
// heads = class+leak (where plain loading would leave auto).
RunConfig load_saved_config(std::string_view text, std::string_view origin);

// Applies one override "key=value". The value is parsed as TOML when it can be
// (numbers, true/false, [1, 2]); otherwise it is taken as a string.
// Returns the key set.
std::string apply_override(RunConfig& cfg, std::string_view assignment);
// Sets one key from text (the CLI's plain flags use this).
void set_key(RunConfig& cfg, std::string_view key, std::string_view value);

// Checks ranges and choices across keys; throws mf::Error naming the key.
// With model.heads = class, an eval.metric of the leak head is an error.
void validate(const RunConfig& cfg);

// The resolved configuration as TOML (every key), and back.
std::string to_toml(const RunConfig& cfg);
// Every key and its value as TOML text ("optim.lr", "0.001"), in the table's order.
std::vector<std::pair<std::string, std::string>> config_values(const RunConfig& cfg);
// Sets `key` of dst to src's value (model.arch: the architecture and the preset).
void copy_key(RunConfig& dst, const RunConfig& src, std::string_view key);
// "key: old -> new" for every key whose value differs, in the table's order.
std::vector<std::string> config_differences(const RunConfig& before, const RunConfig& after);

// The closest known keys to `key` (for "did you mean"); empty when none is close.
std::vector<std::string> suggest_keys(std::string_view key);

// The names accepted by eval.metric: every name, or those a model with (or
// without) the leak head offers.
const std::vector<std::string>& metric_names();
std::vector<std::string> metric_names(bool leak_head);
// True for the metrics of the leak head (val.*.leak_auc).
bool is_leak_metric(std::string_view name);

}  // namespace mf::model
