#include "model/run_config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <toml++/toml.h>
#include <variant>

#include "engine/error.hpp"
#include "engine/utf8.hpp"
#include "io/dataset.hpp"

namespace mf::model {

namespace {

// A key whose value is one of a set of words, held as an enum (or, for
// model.arch, an enum and a preset name): `set` parses the word once (false
// for a word it does not know), `get` writes it back.
struct Choice {
  std::function<std::string_view(const RunConfig&)> get;
  std::function<bool(RunConfig&, std::string_view)> set;
  std::string choices;  // "a, b, c"
};

using Member = std::variant<std::string RunConfig::*, std::int64_t RunConfig::*, double RunConfig::*,
                            bool RunConfig::*, std::vector<std::int64_t> RunConfig::*,
                            std::vector<double> RunConfig::*, std::vector<CnnLayer> RunConfig::*,
                            std::vector<std::string> RunConfig::*, Choice>;

// A check returns an empty string when the value is fine, else what is accepted.
using Check = std::function<std::string(const RunConfig&)>;

struct Field {
  std::string key;
  Member member;
  std::string accepted;
  std::string help;
  Check check;  // may be empty
  // An integer key that also takes a word, held as 0 and written back as the
  // word: "auto" (the trainer resolves it from the data), "full" (eval.crops).
  std::string_view zero_word;
};

constexpr std::string_view kAuto = "auto";

std::string type_name(const Member& m) {
  switch (m.index()) {
    case 0: return "string";
    case 1: return "integer";
    case 2: return "float";
    case 3: return "boolean";
    case 4: return "integer list";
    case 5: return "float list";
    case 6: return "list of layer tables";
    case 7: return "string list";
    default: return "string";
  }
}

// std::visit over a field's member pointer: fn(pointer) for every kind but
// Choice (callers handle a Choice first), which returns R{}.
template <class R = void, class Fn> R visit_pointer(const Member& member, Fn&& fn) {
  return std::visit(
      [&](const auto& m) -> R {
        if constexpr (std::is_same_v<std::decay_t<decltype(m)>, Choice>)
          return R();
        else
          return fn(m);
      },
      member);
}

template <class T> Check at_least(T RunConfig::*m, T lo) {
  return [m, lo](const RunConfig& c) { return c.*m >= lo ? std::string{} : fmt::format(">= {}", lo); };
}
// Integer keys the trainer narrows to int / int32 (sizes, counts, steps) are
// capped here, so no value wraps on the way.
constexpr std::int64_t kMaxInt32 = 2147483647;

Check positive_int(std::int64_t RunConfig::*m) {
  return [m](const RunConfig& c) {
    if (c.*m <= 0) return std::string("an integer > 0");
    return c.*m <= kMaxInt32 ? std::string{} : fmt::format("an integer in [1, {}]", kMaxInt32);
  };
}
Check int_range(std::int64_t RunConfig::*m, std::int64_t lo, std::int64_t hi) {
  return [=](const RunConfig& c) {
    return c.*m >= lo && c.*m <= hi ? std::string{} : fmt::format("an integer in [{}, {}]", lo, hi);
  };
}
// An HDF5 dataset's name or path: something other than slashes ("/" alone is the root group).
Check dataset_name(std::string RunConfig::*m) {
  return [m](const RunConfig& c) {
    return (c.*m).find_first_not_of('/') != std::string::npos ? std::string{}
                                                                : std::string("an HDF5 dataset name (not empty)");
  };
}
Check positive_float(double RunConfig::*m) {
  return [m](const RunConfig& c) {
    return std::isfinite(c.*m) && c.*m > 0 ? std::string{} : std::string("a finite number > 0");
  };
}
Check float_range(double RunConfig::*m, double lo, double hi, bool hi_open) {
  return [=](const RunConfig& c) {
    const double v = c.*m;
    const bool ok = std::isfinite(v) && v >= lo && (hi_open ? v < hi : v <= hi);
    return ok ? std::string{} : fmt::format("a number in [{}, {}{}", lo, hi, hi_open ? ")" : "]");
  };
}
template <class E> Choice choice(E RunConfig::*m, std::span<const NamedEnum<E>> names) {
  return Choice{[m, names](const RunConfig& c) { return enum_name(names, c.*m); },
                [m, names](RunConfig& c, std::string_view word) {
                  const std::optional<E> v = find_enum(names, word);
                  if (v) c.*m = *v;
                  return v.has_value();
                },
                enum_choices(names)};
}

// train.precision: auto (nullopt) or a precision's name.
Choice precision_choice() {
  return Choice{[](const RunConfig& c) { return c.precision ? precision_name(*c.precision) : kAuto; },
                [](RunConfig& c, std::string_view word) {
                  if (word == kAuto) {
                    c.precision.reset();
                    return true;
                  }
                  const auto p = find_enum<Precision>(kPrecisionNames, word);
                  if (p) c.precision = *p;
                  return p.has_value();
                },
                fmt::format("auto, {}", enum_choices<Precision>(kPrecisionNames))};
}

// model.arch: leakcnn, cnn, or a preset (arch = cnn with arch_preset set).
Choice arch_choice() {
  return Choice{[](const RunConfig& c) { return arch_name(c); },
                [](RunConfig& c, std::string_view word) {
                  const auto& presets = cnn_preset_names();
                  if (word == "leakcnn" || word == "cnn") {
                    c.arch = word == "cnn" ? Arch::cnn : Arch::leakcnn;
                    c.arch_preset.clear();
                  } else if (std::find(presets.begin(), presets.end(), word) != presets.end()) {
                    c.arch = Arch::cnn;
                    c.arch_preset = std::string(word);
                  } else {
                    return false;
                  }
                  return true;
                },
                fmt::format("leakcnn, cnn, {}", fmt::join(cnn_preset_names(), ", "))};
}

using C = RunConfig;

void add(std::vector<Field>& v, std::string key, Member m, std::string accepted, std::string help, Check check = {}) {
  v.push_back(Field{std::move(key), m, std::move(accepted), std::move(help), std::move(check), {}});
}
void add_choice(std::vector<Field>& v, std::string key, Choice c, std::string help) {
  std::string accepted = "one of " + c.choices;
  v.push_back(Field{std::move(key), std::move(c), std::move(accepted), std::move(help), {}, {}});
}

// The keys of the data files and their dataset names ([data]), in help order.
void data_fields(std::vector<Field>& v) {
  add(v, "data.train", &C::train_path, "a path to an HDF5 file", "training set (required)");
  add(v, "data.val", &C::val_path, "a path to an HDF5 file", "validation set (empty: no validation)");
  add(v, "data.test", &C::test_path, "a path to an HDF5 file", "test set, evaluated once at the end (optional)");
  add(v, "data.segments", &C::segments_name, "an HDF5 dataset name", "name of the segments dataset",
      dataset_name(&C::segments_name));
  add(v, "data.labels", &C::labels_name, "an HDF5 dataset name", "name of the labels dataset",
      dataset_name(&C::labels_name));
  add(v, "data.leak", &C::leak_name, "an HDF5 dataset name", "name of the optional 0/1 leak dataset");
  add(v, "data.normal_class", &C::normal_class, "an integer in [-1, 2147483647]",
      "class meaning 'no leak' when /leak is absent (-1: the class named normal, else 0)",
      int_range(&C::normal_class, -1, kMaxInt32));
  add(v, "data.crop_frames", &C::crop_frames, "0 or an integer in [1, 1000000]",
      "whole-utterance datasets (ragged /segments [T, n_mels] with /lengths): frames per crop; training draws a "
      "new crop of every utterance each epoch, evaluation takes the centred one; shorter utterances wrap (0: unset; "
      "required for such data)", int_range(&C::crop_frames, 0, 1000000));
  add(v, "data.per_class", &C::per_class, "0 or an integer in [2, 1024]",
      "speaker-balanced batches: each batch holds this many segments of each of batch/per_class classes, from "
      "different files where possible (the prototypical losses need it; 0: plain shuffled batches)",
      [](const C& c) {
        return c.per_class == 0 || (c.per_class >= 2 && c.per_class <= 1024) ? std::string{}
                                                                              : std::string("0 or an integer in [2, 1024]");
      });
}

// The keys of the model's shape ([model]), in help order.
void model_fields(std::vector<Field>& v) {
  add_choice(v, "model.arch", arch_choice(),
             "model: leakcnn, cnn (the layers of model.layers) or a preset CNN stack (docs/models.md)");
  add(v, "model.layers", &C::layers, "[[model.layers]] tables (docs/models.md)",
      "the CNN stack's layers in order (model.arch = cnn only): conv, residual, global_avg_pool, "
      "attentive_stats_pool, dense, dropout");
  add(v, "model.channels", &C::channels, "a non-empty list of integers > 0", "output channels of each conv block",
      [](const C& c) {
        const bool ok = !c.channels.empty() &&
                        std::all_of(c.channels.begin(), c.channels.end(),
                                    [](auto x) { return x > 0 && x <= kMaxInt32; });
        return ok ? std::string{} : fmt::format("a non-empty list of integers in [1, {}]", kMaxInt32);
      });
  add(v, "model.pools", &C::pools, "a list of integers >= 1, one per conv block", "max-pool size of each block",
      [](const C& c) {
        const bool ok = c.pools.size() == c.channels.size() &&
                        std::all_of(c.pools.begin(), c.pools.end(), [](auto x) { return x >= 1 && x <= kMaxInt32; });
        return ok ? std::string{}
                  : fmt::format("a list of {} integers >= 1 (one per entry of model.channels, at most {})",
                                c.channels.size(), kMaxInt32);
      });
  add(v, "model.kernel", &C::kernel, "an odd integer >= 1", "conv kernel size", [](const C& c) {
    return c.kernel >= 1 && c.kernel <= kMaxInt32 && c.kernel % 2 == 1
               ? std::string{}
               : fmt::format("an odd integer in [1, {}]", kMaxInt32);
  });
  add(v, "model.dense", &C::dense, "an integer > 0", "width of the dense layer", positive_int(&C::dense));
  add(v, "model.dropout", &C::dropout, "a number in [0, 1)", "dropout before the heads",
      float_range(&C::dropout, 0, 1, true));
  add(v, "model.num_classes", &C::num_classes, "0 (from the data) or an integer >= 2", "number of classes",
      [](const C& c) {
        return c.num_classes == 0 || (c.num_classes >= 2 && c.num_classes <= kMaxInt32)
                   ? std::string{}
                   : fmt::format("0 (from the data) or an integer in [2, {}]", kMaxInt32);
      });
  add(v, "model.embedding", &C::embedding, "auto or an integer in [1, 65536]",
      "a linear embedding layer of this width before the heads / metric loss; auto: none with the softmax loss, 256 "
      "on leakcnn with a metric loss (a CNN stack's last layer is its embedding)", int_range(&C::embedding, 0, 65536));
  v.back().zero_word = kAuto;
  add_choice(v, "model.input_norm", choice<InputNorm>(&C::input_norm, kInputNormNames),
             "instance: normalise each mel band of each segment over time (mean 0, variance 1) at the input");
  add_choice(v, "model.heads", choice<Heads>(&C::heads, kHeadsNames),
             "output heads: class (the classes only) or class+leak (plus the 0/1 leak head and its metrics); auto: "
             "class+leak when the training data has a leak dataset or a class named normal, class otherwise");
}

// The keys of the training loss ([loss]), in help order.
void loss_fields(std::vector<Field>& v) {
  add_choice(v, "loss.type", choice<LossType>(&C::loss_type, kLossTypeNames),
      "softmax: the class head; am_softmax / aam_softmax: cosine-margin softmax over the classes (speakers); "
      "angleproto: angular prototypical (needs data.per_class); softmaxproto: softmax plus angleproto");
  add(v, "loss.margin", &C::margin, "a number in [0, 1)", "AM/AAM-softmax's margin m",
      float_range(&C::margin, 0, 1, true));
  add(v, "loss.scale", &C::margin_scale, "a number > 0", "AM/AAM-softmax's scale s", positive_float(&C::margin_scale));
}

// The keys of the training run ([train]), in help order.
void train_fields(std::vector<Field>& v) {
  add(v, "train.epochs", &C::epochs, "an integer > 0", "number of epochs", positive_int(&C::epochs));
  add(v, "train.batch_size", &C::batch_size, "auto or an integer > 0",
      "segments per micro-batch; auto: from the training set size (train/batch_size.hpp: the largest power of "
      "two leaving enough optimizer steps per epoch, within the device's range)",
      [](const C& c) {
        const std::string e = c.batch_size == 0 ? std::string{} : positive_int(&C::batch_size)(c);
        return e.empty() ? e : "auto or " + e;
      });
  v.back().zero_word = kAuto;
  add(v, "train.grad_accum", &C::grad_accum, "an integer > 0", "micro-batches per optimizer step",
      positive_int(&C::grad_accum));
  add_choice(v, "train.precision", precision_choice(), "compute precision (auto: bf16 on a GPU, fp32 on the CPU)");
  add(v, "train.device", &C::device, "auto, cpu, cuda or cuda:N", "where to train", [](const C& c) {
    const std::string& d = c.device;
    bool ok = d == "auto" || d == "cpu" || d == "cuda" || d == "gpu";
    if (!ok && d.rfind("cuda:", 0) == 0 && d.size() > 5)
      ok = std::all_of(d.begin() + 5, d.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    return ok ? std::string{} : std::string("auto, cpu, cuda or cuda:N");
  });
  add(v, "train.seed", &C::seed, ">= 0", "seed of initialization, shuffling and dropout",
      at_least(&C::seed, std::int64_t(0)));
  add(v, "train.limit_batches", &C::limit_batches, ">= 0",
      "at most N optimizer steps (of train.grad_accum batches) per epoch (0: all)",
      at_least(&C::limit_batches, std::int64_t(0)));
  add(v, "train.overfit_batches", &C::overfit_batches, ">= 0",
      "train and validate on the same first N steps' batches, unshuffled (0: off)",
      at_least(&C::overfit_batches, std::int64_t(0)));
  add(v, "train.fast_dev_run", &C::fast_dev_run, "true or false",
      "one step of training and one batch of validation, one epoch, no checkpoints: checks the whole path quickly");
  add(v, "train.cuda_graphs", &C::cuda_graphs, "true or false", "capture the step in a CUDA graph");
  add(v, "train.drop_last", &C::drop_last, "true or false", "drop the last partial batch (else pad it)");
  add(v, "train.freeze", &C::freeze, "a list of parameter names or prefixes",
      "parameters that do not train (no AdamW step or weight decay; out of the gradient norm), e.g. [\"blocks\", "
      "\"fc\"] to train the heads alone; each entry must name a parameter or a prefix ending at a dot",
      [](const C& c) {
        const bool ok = std::none_of(c.freeze.begin(), c.freeze.end(), [](const std::string& e) { return e.empty(); });
        return ok ? std::string{} : std::string("a list of non-empty parameter names or prefixes");
      });
  add(v, "dist.timeout", &C::dist_timeout, "a finite number > 0",
      "seconds a process of a data-parallel job (mpirun, srun) waits for the others in one exchange before it ends "
      "the job, naming what it waited for", positive_float(&C::dist_timeout));
  add(v, "dist.bucket_mb", &C::dist_bucket_mb, "a finite number > 0",
      "dist.reduce = fast: the gradient is summed in buckets of at most this many MiB, each started while the "
      "backward computes the rest (smaller: more overlap, more calls)", positive_float(&C::dist_bucket_mb));
  add_choice(v, "dist.reduce", choice<DistReduce>(&C::dist_reduce, kDistReduceNames),
             "how a data-parallel job combines gradients: ordered (bit-identical to one process accumulating the "
             "same micro-batches) or fast (the library's all-reduce of each process's sum)");
  add_choice(v, "dist.transport", choice<DistTransport>(&C::dist_transport, kDistTransportNames),
             "how GPU processes exchange gradients: auto (NCCL where built and each process has its own GPU, else MPI "
             "through host memory), nccl or mpi; CPU processes always use MPI");
}

// The keys of the optimizer and the loss ([optim]), in help order.
void optim_fields(std::vector<Field>& v) {
  add(v, "optim.lr", &C::lr, "a finite number > 0", "peak learning rate", positive_float(&C::lr));
  add_choice(v, "optim.schedule", choice<kernels::LrSchedule>(&C::schedule, kLrScheduleNames),
             "learning-rate schedule after warmup");
  add(v, "optim.warmup_steps", &C::warmup_steps, "an integer in [0, 2147483647]", "linear warmup steps",
      int_range(&C::warmup_steps, 0, kMaxInt32));
  add(v, "optim.min_lr_ratio", &C::min_lr_ratio, "a number in [0, 1]", "final lr as a share of optim.lr",
      float_range(&C::min_lr_ratio, 0, 1, false));
  add(v, "optim.weight_decay", &C::weight_decay, "a number >= 0", "decoupled weight decay (not on biases)",
      float_range(&C::weight_decay, 0, 1e30, false));
  add(v, "optim.beta1", &C::beta1, "a number in [0, 1)", "AdamW beta1", float_range(&C::beta1, 0, 1, true));
  add(v, "optim.beta2", &C::beta2, "a number in [0, 1)", "AdamW beta2", float_range(&C::beta2, 0, 1, true));
  add(v, "optim.eps", &C::eps, "a finite number > 0", "AdamW epsilon", positive_float(&C::eps));
  add(v, "optim.clip_norm", &C::clip_norm, "a number >= 0", "global gradient-norm clip (0: off)",
      float_range(&C::clip_norm, 0, 1e30, false));
  add(v, "optim.label_smoothing", &C::label_smoothing, "a number in [0, 1)", "label smoothing of the class loss",
      float_range(&C::label_smoothing, 0, 1, true));
  add(v, "optim.class_loss_weight", &C::class_loss_weight, "a number >= 0", "weight of the class loss",
      float_range(&C::class_loss_weight, 0, 1e30, false));
  add(v, "optim.leak_loss_weight", &C::leak_loss_weight, "a number >= 0", "weight of the leak loss",
      float_range(&C::leak_loss_weight, 0, 1e30, false));
  add(v, "optim.loss_scale", &C::initial_loss_scale, "a finite number > 0", "initial fp16 loss scale",
      positive_float(&C::initial_loss_scale));
  add(v, "optim.loss_scale_window", &C::loss_scale_window, "an integer > 0",
      "clean fp16 steps before the loss scale doubles", positive_int(&C::loss_scale_window));
}

// The keys of the input pipeline and evaluation ([reader], [eval]), in help order.
void reader_eval_fields(std::vector<Field>& v) {
  // [reader]
  add(v, "reader.threads", &C::reader_threads, fmt::format("an integer in [1, {}]", io::kMaxReadThreads),
      "HDF5 reader threads", int_range(&C::reader_threads, 1, io::kMaxReadThreads));
  add(v, "reader.ring", &C::reader_ring, "an integer in [2, 8]", "pinned batch slots", [](const C& c) {
    return c.reader_ring >= 2 && c.reader_ring <= 8 ? std::string{} : std::string("an integer in [2, 8]");
  });
  add_choice(v, "reader.gpu_cache", choice<io::Residency>(&C::gpu_cache, io::kResidencyNames),
             "keep the dataset on the GPU (auto: when it fits in reader.gpu_cache_fraction of free memory)");
  add(v, "reader.gpu_cache_fraction", &C::gpu_cache_fraction, "a number in (0, 1]",
      "share of free GPU memory the cached dataset may take", [](const C& c) {
        return c.gpu_cache_fraction > 0 && c.gpu_cache_fraction <= 1 ? std::string{}
                                                                      : std::string("a number in (0, 1]");
      });
  // [eval]
  add(v, "eval.every", &C::val_every, "an integer > 0",
      "validate every N epochs (and after the last; voxceleb_trainer's test_interval); eval.patience counts "
      "validations", positive_int(&C::val_every));
  add(v, "eval.crops", &C::eval_crops, "an integer in [1, 1024] or full",
      "whole-utterance evaluation (validation, test, embed, verify, eval): N evenly spaced crops of eval.crop_frames "
      "per utterance, the file's embedding the L2-normalised mean of theirs (or its vote over them); full: each "
      "utterance whole, at its own length (models ending in global or attentive pooling)",
      [](const C& c) {
        return c.eval_crops >= 0 && c.eval_crops <= 1024 ? std::string{} : std::string("an integer in [1, 1024] or full");
      });
  v.back().zero_word = "full";
  add(v, "eval.crop_frames", &C::eval_crop_frames, "0 or an integer in [1, 1000000]",
      "frames of each evaluation crop of whole utterances (0: data.crop_frames; another length needs a model ending "
      "in global or attentive pooling)", int_range(&C::eval_crop_frames, 0, 1000000));
  add(v, "eval.threshold", &C::threshold, "a number in (0, 1)", "leak decision threshold on the leak probability",
      [](const C& c) {
        return c.threshold > 0 && c.threshold < 1 ? std::string{} : std::string("a number in (0, 1)");
      });
  add(v, "eval.metric", &C::metric, "auto or a validation metric name (see --help)",
      "metric for early stopping and the best checkpoint; auto: val.file.macro_f1, or val.eer with a metric loss",
      [](const C& c) {
        if (c.metric == "auto") return std::string{};
        if (c.loss_type != LossType::softmax)
          return c.metric == "val.eer" || c.metric == "val.min_dcf"
                     ? std::string{}
                     : fmt::format("val.eer or val.min_dcf (loss.type = {} trains an embedding model, validated by "
                                   "trials)", loss_type_name(c.loss_type));
        const auto n = metric_names(c.heads != Heads::class_only);
        if (std::find(n.begin(), n.end(), c.metric) != n.end()) return std::string{};
        return fmt::format("one of {}{}", fmt::join(n, ", "),
                           is_leak_metric(c.metric) && c.heads == Heads::class_only
                               ? " (model.heads is class: the model has no leak head)"
                               : "");
      });
  add(v, "eval.patience", &C::patience, ">= 0", "stop after N validations without improvement (0: never)",
      at_least(&C::patience, std::int64_t(0)));
  add(v, "eval.min_delta", &C::min_delta, "a number >= 0", "smallest change that counts as an improvement",
      float_range(&C::min_delta, 0, 1e30, false));
}

// The keys of checkpoints, logging and the run directory ([checkpoint], [log], [run]), in help order.
void output_fields(std::vector<Field>& v) {
  // [checkpoint]
  add(v, "checkpoint.keep_last", &C::keep_last, "an integer > 0", "checkpoints kept (plus the best)",
      positive_int(&C::keep_last));
  add(v, "checkpoint.every", &C::checkpoint_every, "an integer > 0", "write a checkpoint every N epochs",
      positive_int(&C::checkpoint_every));
  // [log]
  add(v, "log.interval", &C::log_interval, "an integer > 0", "optimizer steps between log lines",
      positive_int(&C::log_interval));
  add_choice(v, "log.progress", choice<ProgressMode>(&C::progress, kProgressModeNames),
             "progress display (auto: a live line on a terminal, plain lines otherwise)");
  // [run]
  add(v, "run.out", &C::out, "a directory", "run directory (config, checkpoints, metrics, report, plots)",
      [](const C& c) { return c.out.empty() ? std::string("a non-empty directory path") : std::string{}; });
  add(v, "run.resume", &C::resume, "empty, auto or a checkpoint path",
      "continue a run (auto: the newest good checkpoint in run.out, if any)");
  add(v, "run.init_from", &C::init_from, "a .safetensors or checkpoint path", "initial weights");
  add(v, "run.profile_steps", &C::profile_steps, "empty or A:B with 0 <= A < B",
      "wrap steps [A, B) in cudaProfilerStart/Stop (nsys --capture-range=cudaProfilerApi)",
      [](const C& c) {
        if (c.profile_steps.empty()) return std::string{};
        return c.profile_begin() >= 0 ? std::string{} : std::string("empty or A:B with 0 <= A < B");
      });
}

// On-device augmentation of training batches ([augment], kernels/augment.hpp).
void augment_fields(std::vector<Field>& v) {
  const auto width = [](std::int64_t C::*m) { return int_range(m, 0, 65536); };
  add(v, "augment.time_masks", &C::aug_time_masks, "an integer in [0, 64]", "SpecAugment time masks per segment",
      int_range(&C::aug_time_masks, 0, 64));
  add(v, "augment.time_mask_width", &C::aug_time_mask_width, "an integer in [0, 65536]",
      "largest time mask (frames; each width uniform in [0, W])", width(&C::aug_time_mask_width));
  add(v, "augment.freq_masks", &C::aug_freq_masks, "an integer in [0, 64]", "SpecAugment frequency masks per segment",
      int_range(&C::aug_freq_masks, 0, 64));
  add(v, "augment.freq_mask_width", &C::aug_freq_mask_width, "an integer in [0, 65536]",
      "largest frequency mask (mel bands; each width uniform in [0, W])", width(&C::aug_freq_mask_width));
  add(v, "augment.time_shift", &C::aug_time_shift, "an integer in [0, 65536]",
      "circular time shift by up to N frames either way", width(&C::aug_time_shift));
  add(v, "augment.gain_db", &C::aug_gain_db, "a number in [0, 100]", "gain offset uniform in [-g, g] dB",
      float_range(&C::aug_gain_db, 0, 100, false));
  add(v, "augment.noise", &C::aug_noise, "empty or an HDF5 file", "noise segments mixed in the power domain");
  add(v, "augment.noise_snr_db", &C::aug_noise_snr_db, "[lo, hi] with -100 <= lo <= hi <= 100",
      "SNR of the mixed noise, uniform in [lo, hi] dB", [](const C& c) {
        const auto& r = c.aug_noise_snr_db;
        const bool ok = r.size() == 2 && std::isfinite(r[0]) && std::isfinite(r[1]) && r[0] >= -100 && r[0] <= r[1] &&
                        r[1] <= 100;
        return ok ? std::string{} : std::string("[lo, hi] with -100 <= lo <= hi <= 100");
      });
  add(v, "augment.db_per_unit", &C::aug_db_per_unit, "0, or a number in (0, 100]",
      "dB per unit of the data's log-mel values (0: the data's db_per_unit attribute, else 1)",
      float_range(&C::aug_db_per_unit, 0, 100, false));
  add(v, "augment.mixup_alpha", &C::aug_mixup_alpha, "a number in [0, 10]",
      "mixup within the batch: Beta(alpha, alpha) weights, soft class and leak targets (0: off)",
      float_range(&C::aug_mixup_alpha, 0, 10, false));
}

// The audio front-end of the training data ([frontend]): 0 = not known.
void frontend_fields(std::vector<Field>& v) {
  const auto nonneg = [](std::int64_t C::*m, std::int64_t hi) { return int_range(m, 0, hi); };
  add(v, "frontend.sample_rate", &C::fe_sample_rate, "an integer in [0, 384000]",
      "sample rate of the audio features (0: unknown; set from the training set's attributes)",
      nonneg(&C::fe_sample_rate, 384000));
  add(v, "frontend.n_fft", &C::fe_n_fft, "an integer in [0, 65536]", "FFT size of the features",
      nonneg(&C::fe_n_fft, 65536));
  add(v, "frontend.hop_length", &C::fe_hop_length, "an integer in [0, 65536]", "hop length of the features",
      nonneg(&C::fe_hop_length, 65536));
  add(v, "frontend.n_mels", &C::fe_n_mels, "an integer in [0, 1024]", "mel bands", nonneg(&C::fe_n_mels, 1024));
  add(v, "frontend.fmin", &C::fe_fmin, "a number in [0, 192000]", "lowest mel frequency (Hz)",
      float_range(&C::fe_fmin, 0, 192000, false));
  add(v, "frontend.fmax", &C::fe_fmax, "a number in [0, 192000]", "highest mel frequency (Hz; 0: sample_rate / 2)",
      float_range(&C::fe_fmax, 0, 192000, false));
  add(v, "frontend.frames", &C::fe_frames, "an integer in [0, 65536]", "frames per segment",
      nonneg(&C::fe_frames, 65536));
  add(v, "frontend.long", &C::fe_long, "an integer in [0, 65536]", "long segments per file (L)",
      nonneg(&C::fe_long, 65536));
  add(v, "frontend.short", &C::fe_short, "an integer in [0, 65536]", "short segments per long segment (S)",
      nonneg(&C::fe_short, 65536));
}

// Every key, in the order of the help text and the written TOML.
const std::vector<Field>& fields() {
  static const std::vector<Field> f = [] {
    std::vector<Field> v;
    data_fields(v);
    model_fields(v);
    loss_fields(v);
    train_fields(v);
    optim_fields(v);
    reader_eval_fields(v);
    output_fields(v);
    augment_fields(v);
    frontend_fields(v);
    return v;
  }();
  return f;
}

// Keys that were renamed: the old name still reads (a run's stored
// config.toml, a user's file), to_toml writes the new one.
constexpr std::pair<std::string_view, std::string_view> kRenamedKeys[] = {{"eval.val_every", "eval.every"}};

const Field* find_field(std::string_view key) {
  for (const auto& [old_name, new_name] : kRenamedKeys)
    if (key == old_name) key = new_name;
  for (const Field& f : fields())
    if (f.key == key) return &f;
  return nullptr;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

[[noreturn]] void unknown_key(std::string_view key, std::string_view origin) {
  const auto s = suggest_keys(key);
  std::string hint = s.empty() ? std::string(" (`melforge train --help` lists the keys)")
                               : fmt::format("; did you mean {}?", fmt::join(s, " or "));
  MF_THROW("{}unknown configuration key '{}'{}", origin.empty() ? "" : fmt::format("{}: ", origin), key, hint);
}

std::string node_type(const toml::node& n) {
  if (n.is_string()) return "a string";
  if (n.is_integer()) return "an integer";
  if (n.is_floating_point()) return "a float";
  if (n.is_boolean()) return "a boolean";
  if (n.is_array()) return "a list";
  if (n.is_table()) return "a table";
  return "a date/time";
}

// One element of a list key, if the node holds that type (an integer where a
// number is wanted too).
template <class E> std::optional<E> list_element(const toml::node& e) {
  if constexpr (std::is_same_v<E, std::string>) {
    return e.value_exact<std::string>();
  } else if constexpr (std::is_same_v<E, double>) {
    if (e.is_integer()) return double(*e.value<std::int64_t>());
    return e.value_exact<double>();
  } else {
    return e.value_exact<std::int64_t>();
  }
}

// Assigns a TOML node to a field, with type conversions a user would expect
// (an integer where a float is wanted).
void assign(RunConfig& cfg, const Field& f, const toml::node& n, std::string_view origin) {
  auto wrong = [&]() {
    MF_THROW("{}{}: expected {} ({}), found {}", origin.empty() ? "" : fmt::format("{}: ", origin), f.key,
             type_name(f.member), f.accepted, node_type(n));
  };
  if (const Choice* c = std::get_if<Choice>(&f.member)) {
    if (!n.is_string()) wrong();
    const std::string word = *n.value<std::string>();
    MF_CHECK(c->set(cfg, word), "{}{}: expected one of {}, found '{}'", origin.empty() ? "" : fmt::format("{}: ", origin),
             f.key, c->choices, word);
    return;
  }
  visit_pointer(f.member, [&](auto m) {
        using T = std::remove_cvref_t<decltype(cfg.*m)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (!n.is_string()) wrong();
          cfg.*m = *n.value<std::string>();
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          if (!f.zero_word.empty() && n.value_exact<std::string>() == std::string(f.zero_word)) {
            cfg.*m = 0;
            return;
          }
          if (!n.is_integer()) wrong();
          cfg.*m = *n.value<std::int64_t>();
        } else if constexpr (std::is_same_v<T, double>) {
          if (!n.is_integer() && !n.is_floating_point()) wrong();
          // An integer converts even where a double cannot hold it exactly
          // (above 2^53), where value<double>() would be empty.
          cfg.*m = n.is_integer() ? double(*n.value<std::int64_t>()) : *n.value<double>();
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!n.is_boolean()) wrong();
          cfg.*m = *n.value<bool>();
        } else if constexpr (std::is_same_v<T, std::vector<CnnLayer>>) {
          cfg.*m = parse_cnn_layers(n, origin);
        } else {  // the lists of integers, numbers or strings
          const toml::array* a = n.as_array();
          if (!a) wrong();
          T out;
          for (const toml::node& e : *a) {
            const auto x = list_element<typename T::value_type>(e);
            if (!x) wrong();
            out.push_back(*x);
          }
          cfg.*m = std::move(out);
        }
      });
}

void load_table(RunConfig& cfg, const toml::table& root, std::string_view origin, std::vector<std::string>* keys) {
  for (auto&& [section_key, section] : root) {
    const std::string sec(section_key.str());
    const toml::table* t = section.as_table();
    if (!t) {
      // A top-level key: maybe a key of some section written without its table.
      unknown_key(sec, origin);
    }
    for (auto&& [k, v] : *t) {
      const std::string key = sec + "." + std::string(k.str());
      const Field* f = find_field(key);
      if (!f) unknown_key(key, origin);
      assign(cfg, *f, v, origin);
      if (keys) keys->push_back(key);
    }
  }
}

// A string list from --set: TOML (["a", "b"]), or bare words ([a, b.c], or
// one word a); empty entries are refused.
std::vector<std::string> parse_word_list(std::string_view key, std::string_view value, std::string_view accepted) {
  std::string_view body = value;
  const bool bracketed = body.size() >= 2 && body.front() == '[' && body.back() == ']';
  if (bracketed) body = body.substr(1, body.size() - 2);
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= body.size()) {
    const std::size_t comma = std::min(body.find(',', at), body.size());
    std::string_view w = body.substr(at, comma - at);
    while (!w.empty() && w.front() == ' ') w.remove_prefix(1);
    while (!w.empty() && w.back() == ' ') w.remove_suffix(1);
    if (w.size() >= 2 && (w.front() == '"' || w.front() == '\'') && w.back() == w.front())
      w = w.substr(1, w.size() - 2);
    else if (w.find_first_of("\"'[]= ") != std::string_view::npos)
      MF_THROW("{}: expected string list ({}), found '{}'", key, accepted, value);
    if (!w.empty()) out.emplace_back(w);
    else if (comma < body.size() || !out.empty() || !bracketed)
      MF_THROW("{}: expected string list ({}), found '{}' (an empty entry)", key, accepted, value);
    at = comma + 1;
  }
  return out;
}

std::int64_t parse_profile(const std::string& s, bool want_end) {
  const auto colon = s.find(':');
  if (colon == std::string::npos) return -1;
  std::int64_t a = -1, b = -1;
  const char* p = s.data();
  auto r1 = std::from_chars(p, p + colon, a);
  auto r2 = std::from_chars(p + colon + 1, p + s.size(), b);
  if (r1.ec != std::errc{} || r1.ptr != p + colon || r2.ec != std::errc{} || r2.ptr != p + s.size()) return -1;
  if (a < 0 || b <= a) return -1;
  return want_end ? b : a;
}

}  // namespace

std::string_view arch_name(const RunConfig& cfg) {
  if (!cfg.arch_preset.empty()) return cfg.arch_preset;
  return cfg.arch == Arch::cnn ? "cnn" : "leakcnn";
}

std::int64_t RunConfig::profile_begin() const { return parse_profile(profile_steps, false); }
std::int64_t RunConfig::profile_end() const { return parse_profile(profile_steps, true); }
bool RunConfig::metric_higher_is_better() const {
  return metric.find("loss") == std::string::npos && metric != "val.eer" && metric != "val.min_dcf";
}

const std::vector<std::string>& metric_names() {
  static const std::vector<std::string> n = {
      "val.loss",           "val.segment.accuracy", "val.segment.balanced_accuracy", "val.segment.macro_f1",
      "val.segment.leak_auc", "val.file.accuracy",  "val.file.balanced_accuracy",    "val.file.macro_f1",
      "val.file.leak_auc"};
  return n;
}

std::vector<std::string> metric_names(bool leak_head) {
  std::vector<std::string> out;
  for (const std::string& n : metric_names())
    if (leak_head || !is_leak_metric(n)) out.push_back(n);
  return out;
}

bool is_leak_metric(std::string_view name) { return name.find("leak") != std::string_view::npos; }

const std::vector<ConfigKeyInfo>& config_keys() {
  static const std::vector<ConfigKeyInfo> k = [] {
    std::vector<ConfigKeyInfo> v;
    for (const Field& f : fields()) v.push_back({f.key, type_name(f.member), f.accepted, f.help});
    return v;
  }();
  return k;
}

std::vector<std::string> suggest_keys(std::string_view key) {
  std::vector<std::string> out;
  // The same field name in another section ("lr" -> "optim.lr", "train.lr" -> "optim.lr").
  const auto dot = key.rfind('.');
  const std::string_view leaf = dot == std::string_view::npos ? key : key.substr(dot + 1);
  for (const Field& f : fields()) {
    const std::string_view fl = std::string_view(f.key).substr(f.key.rfind('.') + 1);
    if (fl == leaf) out.push_back(f.key);
  }
  if (!out.empty()) return out;
  std::size_t best = std::string::npos;
  for (const Field& f : fields()) {
    const std::string_view fl = std::string_view(f.key).substr(f.key.rfind('.') + 1);
    const std::size_t d = std::min(edit_distance(key, f.key), edit_distance(leaf, fl));
    if (d < best) {
      best = d;
      out.assign(1, f.key);
    } else if (d == best) {
      out.push_back(f.key);
    }
  }
  const std::size_t limit = std::max<std::size_t>(2, leaf.size() / 3);
  if (best > limit) out.clear();
  if (out.size() > 3) out.resize(3);
  return out;
}

void load_toml_string(RunConfig& cfg, std::string_view text, std::string_view origin) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    MF_THROW("{}:{}:{}: TOML syntax error: {}", origin, b.line, b.column, e.description());
  }
  load_table(cfg, root, origin, nullptr);
}

RunConfig load_saved_config(std::string_view text, std::string_view origin) {
  RunConfig cfg;
  load_toml_string(cfg, text, origin);
  // Without the key (saved before it existed), or still auto (saved by a
  // trainer that did not resolve it), the run trained both heads.
  if (cfg.heads == Heads::automatic) cfg.heads = Heads::class_and_leak;
  return cfg;
}

void load_toml_file(RunConfig& cfg, const std::filesystem::path& path, std::vector<std::string>* keys) {
  std::error_code ec;
  MF_CHECK(std::filesystem::is_regular_file(path, ec), "config file {} does not exist or is not a file",
           path.string());
  toml::table root;
  try {
    root = toml::parse_file(path.string());
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    MF_THROW("{}:{}:{}: TOML syntax error: {}", path.string(), b.line, b.column, e.description());
  }
  load_table(cfg, root, path.string(), keys);
}

void set_key(RunConfig& cfg, std::string_view key, std::string_view value) {
  const Field* f = find_field(key);
  if (!f) unknown_key(key, "");
  const std::string origin = fmt::format("--set {}={}", key, value);
  // Strings and choices are taken verbatim (paths need no quotes); the rest parses as TOML.
  if (f->member.index() == 0 || std::holds_alternative<Choice>(f->member)) {
    std::string v(value);
    if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front())
      v = v.substr(1, v.size() - 2);
    if (const Choice* c = std::get_if<Choice>(&f->member))
      MF_CHECK(c->set(cfg, v), "{}: expected one of {}, found '{}'", key, c->choices, v);
    else
      cfg.*std::get<0>(f->member) = v;
    return;
  }
  if (const auto* lm = std::get_if<std::vector<std::string> RunConfig::*>(&f->member)) {
    cfg.**lm = parse_word_list(key, value, f->accepted);
    return;
  }
  if (!f->zero_word.empty() && value == f->zero_word) {
    cfg.*std::get<std::int64_t RunConfig::*>(f->member) = 0;
    return;
  }
  toml::table t;
  try {
    t = toml::parse(fmt::format("v = {}", value));
  } catch (const toml::parse_error&) {
    MF_THROW("{}: expected {} ({}), found '{}'", key, type_name(f->member), f->accepted, value);
  }
  assign(cfg, *f, *t.get("v"), "");
}

std::string apply_override(RunConfig& cfg, std::string_view assignment) {
  const auto eq = assignment.find('=');
  MF_CHECK(eq != std::string_view::npos && eq > 0, "--set expects key=value (e.g. --set optim.lr=3e-4), found '{}'",
           assignment);
  std::string_view key = assignment.substr(0, eq);
  while (!key.empty() && key.back() == ' ') key.remove_suffix(1);
  std::string_view value = assignment.substr(eq + 1);
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  set_key(cfg, key, value);
  return std::string(key);
}

void validate(const RunConfig& cfg) {
  // Every string key is written to config.toml and checkpoints: TOML text is UTF-8.
  for (const Field& f : fields())
    if (const auto* m = std::get_if<std::string RunConfig::*>(&f.member))
      MF_CHECK(is_utf8(cfg.**m), "{}: expected UTF-8 text, found bytes that are not UTF-8 ({})", f.key,
               invalid_utf8_desc(cfg.**m));
  for (const Field& f : fields()) {
    if (!f.check) continue;
    const std::string accepted = f.check(cfg);
    if (accepted.empty()) continue;
    std::string found = visit_pointer<std::string>(f.member, [&](auto m) -> std::string {
          using T = std::remove_cvref_t<decltype(cfg.*m)>;
          if constexpr (std::is_same_v<T, std::vector<std::int64_t>> || std::is_same_v<T, std::vector<double>> ||
                        std::is_same_v<T, std::vector<std::string>>)
            return fmt::format("[{}]", fmt::join(cfg.*m, ", "));
          else if constexpr (std::is_same_v<T, std::vector<CnnLayer>>)
            return fmt::format("{} layers", (cfg.*m).size());
          else if constexpr (std::is_same_v<T, std::string>)
            return fmt::format("'{}'", cfg.*m);
          else
            return fmt::format("{}", cfg.*m);
        });
    MF_THROW("{}: expected {}, found {}", f.key, accepted, found);
  }
  const std::string_view loss = loss_type_name(cfg.loss_type);
  MF_CHECK(cfg.loss_type == LossType::softmax || cfg.heads != Heads::class_and_leak,
           "loss.type = {}: a metric loss trains embeddings (speakers) and has no leak head; set model.heads = class "
           "(or auto)", loss);
  MF_CHECK(!loss_is_prototypical(cfg.loss_type) || cfg.per_class >= 2,
           "loss.type = {}: the prototypical loss needs speaker-balanced batches: set data.per_class (2 as "
           "voxceleb_trainer uses)", loss);
  MF_CHECK(cfg.label_smoothing == 0 || cfg.loss_type == LossType::softmax || cfg.loss_type == LossType::softmaxproto,
           "optim.label_smoothing: loss.type = {} has no class head to smooth; set it to 0", loss);
  MF_CHECK(cfg.loss_type == LossType::softmax || cfg.aug_mixup_alpha == 0,
           "augment.mixup_alpha: mixup mixes class targets, which loss.type = {} does not train; set it to 0", loss);
  const bool own_layers = cfg.arch == Arch::cnn && cfg.arch_preset.empty();  // model.arch = cnn
  MF_CHECK(!own_layers || !cfg.layers.empty(),
           "model.layers: model.arch = cnn needs its layers ([[model.layers]] tables, docs/models.md), found none");
  MF_CHECK(own_layers || cfg.layers.empty(),
           "model.layers: only model.arch = cnn takes layers; model.arch = {} has its own, found {} layers",
           arch_name(cfg), cfg.layers.size());
  MF_CHECK(!cfg.train_path.empty(), "data.train: a training set is required (--train FILE or data.train in the config)");
  MF_CHECK(!(cfg.overfit_batches > 0 && cfg.limit_batches > 0),
           "train.overfit_batches and train.limit_batches: set one of them, not both");
  MF_CHECK(cfg.val_path.empty() == false || cfg.patience == 0 || cfg.overfit_batches > 0,
           "eval.patience: early stopping needs a validation set (data.val)");
  const bool fe_any = cfg.fe_n_fft || cfg.fe_hop_length || cfg.fe_n_mels || cfg.fe_frames || cfg.fe_long ||
                      cfg.fe_short;
  MF_CHECK(cfg.fe_sample_rate == 0 ? !fe_any
                                   : cfg.fe_n_fft && cfg.fe_hop_length && cfg.fe_n_mels && cfg.fe_frames &&
                                         cfg.fe_long && cfg.fe_short,
           "frontend.sample_rate, frontend.n_fft, frontend.hop_length, frontend.n_mels, frontend.frames, "
           "frontend.long and frontend.short are set together (all > 0) or not at all; found sample_rate {}, n_fft {}, hop_length {}, n_mels {}, frames {}, long {}, short {}",
           cfg.fe_sample_rate, cfg.fe_n_fft, cfg.fe_hop_length, cfg.fe_n_mels, cfg.fe_frames, cfg.fe_long,
           cfg.fe_short);
}

std::vector<std::pair<std::string, std::string>> config_values(const RunConfig& cfg) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Field& f : fields()) {
    const std::string name = f.key.substr(f.key.find('.') + 1);
    if (const auto* lm = std::get_if<std::vector<CnnLayer> RunConfig::*>(&f.member)) {
      // An array of inline tables, one layer per line (round-trips through assign).
      const std::vector<CnnLayer>& ls = cfg.**lm;
      std::string v = "[";
      for (std::size_t i = 0; i < ls.size(); ++i) v += (i ? ",\n  " : "\n  ") + cnn_layer_toml(ls[i]);
      out.emplace_back(f.key, v + (ls.empty() ? "]" : ",\n]"));
      continue;
    }
    toml::table one;
    if (const Choice* c = std::get_if<Choice>(&f.member)) one.insert_or_assign(name, std::string(c->get(cfg)));
    visit_pointer(f.member, [&](auto m) {
      using T = std::remove_cvref_t<decltype(cfg.*m)>;
      if constexpr (std::is_same_v<T, std::vector<std::int64_t>> || std::is_same_v<T, std::vector<double>> ||
                    std::is_same_v<T, std::vector<std::string>>) {
        toml::array a;
        for (auto x : cfg.*m) a.push_back(x);
        one.insert_or_assign(name, std::move(a));
      } else if constexpr (std::is_same_v<T, std::int64_t>) {
        if (!f.zero_word.empty() && cfg.*m == 0)
          one.insert_or_assign(name, std::string(f.zero_word));
        else
          one.insert_or_assign(name, cfg.*m);
      } else if constexpr (!std::is_same_v<T, std::vector<CnnLayer>>) {
        one.insert_or_assign(name, cfg.*m);
      }
    });
    const toml::node& n = *one.get(name);
    if (n.is_floating_point()) {
      // Shortest round-trip text (0.9, not 0.90000000000000002), kept a TOML float.
      std::string v = fmt::format("{}", *n.value<double>());
      if (v.find_first_of(".eni") == std::string::npos) v += ".0";
      out.emplace_back(f.key, v);
      continue;
    }
    std::ostringstream os;
    os << one;
    const std::string line = os.str();
    out.emplace_back(f.key, line.substr(line.find(" = ") + 3));
  }
  return out;
}

std::string to_toml(const RunConfig& cfg) {
  std::ostringstream os;
  os << "# melforge train: the resolved configuration (every key)\n";
  std::string section;
  for (const auto& [key, value] : config_values(cfg)) {
    const std::string sec = key.substr(0, key.find('.'));
    if (sec != section) os << "\n[" << sec << "]\n";
    section = sec;
    os << key.substr(sec.size() + 1) << " = " << value << "\n";
  }
  return os.str();
}

void copy_key(RunConfig& dst, const RunConfig& src, std::string_view key) {
  const Field* f = find_field(key);
  if (!f) unknown_key(key, "");
  if (const Choice* c = std::get_if<Choice>(&f->member)) {
    const std::string word(c->get(src));
    c->set(dst, word);
    return;
  }
  visit_pointer(f->member, [&](auto m) { dst.*m = src.*m; });
}

std::vector<std::string> config_differences(const RunConfig& before, const RunConfig& after) {
  const auto a = config_values(before), b = config_values(after);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].second != b[i].second) out.push_back(fmt::format("{}: {} -> {}", a[i].first, a[i].second, b[i].second));
  return out;
}

}  // namespace mf::model
