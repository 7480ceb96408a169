// Configuration-described CNN stacks (model.arch = cnn, and the preset
// resnet34se-light) through every user path of the CLI on the CPU: `data
// synth`, `train`, `eval`, `predict`, `export` loaded into PyTorch
// (tests/oracle/cnn_stack_export.py against predict's CSV), `--init-from`
// (safetensors and checkpoint), `--resume auto` after `--stop-after-steps`
// (bit-identical to an uninterrupted run), and the refusal of a checkpoint or
// export whose layers differ from the configured ones. Tiny data (16 x 16
// segments) and few steps: seconds each on 2 cores.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/checkpoint.hpp"
#include "model/run_config.hpp"
#include "tests/support/testing.hpp"
#include "tests/tools/train_cli_support.hpp"

namespace {

// conv + batch norm + pool, a residual block with SE and a projection
// shortcut (stride 2, 8 -> 16 channels), attentive statistics pooling, dense.
const std::string kStack = R"([model]
arch = "cnn"

[[model.layers]]
type = "conv"
k = 3
cout = 8
batch_norm = true
pool = 2

[[model.layers]]
type = "residual"
cout = 16
stride = {}
se = 4

[[model.layers]]
type = "attentive_stats_pool"
stats = "mean+std"

[[model.layers]]
type = "dense"
units = 16
)";

// 20 files of 2 x 2 segments of 16 x 16 (train 12 files = 48 segments, val 4, test 4).
void synth(const TempDir& d) {
  const Result r = run(fmt::format("data synth --out {} --files 20 --mels 16 --frames 16 --long 2 --short 2 --seed 3",
                                   d / "data"));
  INFO(r.out);
  REQUIRE(r.code == 0);
}

std::string write_stack(const TempDir& d, const std::string& name, int stride) {
  const std::string path = d / name;
  std::ofstream(path) << fmt::format(fmt::runtime(kStack), stride);
  return path;
}

mf::model::Checkpoint final_checkpoint(const std::string& run_dir) {
  return mf::model::read_checkpoint(mf::model::CheckpointDir(run_dir + "/checkpoints", 1).list().front());
}

std::vector<float> master_of(const mf::model::Checkpoint& c) {
  const auto& bytes = c.array("master").bytes;
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

// The share of entries of `a` within `tol` of `b`'s.
double share_close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  REQUIRE(a.size() == b.size());
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += std::fabs(a[i] - b[i]) <= tol;
  return double(n) / double(a.size());
}

const std::string kRun = "--batch-size 8 --device cpu --progress plain --set log.interval=2";

}  // namespace

TEST_CASE("cnn stack: train, eval, predict, export -> PyTorch, --init-from; other layers are refused") {
  TempDir d("stack");
  synth(d);
  const std::string cfg = write_stack(d, "stack.toml", 2), data = d / "data";
  const std::string run_dir = d / "run";
  Result r = run(fmt::format("train --config {} --train {}/train.h5 --val {}/val.h5 --test {}/test.h5 --out {} "
                             "--epochs 2 {}",
                             cfg, data, data, data, run_dir, kRun));
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(has(r, "cnn(input 1x16x16, layers [conv 3x3/1 8 bn relu pool2; residual 16/2 se4; "
               "attentive_stats_pool mean+std; dense 16 relu]"));
  const json rep = read_json(run_dir + "/report.json");
  CHECK(rep["steps"] == 2 * 48 / 8);
  CHECK(std::isfinite(rep["val"]["loss"].get<double>()));
  mf::model::RunConfig saved;
  mf::model::load_toml_file(saved, run_dir + "/config.toml");
  CHECK(saved.arch == mf::model::Arch::cnn);
  CHECK(saved.layers.size() == 4);
  const std::string last = mf::model::CheckpointDir(run_dir + "/checkpoints", 1).list().front().string();

  // eval: the final checkpoint reproduces the final validation.
  r = run(fmt::format("eval --checkpoint {} --data {}/val.h5 --device cpu --batch-size 8", last, data));
  REQUIRE(r.code == 0);
  const json ev = json::parse(r.out.substr(r.out.find('{')));
  CHECK(ev["segments"] == 16);
  CHECK(ev["step"] == 12);
  CHECK(ev["segment"]["accuracy"] == rep["val"]["segment"]["accuracy"]);
  CHECK(ev["loss"].get<double>() == doctest::Approx(rep["val"]["loss"].get<double>()).epsilon(1e-6));

  // predict: a row per file and per segment (a batch size that leaves a padded batch).
  r = run(fmt::format("predict --checkpoint {} --data {}/test.h5 --out {} --device cpu", last, data, d / "files.csv"));
  REQUIRE(r.code == 0);
  const auto frows = csv_rows(d / "files.csv");
  REQUIRE(frows.size() == 4 + 1);
  CHECK(frows[0] == "file,label,label_name,pred,pred_name,leak,leak_prob,prob_normal,prob_leak_low,prob_leak_mid,"
                    "prob_leak_high");
  r = run(fmt::format("predict --checkpoint {} --data {}/test.h5 --out {} --per-segment --device cpu --batch-size 5",
                      last, data, d / "segs.csv"));
  REQUIRE(r.code == 0);
  CHECK(csv_rows(d / "segs.csv").size() == 16 + 1);

  // export -> PyTorch's CnnStack from the file's own description gives predict's probabilities.
  r = run(fmt::format("export --checkpoint {} --out {}", last, d / "model.safetensors"));
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(has(r, "33 tensors"));  // 25 parameters + 8 running statistics
  CHECK(mf::testing::run_oracle("cnn_stack_export.py", fmt::format("{} {}/test.h5 {}", d / "model.safetensors", data,
                                                                   d / "segs.csv")) == 0);

  // --init-from: the export and the checkpoint start the same run (the same
  // bits after a step), from the trained weights: with a tiny learning rate
  // everything but the running statistics (112 of 4936 entries, moved by
  // batch norm's momentum) stays where training left it; a fresh start does not.
  const std::string one = fmt::format("train --config {} --train {}/train.h5 --epochs 1 --limit-batches 1 --lr 1e-9 {}",
                                      cfg, data, kRun);
  r = run(fmt::format("{} --out {} --init-from {}", one, d / "init_st", d / "model.safetensors"));
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(has(r, "initial weights from"));
  r = run(fmt::format("{} --out {} --init-from {}", one, d / "init_h5", last));
  REQUIRE(r.code == 0);
  r = run(fmt::format("{} --out {}", one, d / "fresh"));
  REQUIRE(r.code == 0);
  const auto trained = master_of(mf::model::read_checkpoint(last));
  const auto from_st = master_of(final_checkpoint(d / "init_st"));
  CHECK(from_st == master_of(final_checkpoint(d / "init_h5")));
  CHECK(share_close(from_st, trained, 1e-6f) >= 0.97);
  CHECK(share_close(master_of(final_checkpoint(d / "fresh")), trained, 1e-6f) < 0.5);

  // A stack of the same parameters (names, shapes, count) but another stride
  // is refused, naming the layer, from an export, a checkpoint, and on resume.
  const std::string cfg1 = write_stack(d, "stride1.toml", 1);
  const std::string other = fmt::format("train --config {} --train {}/train.h5 --epochs 1 {}", cfg1, data, kRun);
  for (const std::string& from : {d / "model.safetensors", last}) {
    r = run(fmt::format("{} --out {} --init-from {}", other, d / "other", from));
    CHECK(r.code == 1);
    CHECK_MESSAGE(has(r, "model.layers[1] is {\"cout\":16,\"se\":4,\"stride\":2,\"type\":\"residual\"} there"), r.out);
  }
  r = run(fmt::format("{} --out {} --resume auto", other, run_dir));
  CHECK(r.code == 1);
  CHECK_MESSAGE(has(r, "--resume"), r.out);
  CHECK_MESSAGE(has(r, "model.layers[1]"), r.out);
  // LeakCNN from a stack's export, or from its checkpoint.
  for (const std::string& from : {d / "model.safetensors", last}) {
    r = run(fmt::format("train --train {}/train.h5 --out {} --epochs 1 {} --init-from {}", data, d / "leakcnn", kRun,
                        from));
    CHECK(r.code == 1);
    CHECK_MESSAGE((has(r, "its model is a CNN stack, the configured model is LeakCNN (model.arch)") ||
                   has(r, "(model.channels/pools/kernel/dense differ?)")),
                  r.out);
  }
}

TEST_CASE("cnn stack: --resume auto after --stop-after-steps is bit-identical to an uninterrupted run") {
  TempDir d("stack_resume");
  synth(d);
  // Batch norm (running statistics in the master buffer), dropout and
  // accumulation; the layers inline, as --set writes them.
  const std::string data = d / "data";
  const std::string common = fmt::format(
      "train --train {}/train.h5 --val {}/val.h5 --epochs 2 --grad-accum 2 {} --set model.arch=cnn "
      "--set 'model.layers=[{{type=\"conv\", cout=8, batch_norm=true, pool=2}}, {{type=\"residual\", cout=16, "
      "stride=2, se=4}}, {{type=\"dropout\", p=0.25}}, {{type=\"attentive_stats_pool\", stats=\"mean+std\"}}, "
      "{{type=\"dense\", units=16}}]'",
      data, data, kRun);
  Result r = run(fmt::format("{} --out {}", common, d / "full"));
  INFO(r.out);
  REQUIRE(r.code == 0);
  const mf::model::Checkpoint want = final_checkpoint(d / "full");
  REQUIRE(want.get_int("step") == 6);  // 48 segments / 8 = 6 batches, accumulate 2: 3 steps x 2 epochs
  r = run(fmt::format("{} --out {} --stop-after-steps 4", common, d / "part"));  // after a validation, mid-epoch
  REQUIRE(r.code == 0);
  CHECK(final_checkpoint(d / "part").get_int("step") == 4);
  r = run(fmt::format("{} --out {} --resume auto", common, d / "part"));
  REQUIRE(r.code == 0);
  CHECK(has(r, "resuming from"));
  const mf::model::Checkpoint got = final_checkpoint(d / "part");
  CHECK(got.get_int("step") == 6);
  for (const char* a : {"master", "adam_m", "adam_v", "adamw_state"})
    CHECK_MESSAGE(got.array(a).bytes == want.array(a).bytes, "array ", a);
}

TEST_CASE("resnet34se-light: train, predict, export -> PyTorch") {
  TempDir d("preset");
  synth(d);
  const std::string data = d / "data";
  Result r = run(fmt::format("train --set model.arch=resnet34se-light --train {}/train.h5 --out {} --epochs 1 "
                             "--limit-batches 2 {}",
                             data, d / "run", kRun));
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(has(r, "resnet34se-light(input 1x16x16"));
  CHECK(has(r, "1443899 parameters"));
  const std::string last = mf::model::CheckpointDir(d / "run/checkpoints", 1).list().front().string();
  r = run(fmt::format("predict --checkpoint {} --data {}/val.h5 --out {} --per-segment --device cpu", last, data,
                      d / "segs.csv"));
  REQUIRE(r.code == 0);
  r = run(fmt::format("export --checkpoint {} --out {}", last, d / "model.safetensors"));
  REQUIRE(r.code == 0);
  CHECK(mf::testing::run_oracle("cnn_stack_export.py", fmt::format("{} {}/val.h5 {}", d / "model.safetensors", data,
                                                                   d / "segs.csv")) == 0);
}
