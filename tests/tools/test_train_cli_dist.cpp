// Data-parallel training, as a user runs it: `mpirun -np 2 melforge train`
// on this machine's CPUs (loopback, oversubscribed, as root), against one
// process. The guarantee checked: ordered gradients make a run on W processes
// bit-identical to one process running the same step as W times the
// micro-batches (train.batch_size / W, train.grad_accum x W): weights, AdamW
// moments and state, with dropout, augmentation, batch norm's running
// statistics and speaker-balanced metric losses; dist.reduce = fast repeats
// its bits and stays within rounding; resuming across world sizes continues
// bit for bit; a job whose processes disagree, or whose batch does not split,
// is refused with the reason; a killed or hung process ends the job; SIGTERM
// stops every process after the same step.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "model/checkpoint.hpp"
#include "tests/support/cli.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/tools/dist_support.hpp"

using namespace mf::testing;
namespace fs = std::filesystem;

namespace {

const char* kLeak =
    "--device cpu --progress off --seed 5 --set model.channels=[4,8] --set model.pools=[2,2] "
    "--set model.dense=16 --set model.dropout=0.3 --set augment.time_masks=1 --set augment.time_mask_width=3 "
    "--set reader.threads=1";

// A run's final validation in report.json, without its timings.
nlohmann::json val_report(const fs::path& report) {
  std::ifstream in(report);
  nlohmann::json v = nlohmann::json::parse(in)["val"];
  for (const char* timing : {"eval_s", "files_per_s", "segments_per_s"}) v.erase(timing);
  return v;
}

// The newest checkpoint in a run's checkpoints/ folder.
fs::path last_checkpoint(const fs::path& dir) { return mf::model::CheckpointDir(dir, 1).list().front(); }

struct LeakData {
  TempDir d{"dist"};
  std::string base, common;  // common: base for 2 epochs
  LeakData() {
    REQUIRE(run_cli(fmt::format("data synth --out {} --files 40 --classes 3 --mels 16 --frames 16 --long 1 "
                                "--short 2", d / "data")).code == 0);
    base = fmt::format("train --train {} --val {} {}", d / "data/train.h5", d / "data/val.h5", kLeak);
    common = base + " --epochs 2";
  }
};

}  // namespace

TEST_CASE("dist: 2 processes are bit-identical to one with grad_accum 2 (LeakCNN, dropout, augmentation)") {
  LeakData L;
  const CliResult one = run_cli(fmt::format("{} --out {} --batch-size 8 --grad-accum 2", L.common, L.d / "one"));
  REQUIRE_MESSAGE(one.code == 0, one.out);
  const CliResult two = sh(fmt::format("{} {} --out {} --batch-size 16", mpirun(2), L.common, L.d / "two"));
  REQUIRE_MESSAGE(two.code == 0, two.out);
  check_same_state(L.d / "one/checkpoints/ckpt-0000000006.h5", L.d / "two/checkpoints/ckpt-0000000006.h5");
  // Rank 0 alone reports: one summary, one report; the epoch line names the processes.
  CHECK(two.out.find("melforge train: 6 steps, 96 samples") != std::string::npos);
  CHECK(has(two, "over 2 processes (communication "));
  // Validation (each process its share of the batches, gathered): the single process's metrics.
  CHECK(val_report(L.d / "one/report.json") == val_report(L.d / "two/report.json"));
  CHECK(two.out.find("melforge train: 6 steps") == two.out.rfind("melforge train: 6 steps"));
  CHECK(fs::exists(L.d / "two/report.json"));

  // Resume across world sizes: from 2 processes at 1, and from 1 at 2, bit for bit.
  const std::string a = L.d / "a", b = L.d / "b", full = L.d / "one/checkpoints/ckpt-0000000006.h5";
  REQUIRE(sh(fmt::format("{} {} --out {} --batch-size 16 --stop-after-steps 4", mpirun(2), L.common, a)).code == 0);
  const CliResult at1 = run_cli(fmt::format("{} --out {} --batch-size 8 --grad-accum 2 --resume auto", L.common, a));
  REQUIRE_MESSAGE(at1.code == 0, at1.out);
  // The same step split another way is no change of settings.
  CHECK_MESSAGE(has(at1, "the checkpoint's run 2: the same 2 micro-batches of 8 a step"), at1.out);
  CHECK_MESSAGE(!has(at1, "differ from the run's"), at1.out);
  check_same_state(full, a + "/checkpoints/ckpt-0000000006.h5");
  REQUIRE(run_cli(fmt::format("{} --out {} --batch-size 8 --grad-accum 2 --stop-after-steps 4", L.common, b)).code == 0);
  const CliResult r =
      sh(fmt::format("{} {} --out {} --batch-size 16 --grad-accum 1 --resume auto", mpirun(2), L.common, b));
  REQUIRE_MESSAGE(r.code == 0, r.out);
  check_same_state(full, b + "/checkpoints/ckpt-0000000006.h5");
}

TEST_CASE("dist: 4 processes are bit-identical to one with grad_accum 4; some validate no batch at all") {
  // More processes than the reader's ring slots (3): each keeps its batch of
  // the 4 it reads (a process that held it across the others' reads trained
  // on other data). The validation set's 2 batches leave 2 processes nothing.
  LeakData L;
  const CliResult one = run_cli(fmt::format("{} --out {} --batch-size 8 --grad-accum 4", L.common, L.d / "one"));
  REQUIRE_MESSAGE(one.code == 0, one.out);
  const CliResult four = sh(fmt::format("{} {} --out {} --batch-size 32", mpirun(4), L.common, L.d / "four"));
  REQUIRE_MESSAGE(four.code == 0, four.out);
  REQUIRE(last_checkpoint(L.d / "one/checkpoints").filename() == last_checkpoint(L.d / "four/checkpoints").filename());
  check_same_state(last_checkpoint(L.d / "one/checkpoints"), last_checkpoint(L.d / "four/checkpoints"));
  CHECK(val_report(L.d / "one/report.json") == val_report(L.d / "four/report.json"));
}

TEST_CASE("dist: aam_softmax with speaker-balanced batches (data.per_class) is bit-identical too") {
  TempDir d("dist_spk");
  REQUIRE(run_cli(fmt::format("data synth --out {} --speakers 12 --files-per-speaker 4 --mels 16 --frames 16 "
                              "--long 1 --short 2", d / "data")).code == 0);
  const std::string common = fmt::format(
      "train --train {} --val {} --epochs 2 --device cpu --progress off --seed 3 --set model.channels=[4,8] "
      "--set model.pools=[2,2] --set model.dense=16 --set model.embedding=8 --set loss.type=aam_softmax "
      "--set model.heads=class --set data.per_class=2 --set reader.threads=1", d / "data/train.h5",
      d / "data/val.h5");
  REQUIRE(run_cli(fmt::format("{} --out {} --batch-size 4 --grad-accum 2", common, d / "one")).code == 0);
  const CliResult two = sh(fmt::format("{} {} --out {} --batch-size 8", mpirun(2), common, d / "two"));
  REQUIRE_MESSAGE(two.code == 0, two.out);
  REQUIRE(last_checkpoint(d / "one/checkpoints").filename() == last_checkpoint(d / "two/checkpoints").filename());
  check_same_state(last_checkpoint(d / "one/checkpoints"), last_checkpoint(d / "two/checkpoints"));
  // Verification on the validation speakers, each process embedding its share of the segments: the same EER.
  CHECK(val_report(d / "one/report.json") == val_report(d / "two/report.json"));
  CHECK(val_report(d / "two/report.json")["verification"].contains("eer"));
}

TEST_CASE("dist: a batch-norm stack with dropout and augmentation is bit-identical, running statistics included") {
  LeakData L;
  const std::string stack =
      "--set model.arch=cnn --set 'model.layers=[{type=\"conv\",k=3,cout=4,batch_norm=true,pool=2},"
      "{type=\"residual\",cout=8,stride=2},{type=\"global_avg_pool\"},{type=\"dropout\",p=0.2},"
      "{type=\"dense\",units=16}]'";
  const CliResult one =
      run_cli(fmt::format("{} {} --out {} --batch-size 8 --grad-accum 2", L.common, stack, L.d / "one"));
  REQUIRE_MESSAGE(one.code == 0, one.out);
  // fast equals ordered at one micro-batch per process (a + b either way).
  // Buckets of 64 values start one by one during the backward, a layer's as
  // soon as it is done: a bucket started before its last gradient was
  // written would sum a stale value and break the equality.
  for (const char* reduce : {"ordered", "fast", "fast --set dist.bucket_mb=0.000244140625"}) {
    CAPTURE(reduce);
    const std::string out = L.d / fmt::format("r{}", std::strlen(reduce));
    const CliResult two = sh(fmt::format("{} {} {} --out {} --batch-size 16 --set dist.reduce={}", mpirun(2),
                                         L.common, stack, out, reduce));
    REQUIRE_MESSAGE(two.code == 0, two.out);
    check_same_state(L.d / "one/checkpoints/ckpt-0000000006.h5", out + "/checkpoints/ckpt-0000000006.h5");
  }
}

TEST_CASE("dist: fast's buckets, started during LeakCNN's backward, sum what one process adds") {
  LeakData L;
  const CliResult one = run_cli(fmt::format("{} --out {} --batch-size 8 --grad-accum 2", L.common, L.d / "one"));
  REQUIRE_MESSAGE(one.code == 0, one.out);
  const CliResult two = sh(fmt::format("{} {} --out {} --batch-size 16 --set dist.reduce=fast "
                                       "--set dist.bucket_mb=0.000244140625", mpirun(2), L.common, L.d / "two"));
  REQUIRE_MESSAGE(two.code == 0, two.out);
  check_same_state(L.d / "one/checkpoints/ckpt-0000000006.h5", L.d / "two/checkpoints/ckpt-0000000006.h5");
}

TEST_CASE("dist: a job is refused when its processes disagree or its batch does not split") {
  LeakData L;
  // Different settings per process (mpirun's MPMD form): the key is named.
  CliResult r = sh(fmt::format("{} {} --out {} --batch-size 16 : -np 1 {} {} --out {} --batch-size 16 --lr 0.002",
                               mpirun(1), L.common, L.d / "x", binary(), L.common, L.d / "x"));
  CHECK(r.code != 0);
  CHECK_MESSAGE(has(r, "rank 1: its configuration differs from rank 0's: optim.lr: 0.001 -> 0.002"), r.out);
  r = sh(fmt::format("{} {} --out {} --batch-size 15", mpirun(2), L.common, L.d / "y"));
  CHECK(r.code != 0);
  CHECK_MESSAGE(has(r, "train.batch_size = 15 does not split over 2 processes: use 14 or 16"), r.out);
  // Fewer micro-batches than one step of every process needs: the processes are named.
  r = sh(fmt::format("{} {} --out {} --batch-size 32 --grad-accum 2", mpirun(2), L.common, L.d / "z"));
  CHECK(r.code != 0);
  CHECK_MESSAGE(has(r, "micro-batches of 16 (train.batch_size 32 over 2 processes), fewer than one step needs (2 "
                       "processes x train.grad_accum=2)"), r.out);
}

TEST_CASE("dist: a killed process ends the whole job, naming it, within seconds") {
  LeakData L;
  // A run long enough to be in the middle of its steps when one process is
  // killed from outside (the newest melforge of the job).
  const std::string out = L.d / "k";
  const std::string cmd = fmt::format("{} {} --out {} --batch-size 16 --epochs 100000 & JOB=$!; sleep 3; "
                                      "kill -9 $(pgrep -n -f 'melforge train .*--out {}'); wait $JOB",
                                      mpirun(2), L.base, out, out);
  const auto t0 = std::chrono::steady_clock::now();
  const CliResult r = sh("(" + cmd + ")");  // the whole job's output, not only wait's
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.code != 0);
  CHECK_MESSAGE(s < 60, "the job took ", s, " s to end");
  CHECK_MESSAGE(has(r, "exited on signal 9"), r.out);
}

TEST_CASE("dist: SIGTERM to the job's processes stops every one after the same step: one checkpoint, exit 0") {
  LeakData L;
  const std::string out = L.d / "t";
  // The processes are mpirun's children (scancel signals Slurm's tasks the same way).
  const CliResult r = sh(fmt::format("({} {} --out {} --batch-size 16 --epochs 100000 & JOB=$!; sleep 3; "
                                     "pkill -TERM -P $JOB; wait $JOB)", mpirun(2), L.base, out));
  REQUIRE_MESSAGE(r.code == 0, r.out);
  CHECK(has(r, "SIGTERM: stopping after step"));
  const auto saved = mf::model::CheckpointDir(out + "/checkpoints", 1).list();
  REQUIRE(!saved.empty());
  const std::int64_t step = mf::model::read_checkpoint(saved.front()).get_int("step");
  CHECK_MESSAGE(has(r, fmt::format("melforge train: {} steps", step)), r.out);
}

TEST_CASE("dist: a process that stops answering ends the job after dist.timeout, naming what was awaited") {
  LeakData L;
  const std::string out = L.d / "h";
  // SIGSTOP: the process is alive but never answers (a hung process, a node gone quiet).
  const auto t0 = std::chrono::steady_clock::now();
  const CliResult r = sh(fmt::format("({} {} --out {} --batch-size 16 --epochs 100000 --set dist.timeout=4 & JOB=$!; "
                                     "sleep 3; kill -STOP $(pgrep -n -P $JOB); wait $JOB)", mpirun(2), L.base, out));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.code != 0);
  CHECK_MESSAGE(s < 40, "the job took ", s, " s to end");
  CHECK_MESSAGE(has(r, "no answer from the other processes for 4 s while"), r.out);
}

TEST_CASE("dist: dist.reduce = fast repeats its bits and stays within rounding of ordered") {
  LeakData L;
  // 2 processes x 2 micro-batches: fast adds (g0 + g2) + (g1 + g3), ordered ((g0 + g1) + g2) + g3.
  const auto train = [&](const std::string& name, const std::string& reduce) {
    const CliResult r = sh(fmt::format("{} {} --out {} --batch-size 8 --grad-accum 2 --set dist.reduce={}", mpirun(2),
                                       L.common, L.d / name, reduce));
    REQUIRE_MESSAGE(r.code == 0, r.out);
    return mf::model::read_checkpoint(L.d / name + "/checkpoints/ckpt-0000000006.h5");
  };
  const mf::model::Checkpoint f1 = train("f1", "fast"), f2 = train("f2", "fast"), o = train("o", "ordered");
  const auto& a = f1.array("master").bytes;
  CHECK(std::memcmp(a.data(), f2.array("master").bytes.data(), a.size()) == 0);
  const auto* x = reinterpret_cast<const float*>(a.data());
  const auto* y = reinterpret_cast<const float*>(o.array("master").bytes.data());
  float worst = 0, scale = 0;
  for (std::size_t i = 0; i < a.size() / sizeof(float); ++i) {
    worst = std::max(worst, std::fabs(x[i] - y[i]));
    scale = std::max(scale, std::fabs(y[i]));
  }
  CHECK_MESSAGE(worst <= 1e-5f * scale, "max |fast - ordered| ", worst, " for weights up to ", scale);
}

TEST_CASE("dist: whole utterances, random crops and 3-crop validation are bit-identical to one process") {
  TempDir d("dist_utt");
  REQUIRE(run_cli(fmt::format("data synth --out {} --speakers 8 --files-per-speaker 6 --mels 16 --frames 12 "
                              "--max-frames 48 --utterances", d / "data")).code == 0);
  const std::string common = fmt::format(
      "train --train {0}/train.h5 --val {0}/val.h5 --epochs 2 --device cpu --progress off --seed 3 "
      "--set model.arch=cnn --set 'model.layers=[{{type=\"conv\",k=3,cout=8,batch_norm=true,pool=2}},"
      "{{type=\"global_avg_pool\"}}]' --set model.embedding=16 --set model.heads=class --set loss.type=aam_softmax "
      "--set data.crop_frames=20 --set eval.crops=3 --set reader.threads=1", d / "data");
  const CliResult one = run_cli(fmt::format("{} --out {} --batch-size 4 --grad-accum 2", common, d / "one"));
  REQUIRE_MESSAGE(one.code == 0, one.out);
  const CliResult two = sh(fmt::format("{} {} --out {} --batch-size 8", mpirun(2), common, d / "two"));
  REQUIRE_MESSAGE(two.code == 0, two.out);
  REQUIRE(last_checkpoint(d / "one/checkpoints").filename() == last_checkpoint(d / "two/checkpoints").filename());
  check_same_state(last_checkpoint(d / "one/checkpoints"), last_checkpoint(d / "two/checkpoints"));
  CHECK(val_report(d / "one/report.json") == val_report(d / "two/report.json"));
}
