// Speaker verification from the command line (docs/verification.md):
//   melforge embed  --checkpoint CKPT --data X.h5 --out emb.h5 [--per-segment]
//   melforge verify --checkpoint CKPT --data test.h5 --trials trials.txt [--out scores.csv]
//                   [--cohort train.h5 --cohort-top N]
//   melforge data trials --data test.h5 --out trials.txt --per-file N --seed S
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "engine/atomic_file.hpp"
#include "engine/error.hpp"
#include "engine/stream.hpp"
#include "io/csv_table.hpp"
#include "io/embedding_file.hpp"
#include "io/reader.hpp"
#include "model/verification.hpp"
#include "tools/cli_help.hpp"
#include "tools/commands.hpp"
#include "train/embeddings.hpp"
#include "train/load_model.hpp"
#include "train/predict_audio.hpp"

namespace mf::cli {

namespace {

using nlohmann::json;

struct EmbedArgs {
  std::string checkpoint, data, out, device = "auto", precision, trials, scores_out, cohort;
  std::int64_t batch_size = 256, cohort_top = 300;
  bool per_segment = false;
  CropOptions crop;
  // embed --audio
  std::vector<std::string> audio, sets;
  bool pad = false;
  int threads = 0;
};

void add_model_options(CLI::App* cmd, EmbedArgs& a) {
  cmd->add_option("--checkpoint", a.checkpoint, "Checkpoint (.h5) written by melforge train")
      ->required()
      ->type_name("PATH");
  cmd->add_option("--data", a.data, "Dataset (HDF5)")->type_name("PATH");
  cmd->add_option("--device", a.device, "Where to run")->capture_default_str()->type_name(kDeviceType);
  cmd->add_option("--precision", a.precision, "Compute precision (default: the checkpoint's train.precision)")
      ->type_name(one_of_type({"fp32", "bf16", "fp16"}));
  cmd->add_option("--batch-size", a.batch_size, "Segments per forward pass")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  add_crop_options(cmd, a.crop);
}

// The segment embeddings of a dataset, in order.
struct DataEmbeddings {
  std::shared_ptr<const io::Dataset> ds;
  train::Embeddings segments;
};
DataEmbeddings embed_data(train::LoadedModel& lm, const std::string& path, std::int64_t batch_size,
                          const Stream& stream) {
  DataEmbeddings d;
  d.ds = train::open_model_data(lm, path, path);
  io::BatchReader reader(d.ds, train::inference_reader(lm, batch_size));
  d.segments = train::segment_embeddings(*lm.ts, reader, 0, stream);
  return d;
}

std::vector<std::string> file_names(const io::DatasetInfo& info) {
  std::vector<std::string> n;
  for (std::int64_t f = 0; f < info.num_files; ++f) n.push_back(info.file_name(f));
  return n;
}

void register_embed(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "embed", "Write the embedding of every file (the L2-normalised mean of its segments' embeddings) of a dataset "
               "to an HDF5 file (/embeddings, /files, /labels)");
  static EmbedArgs a;
  add_model_options(cmd, a);
  cmd->add_option("--out", a.out, "Output file (HDF5)")->required()->type_name("PATH");
  cmd->add_flag("--per-segment", a.per_segment, "One L2-normalised embedding per segment instead of per file");
  add_audio_input_options(cmd, a.audio, a.sets, a.pad, a.threads, "rows are named by path, labels -1");
  cmd->callback([] {
    MF_CHECK(!a.data.empty() || !a.audio.empty(), "embed: give --data FILE.h5 or --audio FILE_OR_DIR");
    const Device dev = parse_device(a.device);
    Stream stream(dev, "embed");
    train::LoadedModel lm = train::load_model(a.checkpoint, a.device, a.precision, stream);
    apply_crop_options(a.crop, lm.cfg);
    std::unique_ptr<train::AudioFeatures> feats;
    if (!a.audio.empty())
      feats = train::audio_features_for_model(a.audio, lm.cfg, lm.model.in_mels, lm.model.in_frames, lm.class_names,
                                              {a.sets, a.pad, a.threads, a.device}, "embed");
    DataEmbeddings d = embed_data(lm, feats ? feats->dataset.string() : a.data, a.batch_size, stream);
    const io::DatasetInfo& info = d.ds->info();
    io::EmbeddingFile f;
    f.per_segment = a.per_segment;
    f.checkpoint = a.checkpoint;
    f.data = feats ? "(audio)" : a.data;
    f.class_names = feats ? std::vector<std::string>{} : info.class_names;
    // Audio rows: the files' paths, no labels (-1).
    auto file_name = [&](std::int64_t file) {
      return feats ? feats->sources[feats->written[std::size_t(file)]].string() : info.file_name(file);
    };
    train::Embeddings e;
    if (a.per_segment) {
      e = std::move(d.segments);
      train::normalize_rows(e);
      for (std::int64_t s = 0; s < e.rows; ++s) {
        f.names.push_back(fmt::format("{}#{}", file_name(info.file_of(s)), s % info.segments_per_file));
        f.labels.push_back(feats ? -1 : info.labels[std::size_t(s)]);
      }
    } else {
      e = train::file_embeddings(d.segments, info.segments_per_file);
      for (std::int64_t i = 0; i < e.rows; ++i) {
        f.names.push_back(file_name(i));
        f.labels.push_back(feats ? -1 : info.file_labels[std::size_t(i)]);
      }
    }
    f.rows = e.rows;
    f.dim = e.dim;
    f.values = std::move(e.values);
    io::write_embedding_file(a.out, f);
    fmt::print(stderr, "melforge embed: {} {} embeddings of {} to {}\n", f.rows, a.per_segment ? "segment" : "file",
               f.dim, a.out);
  });
}

// scores.csv: one row per trial.
std::string scores_csv(const std::vector<model::Trial>& trials, const std::vector<std::string>& names,
                       const std::vector<float>& raw, const std::vector<double>& normed) {
  std::string s = normed.empty() ? "label,file_a,file_b,score\n" : "label,file_a,file_b,score,raw_score\n";
  for (std::size_t t = 0; t < trials.size(); ++t) {
    s += fmt::format("{},{},{}", trials[t].label, io::csv_field(names[std::size_t(trials[t].a)]),
                     io::csv_field(names[std::size_t(trials[t].b)]));
    if (normed.empty()) s += fmt::format(",{:.7g}\n", raw[t]);
    else s += fmt::format(",{:.7g},{:.7g}\n", normed[t], raw[t]);
  }
  return s;
}

json rates_json(const model::ErrorRates& r) {
  return {{"eer", r.eer},
          {"eer_threshold", r.eer_threshold},
          {"min_dcf_0.05", r.min_dcf[0].value},
          {"min_dcf_0.01", r.min_dcf[1].value},
          {"targets", r.targets},
          {"nontargets", r.nontargets}};
}

// AS-norm statistics of each file of `files` against the cohort's file embeddings.
std::vector<model::CohortStats> cohort_statistics(const train::Embeddings& files, const train::Embeddings& cohort,
                                                 std::int64_t top) {
  MF_CHECK(cohort.dim == files.dim, "--cohort: embeddings of {} values, the data's have {}", cohort.dim, files.dim);
  MF_CHECK(top >= 2 && top <= cohort.rows, "--cohort-top: expected 2..{} (the cohort's files), found {}",
           cohort.rows, top);
  const std::vector<float> scores = train::all_pair_scores(files, cohort);  // every file against every cohort file
  return model::cohort_stats_rows(scores, files.rows, cohort.rows, top);
}

void register_verify(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "verify", "Score a trial list (VoxCeleb format: LABEL FILE_A FILE_B) by the cosine of the files' embeddings; "
                "writes EER and minDCF as JSON to stdout");
  static EmbedArgs a;
  add_model_options(cmd, a);
  cmd->get_option("--data")->required();
  cmd->add_option("--trials", a.trials, "Trial list: one '1 a b' (same speaker) or '0 a b' per line; names as in "
                                        "the data's /files, or #<index>")
      ->required()
      ->type_name("PATH");
  cmd->add_option("--out", a.scores_out, "Per-trial scores (CSV)")->type_name("PATH");
  cmd->add_option("--cohort", a.cohort, "Adaptive score normalisation (AS-norm) against this dataset's files")
      ->type_name("PATH");
  cmd->add_option("--cohort-top", a.cohort_top, "AS-norm: the N highest cohort scores of each file")
      ->default_str("300, or all the cohort's files when it has fewer");
  cmd->callback([cmd] {
    const Device dev = parse_device(a.device);
    Stream stream(dev, "verify");
    train::LoadedModel lm = train::load_model(a.checkpoint, a.device, a.precision, stream);
    apply_crop_options(a.crop, lm.cfg);
    DataEmbeddings d = embed_data(lm, a.data, a.batch_size, stream);
    const io::DatasetInfo& info = d.ds->info();
    const train::Embeddings files = train::file_embeddings(d.segments, info.segments_per_file);
    const std::vector<std::string> names = file_names(info);
    model::NameIndex index;
    try {
      index = model::index_names(names);
    } catch (const Error& e) {
      MF_THROW("{}: /files: {}", a.data, e.message());
    }
    std::vector<model::Trial> trials;
    try {
      trials = model::parse_trials(a.trials, index);
    } catch (const Error& e) {  // a name the data lacks may be the data's fault: say which names it has
      MF_THROW("{}; the data {} names its files {}", e.message(), a.data,
               info.file_names.empty() ? "#0, #1, ... (it has no /files)" : "by its /files");
    }
    MF_CHECK(!trials.empty(), "{}: no trials", a.trials);
    const auto targets = std::ranges::count_if(trials, [](const model::Trial& t) { return t.label == 1; });
    MF_CHECK(targets > 0 && targets < std::ssize(trials),
             "{}: {} target and {} non-target trials: the error rates need both kinds (label 1 and label 0 lines)",
             a.trials, targets, std::ssize(trials) - targets);
    const std::vector<float> raw = train::cosine_scores(files, trials, lm.ts->device(), stream.handle());
    const std::vector<std::int32_t> labels = model::trial_labels(trials);
    json j;
    j["checkpoint"] = a.checkpoint;
    j["data"] = a.data;
    j["trials_file"] = a.trials;
    j["files"] = files.rows;
    j["trials"] = trials.size();
    j["raw"] = rates_json(model::error_rates(raw, labels));
    std::vector<double> normed;
    if (!a.cohort.empty()) {
      DataEmbeddings c = embed_data(lm, a.cohort, a.batch_size, stream);
      const train::Embeddings cohort = train::file_embeddings(c.segments, c.ds->info().segments_per_file);
      // The default top never asks for more files than the cohort has; a value given is checked as given.
      if (cmd->count("--cohort-top") == 0) a.cohort_top = std::min(a.cohort_top, cohort.rows);
      normed = model::as_norm(raw, trials, cohort_statistics(files, cohort, a.cohort_top));
      j["as_norm"] = rates_json(model::error_rates(normed, labels));
      j["as_norm"]["cohort"] = a.cohort;
      j["as_norm"]["cohort_files"] = cohort.rows;
      j["as_norm"]["top"] = a.cohort_top;
    }
    const json& best = normed.empty() ? j["raw"] : j["as_norm"];
    for (const char* k : {"eer", "eer_threshold", "min_dcf_0.05", "min_dcf_0.01", "targets", "nontargets"})
      j[k] = best[k];
    if (!a.scores_out.empty()) write_text_atomic(a.scores_out, scores_csv(trials, names, raw, normed));
    fmt::print("{}\n", j.dump(2));
  });
}

}  // namespace

void register_data_trials(CLI::App& data) {
  auto* cmd = data.add_subcommand(
      "trials", "Write a trial list for a held-out set: per file up to N same-class (same-speaker) partners and N "
                "other-class ones, no pair twice; a class with few files gives fewer target trials");
  static std::string path, out;
  static std::int64_t per_file = 10;
  static std::uint64_t seed = 0;
  cmd->add_option("--data", path, "Dataset (HDF5)")->required()->type_name("PATH");
  cmd->add_option("--out", out, "Trial list (text)")->required()->type_name("PATH");
  cmd->add_option("--per-file", per_file, "Target and non-target trials per file")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", seed, "Seed")->capture_default_str();
  cmd->callback([] {
    const auto ds = io::Dataset::open(path);
    const io::DatasetInfo& info = ds->info();
    const auto trials = model::make_trials(info.file_labels, per_file, seed);
    model::write_trials(out, trials, file_names(info));
    std::int64_t targets = 0;
    for (const auto& t : trials) targets += t.label;
    fmt::print(stderr, "melforge data trials: {} trials ({} target, {} non-target) over {} files to {}\n",
               trials.size(), targets, std::int64_t(trials.size()) - targets, info.num_files, out);
  });
}

void register_verification(CLI::App& app) {
  register_embed(app);
  register_verify(app);
}

}  // namespace mf::cli
