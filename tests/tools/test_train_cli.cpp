// `melforge train / eval / predict / export / plot` as a user runs them, on the
// CPU: configuration errors, an end-to-end run reaching high accuracy, exact
// resume, SIGINT, a bad dataset leaving the previous checkpoint intact, and
// export loaded into the PyTorch reference module.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <system_error>

#include "io/h5_writer.hpp"
#include "model/checkpoint.hpp"
#include "model/run_config.hpp"
#include "tests/support/testing.hpp"
#include "tests/tools/train_cli_support.hpp"

namespace fs = std::filesystem;
using nlohmann::json;


TEST_CASE("train: configuration errors name the key and what is accepted") {
  TempDir d("cfg");
  write_easy(d / "train.h5", 6, 1);
  const std::string base = fmt::format("train --train {} --out {} ", d / "train.h5", d / "run");
  Result r = run(base + "--set train.lr=0.1");
  CHECK(r.code == 1);
  CHECK(has(r, "unknown configuration key 'train.lr'; did you mean optim.lr?"));
  r = run(base + "--epochs ten");
  CHECK(r.code == 1);
  CHECK(has(r, "train.epochs: expected integer (an integer > 0), found 'ten'"));
  r = run(base + "--batch-size=-1");
  CHECK(r.code == 1);
  CHECK(has(r, "train.batch_size: expected auto or an integer > 0, found -1"));
  r = run(base + "--precision fp8");
  CHECK(has(r, "train.precision: expected one of auto, fp32, bf16, fp16, found 'fp8'"));
#ifdef NDEBUG
  // A user's message names keys and values, not melforge's source lines;
  // --verbose adds the line that raised it.
  CHECK_FALSE(has(r, ".cpp:"));
  r = run(base + "--precision fp8 --verbose");
  CHECK(has(r, "found 'fp8' [model/run_config.cpp:"));
#endif
  std::ofstream(d / "bad.toml") << "[optim]\nlr = \"fast\"\n";
  r = run(base + "--config " + d / "bad.toml");
  CHECK(r.code == 1);
  CHECK(has(r, "bad.toml: optim.lr: expected float"));
  r = run("train --out " + d / "run");
  CHECK(r.code == 1);
  CHECK(has(r, "data.train: a training set is required"));
  r = run("train --train " + d / "missing.h5" + " --out " + d / "run");
  CHECK(r.code == 1);
  CHECK(has(r, "missing.h5"));
  CHECK_FALSE(fs::exists(d / "run/checkpoints"));
  r = run("train --help");
  CHECK(r.code == 0);
  for (const auto& k : mf::model::config_keys()) CHECK_MESSAGE(has(r, k.key), k.key);
  for (const char* f : {"--train", "--val", "--out", "--epochs", "--batch-size", "--lr", "--precision", "--device",
                        "--seed", "--resume", "--limit-batches", "--overfit-batches", "--fast-dev-run", "--config",
                        "--set", "--init-from", "--profile-steps", "--gpu-cache"})
    CHECK_MESSAGE(has(r, f), f);
}

TEST_CASE("train end to end on the CPU: high file-level accuracy, run directory, eval, predict, export -> PyTorch") {
  TempDir d("e2e");
  write_easy(d / "train.h5", 60, 1);
  write_easy(d / "val.h5", 18, 2);
  const std::string run_dir = d / "run";
  Result r = run(fmt::format("train --train {} --val {} --test {} --out {} --epochs 4 {}", d / "train.h5",
                             d / "val.h5", d / "val.h5", run_dir, kModel));
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(has(r, "final validation: segments: accuracy"));
  CHECK(has(r, "; files: accuracy"));
  CHECK(has(r, "-bound: "));  // the epoch's bottleneck verdict (which one depends on this machine's load)
  const json rep = read_json(run_dir + "/report.json");
  CHECK(rep["val"]["file"]["accuracy"].get<double>() >= 0.9);
  CHECK(rep["val"]["segment"]["accuracy"].get<double>() >= 0.8);
  CHECK(rep["test"]["file"]["accuracy"].get<double>() >= 0.9);
  CHECK(rep["val"]["file"]["confusion_matrix"].size() == 3);
  CHECK(rep["val"]["files_per_s"].get<double>() > 0);
  CHECK(rep["steps"] == 4 * (60 * 6 / 16));
  // The figures the PyTorch comparison reads (bench/compare_torch.py).
  CHECK(rep["time_to_first_step_s"].get<double>() > 0);
  CHECK(rep["dataset_load_s"].get<double>() >= 0);
  CHECK(rep["launch_to_first_step_excl_load_s"].get<double>() <= rep["time_to_first_step_s"].get<double>());
  CHECK(rep["epoch_time_s"].get<double>() > 0);
  CHECK(rep["steady_samples_per_s"].get<double>() > 0);
  CHECK(rep["peak_device_memory_bytes"].is_null());  // CPU run
  // Run directory.
  mf::model::RunConfig cfg;
  mf::model::load_toml_file(cfg, run_dir + "/config.toml");
  CHECK(cfg.epochs == 4);
  CHECK(cfg.channels == std::vector<std::int64_t>{4, 8});
  const auto lines = read_lines(run_dir + "/metrics.jsonl");
  int train = 0, epoch = 0, eval = 0;
  for (const auto& j : lines) {
    const std::string t = j["type"];
    train += t == "train";
    epoch += t == "epoch";
    eval += t == "eval";
    if (t == "epoch") {
      const std::string kind = j["bottleneck"]["kind"];
      CHECK((kind == "compute-bound" || kind == "input-bound" || kind == "launch/sync-bound"));
      CHECK(!j["bottleneck"]["suggestion"].get<std::string>().empty());
      CHECK(j["phases"]["step_ms"].get<double>() > 0);
      CHECK(j["phases"]["forward_ms"].get<double>() > 0);
      CHECK(j["phases"]["per_layer_ms"].contains("fwd.block0"));
    }
  }
  CHECK(train >= 4 * 5);
  CHECK(epoch == 4);
  CHECK(eval == 5);  // 4 validations + the test set
  for (const char* f : {"loss.svg", "accuracy.svg", "throughput.svg", "checkpoints/best.h5"})
    CHECK_MESSAGE(fs::exists(run_dir + "/" + f), f);
  CHECK(mf::model::CheckpointDir(run_dir + "/checkpoints", 1).list().size() == 3);  // keep_last

  // eval prints JSON; the last checkpoint reproduces the final validation.
  const auto last = mf::model::CheckpointDir(run_dir + "/checkpoints", 1).list().front().string();
  r = run(fmt::format("eval --checkpoint {} --data {} --device cpu --batch-size 16", last, d / "val.h5"));
  REQUIRE(r.code == 0);
  const json ev = json::parse(r.out.substr(r.out.find('{')));
  CHECK(ev["file"]["accuracy"] == rep["val"]["file"]["accuracy"]);
  CHECK(ev["segment"]["macro_f1"] == rep["val"]["segment"]["macro_f1"]);
  CHECK(ev["files"] == 18);

  // predict: a row per file, and per segment.
  r = run(fmt::format("predict --checkpoint {} --data {} --out {}", last, d / "val.h5", d / "files.csv"));
  REQUIRE(r.code == 0);
  const auto frows = csv_rows(d / "files.csv");
  REQUIRE(frows.size() == 19);
  CHECK(frows[0] == "file,label,label_name,pred,pred_name,leak,leak_prob,prob_normal,prob_leak_low,prob_leak_high");
  r = run(fmt::format("predict --checkpoint {} --data {} --out {} --per-segment", last, d / "val.h5", d / "segs.csv"));
  REQUIRE(r.code == 0);
  CHECK(csv_rows(d / "segs.csv").size() == 18 * 6 + 1);
  // A failed write names the file and the reason, and leaves no temporary file.
  fs::create_directories(d / "taken.csv/inside");
  r = run(fmt::format("predict --checkpoint {} --data {} --out {}", last, d / "val.h5", d / "taken.csv"));
  CHECK(r.code == 1);
  CHECK(has(r, d / "taken.csv"));
  CHECK(has(r, std::error_code(EISDIR, std::generic_category()).message()));
  r = run(fmt::format("predict --checkpoint {} --data {} --out {}", last, d / "val.h5", d / "missing/p.csv"));
  CHECK(r.code == 1);
  CHECK(has(r, std::error_code(ENOENT, std::generic_category()).message()));
  for (const auto& e : fs::directory_iterator(d.path))
    CHECK_MESSAGE(e.path().filename().string().rfind(".tmp-", 0) != 0, e.path().string());

  // export -> the PyTorch reference module gives the same predictions.
  r = run(fmt::format("export --checkpoint {} --format safetensors --out {}", last, d / "model.safetensors"));
  REQUIRE(r.code == 0);
  CHECK(mf::testing::run_oracle("leakcnn_predict.py",
                                fmt::format("{} {} {}", d / "model.safetensors", d / "val.h5", d / "segs.csv")) == 0);

  // plot regenerates the curves; --init-from starts from the exported weights.
  fs::remove(run_dir + "/loss.svg");
  r = run("plot " + run_dir);
  CHECK(r.code == 0);
  CHECK(fs::exists(run_dir + "/loss.svg"));
  r = run(fmt::format("train --train {} --val {} --out {} --epochs 1 --limit-batches 1 --init-from {} {}",
                      d / "train.h5", d / "val.h5", d / "run_init", d / "model.safetensors", kModel));
  INFO(r.out);
  REQUIRE(r.code == 0);
  const json rep2 = read_json(d / "run_init/report.json");
  CHECK(rep2["val"]["file"]["accuracy"].get<double>() >= 0.9);  // one small step from trained weights
}

// Data without a leak target (no /leak, no class named "normal": digits,
// words): model.heads = auto gives the class head alone, and no leak figure
// appears anywhere a user looks.
TEST_CASE("heads: data without a leak target trains the class head alone; no leak metric anywhere") {
  TempDir d("heads");
  const std::vector<std::string> digits = {"zero", "one", "two"};
  write_easy(d / "train.h5", 60, 1, -1, digits);
  write_easy(d / "val.h5", 18, 2, -1, digits);
  const std::string run_dir = d / "run";
  Result r = run(fmt::format("train --train {} --val {} --test {} --out {} --epochs 3 {}", d / "train.h5",
                             d / "val.h5", d / "val.h5", run_dir, kModel));
  INFO(r.out);
  REQUIRE(r.code == 0);
  auto no_leak = [](const std::string& where, const std::string& text) {
    INFO(where);
    std::string lower = text;
    for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
    for (std::size_t at; (at = lower.find("leakcnn")) != std::string::npos;) lower.erase(at, 7);  // the model's name
    CHECK(lower.find("leak") == std::string::npos);
    CHECK(lower.find("false alarm") == std::string::npos);
  };
  no_leak("train output", r.out);
  auto file_text = [](const std::string& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  no_leak("metrics.jsonl", file_text(run_dir + "/metrics.jsonl"));
  no_leak("report.json", file_text(run_dir + "/report.json"));
  for (const char* plot : {"/loss.svg", "/accuracy.svg"}) no_leak(plot, file_text(run_dir + plot));
  mf::model::RunConfig cfg;
  mf::model::load_toml_file(cfg, run_dir + "/config.toml");
  CHECK(cfg.heads == mf::model::Heads::class_only);  // recorded resolved
  const json rep = read_json(run_dir + "/report.json");
  CHECK(rep["test"]["file"]["accuracy"].get<double>() >= 0.9);
  const std::string ckpt = run_dir + "/checkpoints/best.h5";
  r = run(fmt::format("eval --checkpoint {} --data {} --device cpu", ckpt, d / "val.h5"));
  REQUIRE(r.code == 0);
  no_leak("eval JSON", r.out);
  r = run(fmt::format("predict --checkpoint {} --data {} --out {} --device cpu", ckpt, d / "val.h5", d / "p.csv"));
  REQUIRE(r.code == 0);
  no_leak("predict CSV", file_text(d / "p.csv"));
  // A leak metric for early stopping is refused, naming the key.
  r = run(fmt::format("train --train {} --val {} --out {} --epochs 1 --set eval.metric=val.file.leak_auc {}",
                      d / "train.h5", d / "val.h5", d / "run_leak_metric", kModel));
  CHECK(r.code != 0);
  CHECK(has(r, "eval.metric"));
}

TEST_CASE("train.batch_size = auto (the default) resolves from the training set and is recorded") {
  TempDir d("autobatch");
  write_easy(d / "train.h5", 200, 1);  // 1,200 segments: 32 is the largest batch leaving 32 steps an epoch
  const std::string run_dir = d / "run";
  const Result r = run(fmt::format("train --train {} --out {} --epochs 1 --set model.channels=[4,8] "
                                   "--set model.pools=[2,2] --set model.dense=16 --progress plain --device cpu",
                                   d / "train.h5", run_dir));
  INFO(r.out);
  REQUIRE(r.code == 0);
  mf::model::RunConfig cfg;
  mf::model::load_toml_file(cfg, run_dir + "/config.toml");
  CHECK(cfg.batch_size == 32);
  CHECK(read_json(run_dir + "/report.json")["steps"] == 1200 / 32);

  // A set smaller than the smallest auto batch trains one step an epoch over
  // every segment; a batch larger than the set is refused naming real keys.
  write_easy(d / "tiny.h5", 2, 2);  // 12 segments
  const std::string tiny = fmt::format("train --train {} --epochs 2 --set model.channels=[4,8] --set model.pools=[2,2] "
                                       "--set model.dense=16 --progress plain --device cpu", d / "tiny.h5");
  Result t = run(fmt::format("{} --out {}", tiny, d / "tiny_auto"));
  INFO(t.out);
  REQUIRE(t.code == 0);
  CHECK(has(t, "train.batch_size = auto: 12 for 12 training segments"));
  CHECK(read_json(d / "tiny_auto/report.json")["steps"] == 2);
  t = run(fmt::format("{} --out {} --batch-size 16", tiny, d / "tiny_16"));
  CHECK(t.code == 1);
  CHECK(has(t, "train.batch_size = 16"));
  CHECK(has(t, "train.drop_last = false"));
  CHECK_FALSE(has(t, "last_batch"));
}

// Runs 3 epochs straight and stopped at steps 3, 4 and 9 then resumed, with
// `extra` options; the final weights, moments and optimizer state must be
// the same bits. Returns the straight run's final weights.
std::vector<unsigned char> check_resume_bit_identical(const std::string& tag, const std::string& extra) {
  TempDir d(tag);
  write_easy(d / "train.h5", 24, 3);
  write_easy(d / "val.h5", 6, 4);
  // 24 files * 6 segments / 16 = 9 batches; accumulate 2 -> 4 steps per epoch; 3 epochs.
  const std::string common =
      fmt::format("--train {} --val {} --epochs 3 --grad-accum 2 --set model.dropout=0.25 {} {}", d / "train.h5",
                  d / "val.h5", kModel, fmt::format(fmt::runtime(extra), d / "val.h5"));
  REQUIRE(run(fmt::format("train {} --out {}", common, d / "full")).code == 0);
  const auto final_of = [&](const std::string& dir) {
    return mf::model::read_checkpoint(mf::model::CheckpointDir(dir + "/checkpoints", 1).list().front());
  };
  const mf::model::Checkpoint want = final_of(d / "full");
  CHECK(want.get_int("step") == 12);
  for (int stop : {3, 4, 9}) {  // mid-epoch, at an epoch's end, mid-epoch after a validation
    const std::string out = d / fmt::format("part{}", stop);
    Result r = run(fmt::format("train {} --out {} --stop-after-steps {}", common, out, stop));
    INFO(r.out);
    REQUIRE(r.code == 0);
    CHECK(final_of(out).get_int("step") == stop);
    r = run(fmt::format("train {} --out {} --resume auto", common, out));
    REQUIRE(r.code == 0);
    CHECK(has(r, "resuming from"));
    const mf::model::Checkpoint got = final_of(out);
    CHECK(got.get_int("step") == 12);
    for (const char* a : {"master", "adam_m", "adam_v", "adamw_state"})
      CHECK_MESSAGE(got.array(a).bytes == want.array(a).bytes, "array ", a, " after stopping at step ", stop);
    // The resumed run's log reads as one run: train lines at the same steps.
    std::vector<std::int64_t> s1, s2;
    for (const auto& j : read_lines(d / "full/metrics.jsonl"))
      if (j["type"] == "train") s1.push_back(j["step"]);
    for (const auto& j : read_lines(out + "/metrics.jsonl"))
      if (j["type"] == "train") s2.push_back(j["step"]);
    CHECK(s1 == s2);
  }
  // A fresh run into a directory with checkpoints is refused (no silent mixing).
  Result r = run(fmt::format("train {} --out {}", common, d / "full"));
  CHECK(r.code == 1);
  CHECK(has(r, "already holds checkpoints"));
  return want.array("master").bytes;
}

TEST_CASE("resume: an interrupted run continued with --resume auto is bit-identical to an uninterrupted one") {
  const auto plain = check_resume_bit_identical("resume", "");
  // Again with every augmentation on (masks, shift, gain, background noise,
  // mixup): its draws come from the seed and the optimizer step, never from
  // state that a resume could lose.
  const auto augmented = check_resume_bit_identical(
      "resume_aug",
      "--set augment.time_masks=2 --set augment.time_mask_width=3 --set augment.freq_masks=1 "
      "--set augment.freq_mask_width=2 --set augment.time_shift=2 --set augment.gain_db=4 "
      "--set augment.noise={} --set augment.noise_snr_db=[0,10] --set augment.mixup_alpha=0.4");
  CHECK(plain != augmented);  // the augmentation did change what was trained on
}

TEST_CASE("resume: the run's own configuration is the default; keys given again override it, each named") {
  TempDir d("resume_cfg");
  write_easy(d / "train.h5", 12, 21);  // 72 segments / 16 = 4 steps an epoch
  const std::string out = d / "run";
  Result r = run(fmt::format("train --train {} --out {} --epochs 2 {} --stop-after-steps 2", d / "train.h5", out,
                             kModel));
  INFO(r.out);
  REQUIRE(r.code == 0);
  // An interrupted run reports the speed of the steps it ran.
  CHECK(read_json(out + "/report.json")["train_samples_per_s"].get<double>() > 0);
  CHECK_FALSE(has(r, " 0 samples/s"));
  // As the README shows it: only --resume auto and --out. The data, the model,
  // --epochs 2 and the rest come from the run itself, not from the defaults.
  r = run(fmt::format("train --out {} --resume auto --progress plain", out));
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(has(r, "resuming from"));
  CHECK(has(r, "; augmentation off"));
  CHECK_FALSE(has(r, "differ from the run's"));
  CHECK(read_json(out + "/report.json")["steps"] == 8);  // 2 epochs, not the default 10
  mf::model::RunConfig saved;
  mf::model::load_toml_file(saved, out + "/config.toml");
  CHECK(saved.epochs == 2);
  CHECK(saved.resume.empty());  // config.toml records the run, not how a process started
  std::ifstream cf(out + "/config.toml");
  const std::string text((std::istreambuf_iterator<char>(cf)), std::istreambuf_iterator<char>());
  CHECK(text.find("resume = 'auto'") == std::string::npos);
  CHECK(text.find("resume = ''") != std::string::npos);

  // A key given again overrides the run's value, named with both values.
  r = run(fmt::format("train --out {} --resume auto --epochs 3 --set optim.clip_norm=0.5 --set augment.time_masks=1 "
                      "--set augment.time_mask_width=2", out));
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(has(r, "; augmentation 1 time masks of <= 2 frames"));
  CHECK(has(r, "train.epochs: 2 -> 3"));
  CHECK(has(r, "optim.clip_norm: 1.0 -> 0.5"));
  CHECK(read_json(out + "/report.json")["steps"] == 12);
  mf::model::load_toml_file(saved, out + "/config.toml");
  CHECK(saved.epochs == 3);
  CHECK(saved.clip_norm == 0.5);
}

TEST_CASE("classes are matched by name: a validation set or eval data with foreign classes is refused") {
  TempDir d("class_names");
  write_easy(d / "train.h5", 12, 31);  // normal, leak_low, leak_high
  write_easy(d / "foreign.h5", 4, 32, -1, {"valve", "pump", "fan"});
  Result r = run(fmt::format("train --train {} --val {} --out {} --epochs 1 {}", d / "train.h5", d / "foreign.h5",
                             d / "run", kModel));
  CHECK(r.code == 1);
  CHECK_MESSAGE(has(r, "its classes (attribute class_names) are [valve, pump, fan], the training set " +
                           (d / "train.h5") + " has [normal, leak_low, leak_high]"),
                r.out);
  REQUIRE(run(fmt::format("train --train {} --out {} --epochs 1 {}", d / "train.h5", d / "run", kModel)).code == 0);
  const std::string ckpt = mf::model::CheckpointDir(d / "run/checkpoints", 1).list().front().string();
  r = run(fmt::format("eval --checkpoint {} --data {} --device cpu", ckpt, d / "foreign.h5"));
  CHECK(r.code == 1);
  CHECK_MESSAGE(has(r, "checkpoint " + ckpt + " has [normal, leak_low, leak_high]: class 'valve' (label 0) is not "
                       "one of them"), r.out);
  // predict names files as the data's /files does, and each segment's label by name too.
  write_easy(d / "named.h5", 3, 33, -1, {"normal", "leak_low", "leak_high"},
             {"site/a.wav", "site/b, with comma.wav", "site/c.wav"});
  r = run(fmt::format("predict --checkpoint {} --data {} --out {} --device cpu", ckpt, d / "named.h5",
                      d / "named.csv"));
  REQUIRE(r.code == 0);
  const auto nrows = csv_rows(d / "named.csv");
  REQUIRE(nrows.size() == 4);
  CHECK(nrows[1].rfind("site/a.wav,0,normal,", 0) == 0);
  CHECK(nrows[2].rfind("\"site/b, with comma.wav\",1,leak_low,", 0) == 0);
  r = run(fmt::format("predict --checkpoint {} --data {} --out {} --device cpu --per-segment", ckpt, d / "named.h5",
                      d / "named_segs.csv"));
  REQUIRE(r.code == 0);
  const auto srows = csv_rows(d / "named_segs.csv");
  CHECK(srows[0].rfind("segment,file,long,short,label,label_name,pred,pred_name", 0) == 0);
  CHECK(srows[7].rfind("6,\"site/b, with comma.wav\",0,0,1,leak_low,", 0) == 0);
  // --threshold takes what eval.threshold takes: (0, 1).
  for (const char* t : {"0", "1"}) {
    r = run(fmt::format("eval --checkpoint {} --data {} --device cpu --threshold {}", ckpt, d / "train.h5", t));
    CHECK(r.code != 0);
    CHECK_MESSAGE(has(r, "expected a number in (0, 1), as eval.threshold"), r.out);
  }
}

TEST_CASE("resume of a run that stopped early does not train on") {
  TempDir d("early");
  write_easy(d / "train.h5", 12, 11);
  write_easy(d / "val.h5", 6, 12);
  // No evaluation after the first counts as an improvement: the second stops the run.
  const std::string cmd = fmt::format("train --train {} --val {} --out {} --epochs 20 {} --set eval.patience=1 "
                                      "--set eval.min_delta=100",
                                      d / "train.h5", d / "val.h5", d / "run", kModel);
  Result r = run(cmd);
  INFO(r.out);
  REQUIRE(r.code == 0);
  const json first = read_json(d / "run/report.json");
  REQUIRE(first["early_stopped"] == true);
  r = run(cmd + " --resume auto");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const json again = read_json(d / "run/report.json");
  CHECK(again["early_stopped"] == true);
  CHECK(again["steps"] == first["steps"]);
}

TEST_CASE("SIGINT finishes the step, writes a checkpoint and exits 0; a bad dataset leaves it intact") {
  TempDir d("sigint");
  write_easy(d / "train.h5", 90, 5);
  const std::string out = d / "run";
  const std::string cmd = fmt::format("{} train --train {} --out {} --epochs 1000 {} --set log.interval=1", bin(),
                                      d / "train.h5", out, kModel);
  // Start, wait for the first log line, interrupt, report the exit code.
  const Result r = sh(fmt::format(
      "({0} > {1} 2>&1 & pid=$!; for i in $(seq 1 300); do grep -q 'step 2/' {1} && break; sleep 0.1; done; "
      "kill -INT $pid; wait $pid; echo exit=$?)",
      cmd, d / "log.txt"));
  std::ifstream lf(d / "log.txt");
  const std::string log((std::istreambuf_iterator<char>(lf)), std::istreambuf_iterator<char>());
  INFO(log);
  CHECK(has(r, "exit=0"));
  CHECK(log.find("SIGINT: stopping after step") != std::string::npos);
  const auto found = mf::model::newest_good_checkpoint(out + "/checkpoints");
  REQUIRE(found.has_value());
  const std::int64_t step = found->checkpoint.get_int("step");
  CHECK(step >= 2);
  const auto bytes_before = fs::file_size(found->path);

  // A file that is not HDF5, and a dataset with a NaN in the middle: both end
  // with exit 1 and a message, and the checkpoint is untouched.
  std::ofstream(d / "junk.h5") << "definitely not HDF5";
  Result bad = run(fmt::format("train --train {} --out {} --epochs 1000 {} --resume auto", d / "junk.h5", out, kModel));
  CHECK(bad.code == 1);
  CHECK(has(bad, "junk.h5"));
  write_easy(d / "nan.h5", 90, 5, 60);
  bad = run(fmt::format("train --train {} --out {} --epochs 1000 {} --resume auto", d / "nan.h5", out, kModel));
  INFO(bad.out);
  CHECK(bad.code == 1);
  CHECK((has(bad, "NaN") || has(bad, "non-finite")));
  const auto after = mf::model::newest_good_checkpoint(out + "/checkpoints");
  REQUIRE(after.has_value());
  CHECK(after->path == found->path);
  CHECK(fs::file_size(after->path) == bytes_before);
  CHECK(after->checkpoint.get_int("step") == step);
}

TEST_CASE("fast-dev-run and overfit-batches") {
  TempDir d("dev");
  write_easy(d / "train.h5", 12, 6);
  write_easy(d / "val.h5", 6, 7);
  Result r = run(fmt::format("train --train {} --val {} --out {} --fast-dev-run {}", d / "train.h5", d / "val.h5",
                             d / "run", kModel));
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(read_json(d / "run/report.json")["steps"] == 1);
  CHECK_FALSE(fs::exists(d / "run/checkpoints/best.h5"));
  r = run(fmt::format("train --train {} --out {} --overfit-batches 2 --epochs 40 {}", d / "train.h5", d / "over",
                      kModel));
  INFO(r.out);
  REQUIRE(r.code == 0);
  const json rep = read_json(d / "over/report.json");
  CHECK(rep["val"]["split"] == "train-overfit");
  CHECK(rep["val"]["segment"]["count"] == 30);  // 2 batches of 16, cut to whole files of 6
  CHECK(rep["val"]["segment"]["accuracy"].get<double>() >= 0.9);
}

TEST_CASE("an undefined eval.metric (leak AUC of a single-label validation set) never stops the run early") {
  TempDir d("nanmetric");
  write_easy(d / "train.h5", 12, 21);
  write_easy(d / "val.h5", 1, 22);  // one file of class 0: no leak label, leak AUC is NaN
  write_easy(d / "test.h5", 6, 23);
  const Result r = run(fmt::format("train --train {} --val {} --test {} --out {} --epochs 3 {} "
                                   "--set eval.metric=val.segment.leak_auc --set eval.patience=1",
                                   d / "train.h5", d / "val.h5", d / "test.h5", d / "run", kModel));
  INFO(r.out);
  REQUIRE(r.code == 0);
  // Warned once, naming the metric and why.
  const std::string warning = "eval.metric val.segment.leak_auc is undefined (NaN)";
  const auto first = r.out.find(warning);
  CHECK(first != std::string::npos);
  CHECK(r.out.find(warning, first + 1) == std::string::npos);
  CHECK(has(r, "single leak label"));
  const json rep = read_json(d / "run/report.json");
  CHECK(rep["early_stopped"] == false);
  CHECK(rep["steps"].get<std::int64_t>() > 0);
  // Without a finite value the newest checkpoint is the best: the test set uses it.
  CHECK(fs::exists(d / "run/checkpoints/best.h5"));
  CHECK(rep["best_metric"]["step"] == rep["steps"]);
  CHECK(rep["test_weights"].get<std::string>().rfind("best", 0) == 0);
}

TEST_CASE("a best.h5 left by an earlier run in --out is refused by a fresh run and never used for the test set") {
  TempDir d("stalebest");
  write_easy(d / "train.h5", 12, 31);
  write_easy(d / "val.h5", 6, 32);
  write_easy(d / "test.h5", 6, 33);
  const std::string sets = fmt::format("--train {} --val {} --test {} --out {} {}", d / "train.h5", d / "val.h5",
                                       d / "test.h5", d / "run", kModel);
  Result r = run("train --epochs 1 " + sets);
  INFO(r.out);
  REQUIRE(r.code == 0);
  REQUIRE(fs::exists(d / "run/checkpoints/best.h5"));
  // Only best.h5 is left (the ckpt-*.h5 removed): still an earlier run's checkpoint.
  for (const auto& e : fs::directory_iterator(d / "run/checkpoints"))
    if (e.path().filename() != "best.h5") fs::remove(e.path());
  r = run("train --epochs 1 " + sets);
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK(has(r, "already holds checkpoints"));
  // --fast-dev-run writes no checkpoint and skips that check: the leftover
  // best.h5 must not stand in for its best weights.
  r = run("train --fast-dev-run " + sets);
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(read_json(d / "run/report.json")["test_weights"] == "final");
  CHECK(has(r, "was not written by this run"));
}
