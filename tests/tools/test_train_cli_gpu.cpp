// `melforge train` on the GPU (skipped without one): an end-to-end run with
// bf16 and the CUDA graph reaches high accuracy, its predictions agree with the
// same checkpoint evaluated on the CPU, and an interrupted run resumed with
// --resume auto is bit-identical to an uninterrupted one on the same GPU.
#include <doctest/doctest.h>

#include "model/checkpoint.hpp"
#include "tests/tools/train_cli_support.hpp"

namespace {
std::string gpu_model(const std::string& precision) {
  std::string m = kModel;
  m.replace(m.find("--device cpu"), 12, "--device cuda --precision " + precision);
  return m;
}
}  // namespace

TEST_CASE("GPU: end to end in bf16 with the CUDA graph; the checkpoint predicts the same on the CPU") {
  TempDir d("gpu_e2e");
  write_easy(d / "train.h5", 60, 1);
  write_easy(d / "val.h5", 18, 2);
  Result r = run(fmt::format("train --train {} --val {} --out {} --epochs 4 {}", d / "train.h5", d / "val.h5",
                             d / "run", gpu_model("bf16")));
  INFO(r.out);
  REQUIRE(r.code == 0);
  const json rep = read_json(d / "run/report.json");
  CHECK(rep["device"] == "cuda:0");
  CHECK(rep["val"]["file"]["accuracy"].get<double>() >= 0.9);
  const std::string best = d / "run/checkpoints/best.h5";
  r = run(fmt::format("predict --checkpoint {} --data {} --out {} --per-segment --device cuda", best, d / "val.h5",
                      d / "gpu.csv"));
  REQUIRE(r.code == 0);
  r = run(fmt::format("predict --checkpoint {} --data {} --out {} --per-segment --device cpu", best, d / "val.h5",
                      d / "cpu.csv"));
  REQUIRE(r.code == 0);
  const auto g = csv_rows(d / "gpu.csv"), c = csv_rows(d / "cpu.csv");
  REQUIRE(g.size() == c.size());
  auto column = [](const std::string& row, int k) {
    std::size_t b = 0;
    for (int i = 0; i < k; ++i) b = row.find(',', b) + 1;
    return row.substr(b, row.find(',', b) - b);
  };
  // segment,file,long,short,label,label_name,pred,...
  constexpr int kPred = 6;
  REQUIRE(column(g[0], kPred) == "pred");
  int differ = 0;
  for (std::size_t i = 1; i < g.size(); ++i) differ += column(g[i], kPred) != column(c[i], kPred);
  // Same bf16 weights, different accumulation order: near-ties may flip.
  CHECK(differ <= int(g.size() / 50));
}

TEST_CASE("GPU: resume is bit-identical to an uninterrupted run (fp32 and bf16, CUDA graph)") {
  TempDir d("gpu_resume");
  write_easy(d / "train.h5", 24, 3);
  write_easy(d / "val.h5", 6, 4);
  for (const char* p : {"fp32", "bf16"}) {
    const std::string common = fmt::format("--train {} --val {} --epochs 3 --grad-accum 2 --set model.dropout=0.25 {}",
                                           d / "train.h5", d / "val.h5", gpu_model(p));
    const std::string full = d / fmt::format("full_{}", p), part = d / fmt::format("part_{}", p);
    REQUIRE(run(fmt::format("train {} --out {}", common, full)).code == 0);
    REQUIRE(run(fmt::format("train {} --out {} --stop-after-steps 5", common, part)).code == 0);
    Result r = run(fmt::format("train {} --out {} --resume auto", common, part));
    INFO(r.out);
    REQUIRE(r.code == 0);
    const auto a = mf::model::read_checkpoint(mf::model::CheckpointDir(full + "/checkpoints", 1).list().front());
    const auto b = mf::model::read_checkpoint(mf::model::CheckpointDir(part + "/checkpoints", 1).list().front());
    for (const char* n : {"master", "adam_m", "adam_v", "adamw_state"})
      CHECK_MESSAGE(a.array(n).bytes == b.array(n).bytes, p, " ", n);
  }
}
