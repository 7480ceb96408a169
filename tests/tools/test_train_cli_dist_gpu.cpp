// Data-parallel training on GPUs, as a user runs it: `mpirun -np 2 melforge
// train --device cuda` against one process on the same GPU with twice the
// gradient accumulation (skipped without a GPU; on the CUDA emulator in CI).
// The guarantee checked is the CPU suite's (test_train_cli_dist): with the
// ordered reduction, W processes are bit-identical to one process running
// the step as W times the micro-batches (weights, AdamW moments and state),
// with dropout, augmentation and batch norm's running statistics, in fp32 and
// bf16; the one process replays a CUDA graph, the W processes run eagerly.
// With one GPU both processes share it and the gradients go through host
// memory over MPI (NCCL needs a GPU per process: asking for it is refused
// with the reason); with two, NCCL carries them.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>

#include "tests/support/cli.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/tools/dist_support.hpp"

using namespace mf::testing;

namespace {

const char* kLeak =
    "--device cuda --progress off --seed 5 --set model.channels=[16,16] --set model.pools=[2,2] "
    "--set model.dense=16 --set model.dropout=0.3 --set augment.time_masks=1 --set augment.time_mask_width=3 "
    "--set reader.threads=1";

// A carried build on a GPU machine without Open MPI: nothing to launch with.
#define MF_NEED_MPIRUN()                                                            \
  if (!mpirun_available()) {                                                        \
    MESSAGE("skipped: no mpirun at MELFORGE_MPIRUN (a build carried elsewhere?)"); \
    return;                                                                         \
  }

struct LeakData {
  TempDir d{"dist_gpu"};
  std::string common;
  LeakData() {
    REQUIRE(run_cli(fmt::format("data synth --out {} --files 40 --classes 3 --mels 16 --frames 16 --long 1 "
                                "--short 2", d / "data")).code == 0);
    common = fmt::format("train --train {} --val {} {} --epochs 2", d / "data/train.h5", d / "data/val.h5", kLeak);
  }
};

}  // namespace

TEST_CASE("dist on a GPU: 2 processes are bit-identical to one with grad_accum 2 (LeakCNN, fp32 and bf16)") {
  MF_NEED_MPIRUN();
  LeakData L;
  for (const std::string precision : {"fp32", "bf16"}) {
    CAPTURE(precision);
    const std::string one = L.d / fmt::format("one_{}", precision), two = L.d / fmt::format("two_{}", precision);
    const CliResult a = run_cli(
        fmt::format("{} --precision {} --out {} --batch-size 8 --grad-accum 2", L.common, precision, one));
    REQUIRE_MESSAGE(a.code == 0, a.out);
    const CliResult b =
        sh(fmt::format("{} {} --precision {} --out {} --batch-size 16", mpirun(2), L.common, precision, two));
    REQUIRE_MESSAGE(b.code == 0, b.out);
    CHECK_MESSAGE(has(b, "data parallelism: 2 processes on GPUs"), b.out);
    // One GPU for both or a build without NCCL (the emulator): MPI through
    // host memory; two GPUs: NCCL. The same bits either way.
    CHECK_MESSAGE(has(b, "gradients gathered in order over "), b.out);
    check_same_state(one + "/checkpoints/ckpt-0000000006.h5", two + "/checkpoints/ckpt-0000000006.h5");
  }
}

TEST_CASE("dist on a GPU: a batch-norm stack is bit-identical, running statistics included (ordered and fast)") {
  MF_NEED_MPIRUN();
  LeakData L;
  const std::string stack =
      "--set model.arch=cnn --set 'model.layers=[{type=\"conv\",k=3,cout=16,batch_norm=true,pool=2},"
      "{type=\"residual\",cout=16,stride=2},{type=\"global_avg_pool\"},{type=\"dropout\",p=0.2},"
      "{type=\"dense\",units=16}]'";
  const CliResult one =
      run_cli(fmt::format("{} {} --out {} --batch-size 8 --grad-accum 2", L.common, stack, L.d / "one"));
  REQUIRE_MESSAGE(one.code == 0, one.out);
  // fast equals ordered at one micro-batch per process; with buckets of 64
  // values, each starts during the backward (NCCL's on its own stream, MPI's
  // through host memory).
  for (const std::string reduce : {"ordered", "fast", "fast --set dist.bucket_mb=0.000244140625"}) {
    CAPTURE(reduce);
    const std::string out = L.d / fmt::format("r{}", reduce.size());
    const CliResult two = sh(fmt::format("{} {} {} --out {} --batch-size 16 --set dist.reduce={}", mpirun(2),
                                         L.common, stack, out, reduce));
    REQUIRE_MESSAGE(two.code == 0, two.out);
    check_same_state(L.d / "one/checkpoints/ckpt-0000000006.h5", out + "/checkpoints/ckpt-0000000006.h5");
  }
}

TEST_CASE("dist on a GPU: dist.transport = nccl where NCCL cannot run is refused, saying why") {
  MF_NEED_MPIRUN();
  LeakData L;
  // Both processes on cuda:0 (an explicit index is kept): NCCL refuses two ranks on one GPU.
  const CliResult r = sh(fmt::format("{} {} --out {} --batch-size 16 --set train.device=cuda:0 "
                                     "--set dist.transport=nccl", mpirun(2), L.common, L.d / "nccl"));
  CHECK(r.code != 0);
  // Built without NCCL (the emulator), or both processes on one GPU.
  CHECK_MESSAGE(has(r, "dist.transport = nccl: NCCL cannot carry this job: "), r.out);
}
