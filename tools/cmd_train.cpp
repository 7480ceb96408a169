// `melforge train`, `eval`, `predict` and `plot`.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "engine/error.hpp"
#include "engine/stream.hpp"
#include "io/csv_table.hpp"
#include "io/reader.hpp"
#include "model/run_config.hpp"
#include "tools/cli_help.hpp"
#include "tools/commands.hpp"
#include "train/evaluate.hpp"
#include "train/load_model.hpp"
#include "train/plot.hpp"
#include "train/predict_audio.hpp"
#include "train/run_log.hpp"
#include "train/run_setup.hpp"
#include "train/trainer.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace mf::cli {

namespace {

// The configuration's defaults (model::RunConfig{}) by key, read back from the
// resolved-configuration TOML so that every key's default has one source.
const toml::table& default_config() {
  static const toml::table t = toml::parse(model::to_toml(model::RunConfig{}), std::string_view("defaults"));
  return t;
}

// A key's default as a user would write it ("256", "0.001", "auto", "[32, 64, 128]");
// empty for an empty string (no default shown).
std::string default_text(const std::string& key) {
  const toml::node_view<const toml::node> n = default_config().at_path(key);
  if (!n) return {};
  if (const auto s = n.value_exact<std::string>()) return *s;
  if (const auto b = n.value_exact<bool>()) return *b ? "true" : "false";
  if (const auto i = n.value_exact<std::int64_t>()) return std::to_string(*i);
  if (const auto d = n.value_exact<double>()) return fmt::format("{}", *d);
  std::vector<std::string> items;
  if (const toml::array* a = n.as_array())
    for (const toml::node& e : *a)
      items.push_back(e.is_floating_point() ? fmt::format("{}", e.value_or(0.0))
                                            : fmt::format("{}", e.value_or<std::int64_t>(0)));
  return fmt::format("[{}]", fmt::join(items, ", "));
}

const model::ConfigKeyInfo* find_key(std::string_view key) {
  for (const model::ConfigKeyInfo& k : model::config_keys())
    if (k.key == key) return &k;
  return nullptr;
}

// The help type of a key from its configuration type: INT, FLOAT, BOOL,
// [INT,...], or {a,b,c} for a string key that accepts "one of a, b, c".
// Empty for other string keys (paths and forms: the flag table names those).
std::string key_type(const model::ConfigKeyInfo& k) {
  if (k.type == "integer") return "INT";
  if (k.type == "float") return "FLOAT";
  if (k.type == "boolean") return "BOOL";
  if (k.type == "integer list") return "[INT,...]";
  constexpr std::string_view one_of = "one of ";
  if (k.type == "string" && k.accepted.starts_with(one_of)) {
    std::vector<std::string> words;
    std::string_view rest = std::string_view(k.accepted).substr(one_of.size());
    while (!rest.empty()) {
      const auto comma = rest.find(", ");
      words.emplace_back(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 2);
    }
    return one_of_type(words);
  }
  return {};
}

std::string keys_help() {
  std::string s =
      "\nConfiguration: defaults, then --config FILE (TOML: [section] tables of the keys below), then the plain\n"
      "flags above, then each --set KEY=VALUE in order. The resolved configuration is written to\n"
      "RUN_DIR/config.toml. Keys (type, accepted values, meaning, default):\n";
  std::string section;
  for (const auto& k : model::config_keys()) {
    const std::string sec = k.key.substr(0, k.key.find('.'));
    if (sec != section) {
      s += fmt::format("  [{}]\n", sec);
      section = sec;
    }
    const std::string def = default_text(k.key);
    s += fmt::format("    {:<28} {:<13} {}: {}{}\n", k.key, k.type, k.accepted, k.help,
                     def.empty() ? "" : fmt::format(" (default {})", def));
  }
  s += "\nEarly-stopping metrics (eval.metric): " + fmt::format("{}", fmt::join(model::metric_names(), ", ")) + "\n";
  s += "SIGINT/SIGTERM finish the current step, write a checkpoint and exit 0; --resume auto continues.\n";
  return s;
}

// A plain flag of `melforge train`: a shorthand for one configuration key.
// Its help (meaning, type, default) comes from the key; `type` names the form
// of a string key whose configuration type does not say it.
struct ConfigFlag {
  const char* name;
  const char* key;
  const char* type = nullptr;
};
constexpr ConfigFlag kConfigFlags[] = {
    {"--train", "data.train", "PATH"},
    {"--val", "data.val", "PATH"},
    {"--test", "data.test", "PATH"},
    {"--out", "run.out", "DIR"},
    {"--epochs", "train.epochs"},
    {"--batch-size", "train.batch_size", "auto|INT"},
    {"--grad-accum", "train.grad_accum"},
    {"--lr", "optim.lr"},
    {"--precision", "train.precision"},
    {"--device", "train.device", kDeviceType},
    {"--seed", "train.seed"},
    {"--resume", "run.resume", "auto|PATH"},
    {"--limit-batches", "train.limit_batches"},
    {"--overfit-batches", "train.overfit_batches"},
    {"--init-from", "run.init_from", "PATH"},
    {"--profile-steps", "run.profile_steps", "A:B"},
    {"--progress", "log.progress"},
};

struct TrainArgs {
  std::string config;
  std::vector<std::string> sets;
  // The plain flags' values as written, one per kConfigFlags entry, applied
  // through model::set_key (same checks and messages as --set).
  std::array<std::string, std::size(kConfigFlags)> flag_values;
  bool fast_dev_run = false, gpu_cache = false;
  std::int64_t stop_after_steps = -1;
};

void add_config_flag(CLI::App* cmd, const ConfigFlag& f, std::string& value) {
  // A flag whose key is gone, or a string key of another form without a type
  // in the table, shows CLI11's TEXT, which tests/tools/test_cli.cpp rejects;
  // using the flag then fails in model::set_key with the key's message.
  const model::ConfigKeyInfo* k = find_key(f.key);
  std::string help = k ? k->help : std::string();
  if (!help.empty()) help[0] = char(std::toupper(static_cast<unsigned char>(help[0])));
  const std::string type = f.type ? std::string(f.type) : k ? key_type(*k) : std::string();
  cmd->add_option(f.name, value, fmt::format("{} ({})", help, f.key))
      ->type_name(type.empty() ? "TEXT" : type)
      ->default_str(default_text(f.key));
}

void register_train(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "train", "Train a model (LeakCNN, a CNN stack, an embedding model) on HDF5 mel-spectrogram datasets; writes "
               "config, checkpoints, metrics, report and plots to the run directory (--out)");
  static TrainArgs a;
  cmd->footer(keys_help());
  cmd->add_option("--config", a.config, "TOML configuration file (keys below)")->type_name("PATH");
  cmd->add_option("--set", a.sets, "Override one key: --set optim.lr=3e-4 (repeatable)")
      ->take_all()
      ->type_name("KEY=VALUE");
  for (std::size_t i = 0; i < std::size(kConfigFlags); ++i) add_config_flag(cmd, kConfigFlags[i], a.flag_values[i]);
  cmd->add_flag("--fast-dev-run", a.fast_dev_run,
                "One training step and one validation batch, no checkpoints (train.fast_dev_run)");
  cmd->add_flag("--gpu-cache", a.gpu_cache, "Keep the dataset on the GPU (reader.gpu_cache=on)");
  cmd->add_option("--stop-after-steps", a.stop_after_steps,
                  "Stop as Ctrl-C would once the run reaches optimizer step N: checkpoint, report, exit 0; "
                  "--resume auto continues (time-boxed jobs)")
      ->type_name("INT")
      ->default_str("-1: never");
  cmd->callback([cmd] {
    // Precedence: defaults < --config < flags < --set. On --resume the run's
    // saved configuration takes the defaults' place (train::resumed_config).
    model::RunConfig cfg;
    std::vector<std::string> given;
    if (!a.config.empty()) model::load_toml_file(cfg, a.config, &given);
    for (std::size_t i = 0; i < std::size(kConfigFlags); ++i)
      if (cmd->count(kConfigFlags[i].name) > 0) {
        model::set_key(cfg, kConfigFlags[i].key, a.flag_values[i]);
        given.emplace_back(kConfigFlags[i].key);
      }
    if (a.fast_dev_run) {
      cfg.fast_dev_run = true;
      given.emplace_back("train.fast_dev_run");
    }
    if (a.gpu_cache) {
      cfg.gpu_cache = io::Residency::on;
      given.emplace_back("reader.gpu_cache");
    }
    for (const std::string& s : a.sets) given.push_back(model::apply_override(cfg, s));
    train::TrainerOptions options;
    options.stop_after_steps = a.stop_after_steps;
    options.given_keys = std::move(given);
    const int rc = train::Trainer(cfg, options).run();
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

struct InferArgs {
  std::string checkpoint, data, device = "auto", precision, out;
  std::int64_t batch_size = 256;
  double threshold = -1;
  bool per_segment = false;
  CropOptions crop;
  // predict --audio
  std::vector<std::string> audio, sets;
  bool pad = false;
  int threads = 0;
};

train::EvalRun run_eval(const InferArgs& a, train::LoadedModel& lm, const Stream& stream,
                        std::shared_ptr<const io::Dataset>& ds) {
  ds = train::open_model_data(lm, a.data, "--data " + a.data);
  io::BatchReader reader(ds, train::inference_reader(lm, a.batch_size));
  train::EvalOptions o;
  o.threshold = a.threshold >= 0 ? a.threshold : lm.cfg.threshold;
  o.class_loss_weight = lm.cfg.class_loss_weight;
  o.leak_loss_weight = lm.cfg.leak_loss_weight;
  return train::evaluate(*lm.ts, reader, o, stream);
}

void add_infer_options(CLI::App* cmd, InferArgs& a) {
  cmd->add_option("--checkpoint", a.checkpoint, "Checkpoint (.h5) written by melforge train")
      ->required()
      ->type_name("PATH");
  cmd->add_option("--data", a.data, "Dataset (HDF5)")->type_name("PATH");
  cmd->add_option("--device", a.device, "Where to run")->capture_default_str()->type_name(kDeviceType);
  cmd->add_option("--precision", a.precision, "Compute precision (default: the checkpoint's train.precision)")
      ->type_name(one_of_type({"fp32", "bf16", "fp16"}));
  cmd->add_option("--batch-size", a.batch_size, "Segments per forward pass")->capture_default_str()->check(
      CLI::PositiveNumber);
  cmd->add_option("--threshold", a.threshold,
                  "Leak decision threshold on the leak probability (default: the checkpoint's eval.threshold)")
      ->check(leak_threshold_check());
}

void register_eval(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "eval", "Evaluate a checkpoint on a dataset; writes segment- and file-level metrics as JSON to stdout");
  static InferArgs a;
  add_infer_options(cmd, a);
  cmd->get_option("--data")->required();
  add_crop_options(cmd, a.crop);
  cmd->callback([] {
    const Device dev = parse_device(a.device);
    Stream stream(dev, "eval");
    train::LoadedModel lm = train::load_model(a.checkpoint, a.device, a.precision, stream);
    apply_crop_options(a.crop, lm.cfg);
    std::shared_ptr<const io::Dataset> ds;
    const train::EvalRun r = run_eval(a, lm, stream, ds);
    json j = model::to_json(r.result, lm.class_names);
    j["checkpoint"] = a.checkpoint;
    j["data"] = a.data;
    j["step"] = lm.step;
    j["device"] = dev.str();
    j["precision"] = std::string(model::precision_name(lm.precision));
    j["files"] = r.files;
    j["segments"] = r.segments_evaluated;
    fmt::print("{}\n", j.dump(2));
  });
}

// The CSV of `melforge predict`: a row per file (voted) or per segment. With
// audio input, rows name the audio file (`path`) instead of the dataset's file
// index and label.
std::string predict_csv(const InferArgs& a, const train::LoadedModel& lm, const train::EvalRun& r,
                        const io::DatasetInfo& info, const std::vector<std::string>& row_paths) {
  const bool audio = !row_paths.empty();
  const double thr = a.threshold >= 0 ? a.threshold : lm.cfg.threshold;
  const int C = r.segments.classes;
  auto name = [&](int c) { return std::size_t(c) < lm.class_names.size() ? lm.class_names[std::size_t(c)] : fmt::format("class_{}", c); };
  std::string probs_header;
  for (int c = 0; c < C; ++c) probs_header += ",prob_" + name(c);
  // A model without the leak head (model.heads = class) has no leak columns.
  const bool leak = r.segments.has_leak;
  const std::string leak_header = leak ? ",leak,leak_prob" : "";
  // A file is named as the data's /files names it (as `embed` does), else by its index.
  auto file_text = [&](std::int64_t file) {
    return info.file_names.empty() ? std::to_string(file) : io::csv_field(info.file_names[std::size_t(file)]);
  };
  std::string f;
  if (r.vote && !a.per_segment) {
    const model::FileVote& v = *r.vote;
    f += std::string(audio ? "path" : "file,label,label_name") + ",pred,pred_name" + leak_header + probs_header + "\n";
    for (std::int64_t i = 0; i < v.files; ++i) {
      const int y = info.file_labels[std::size_t(i)], p = v.klass[std::size_t(i)];
      f += audio ? io::csv_field(row_paths[std::size_t(i)]) : fmt::format("{},{},{}", file_text(i), y, name(y));
      f += fmt::format(",{},{}", p, name(p));
      if (leak) f += fmt::format(",{},{:.7g}", v.leak[std::size_t(i)], v.leak_prob[std::size_t(i)]);
      for (int c = 0; c < C; ++c) f += fmt::format(",{:.7g}", v.probs[std::size_t(i * C + c)]);
      f += "\n";
    }
    return f;
  }
  f += std::string(audio ? "segment,path,long,short" : "segment,file,long,short,label,label_name") + ",pred,pred_name" +
       leak_header + probs_header + "\n";
  for (std::int64_t i = 0; i < r.segments.size(); ++i) {
    const float* p = r.segments.class_probs.data() + i * C;
    int best = 0;
    for (int c = 1; c < C; ++c)
      if (p[c] > p[best]) best = c;
    const std::int64_t file = info.file_of(i), within = i % info.segments_per_file;
    f += fmt::format("{},{},{},{}", i, audio ? io::csv_field(row_paths[std::size_t(file)]) : file_text(file),
                     within / info.short_per_long, within % info.short_per_long);
    if (!audio) f += fmt::format(",{},{}", r.segments.labels[std::size_t(i)], name(r.segments.labels[std::size_t(i)]));
    f += fmt::format(",{},{}", best, name(best));
    if (leak) {
      const float q = r.segments.leak_probs[std::size_t(i)];
      f += fmt::format(",{},{:.7g}", q >= float(thr) ? 1 : 0, q);
    }
    for (int c = 0; c < C; ++c) f += fmt::format(",{:.7g}", p[c]);
    f += "\n";
  }
  return f;
}

// --audio: the features into a temporary dataset (train/predict_audio.hpp);
// a.data then names it. Files that cannot be used are listed on stderr.
std::unique_ptr<train::AudioFeatures> prepare_audio(InferArgs& a, const train::LoadedModel& lm,
                                                    std::vector<std::string>& row_paths) {
  const train::AudioInputOptions o{a.sets, a.pad, a.threads, a.device};
  auto feats = train::audio_features_for_model(a.audio, lm.cfg, lm.model.in_mels, lm.model.in_frames,
                                               lm.class_names, o, "predict");
  for (auto w : feats->written) row_paths.push_back(feats->sources[w].string());
  a.data = feats->dataset.string();
  return feats;
}

void register_predict(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "predict", "Predict the classes of a dataset or of audio files with a checkpoint; writes a CSV row per file "
                 "(or per segment) to --out");
  static InferArgs a;
  add_infer_options(cmd, a);
  cmd->add_option("--out", a.out, "CSV file to write")->required()->type_name("PATH");
  cmd->add_flag("--per-segment", a.per_segment, "One row per segment instead of one per file");
  add_audio_input_options(cmd, a.audio, a.sets, a.pad, a.threads, "rows are named by path");
  cmd->callback([] {
    MF_CHECK(!a.data.empty() || !a.audio.empty(), "predict: give --data FILE.h5 or --audio FILE_OR_DIR");
    const Device dev = parse_device(a.device);
    Stream stream(dev, "predict");
    train::LoadedModel lm = train::load_model(a.checkpoint, a.device, a.precision, stream);
    MF_CHECK(lm.model.loss == model::LossType::softmax,
             "predict: {} is an embedding model (loss.type = {}): its classes are the training speakers; use "
             "melforge embed for its embeddings or melforge verify to score trials",
             a.checkpoint, model::loss_type_name(lm.model.loss));
    std::vector<std::string> row_paths;
    std::unique_ptr<train::AudioFeatures> feats;
    if (!a.audio.empty()) feats = prepare_audio(a, lm, row_paths);
    std::shared_ptr<const io::Dataset> ds;
    const train::EvalRun r = run_eval(a, lm, stream, ds);
    const std::string f = predict_csv(a, lm, r, ds->info(), row_paths);
    // The whole CSV in memory, then one atomic write (temporary file, fsync,
    // rename): a failure leaves no partial file and names the file and reason.
    try {
      train::write_text_atomic(a.out, f);
    } catch (const Error& e) {
      MF_THROW("--out {}: {}", a.out, e.message());
    }
    const auto rows = std::count(f.begin(), f.end(), '\n') - 1;
    fmt::print(stderr, "melforge predict: {} rows ({}) to {}\n", rows, r.vote && !a.per_segment ? "files" : "segments",
               a.out);
  });
}

void register_plot(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plot", "Draw a run's loss, accuracy and throughput curves; writes loss.svg, accuracy.svg, throughput.svg");
  static std::string run_dir, out_dir;
  cmd->add_option("RUN_DIR", run_dir, "Run directory (holds metrics.jsonl)")->required()->type_name("DIR");
  cmd->add_option("--out", out_dir, "Where to write the SVG files")->type_name("DIR")->default_str("RUN_DIR");
  cmd->callback([] {
    for (const auto& p : train::plot_run(run_dir, out_dir)) fmt::print("{}\n", p.string());
  });
}

}  // namespace

void register_trainer(CLI::App& app) {
  register_train(app);
  register_eval(app);
  register_predict(app);
  register_plot(app);
}

}  // namespace mf::cli
