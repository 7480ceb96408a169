// Transfer learning on the CPU (issue 37): `--init-from` a 2-class run into a
// 3-class run loads the trunk (and the leak head) and re-initialises the class
// head from the seed, saying so by name; a trunk of another shape is refused;
// `train.freeze` keeps the frozen parameters' bits through training and a
// resume, while the others train.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstring>
#include <string>
#include <vector>

#include "model/checkpoint.hpp"
#include "model/run_config.hpp"
#include "model/safetensors.hpp"
#include "tests/tools/train_cli_support.hpp"

using namespace train_cli;

namespace {

std::string newest_checkpoint(const std::string& run_dir) {
  return mf::model::CheckpointDir(run_dir + "/checkpoints", 1).list().front().string();
}

// The run's newest checkpoint exported: PyTorch names -> raw bytes.
mf::model::SafeTensors exported(const TempDir& d, const std::string& run_dir, const std::string& name) {
  const std::string out = d / (name + ".safetensors");
  const Result r = run(fmt::format("export --checkpoint {} --format safetensors --out {}", newest_checkpoint(run_dir),
                                   out));
  REQUIRE_MESSAGE(r.code == 0, r.out);
  return mf::model::read_safetensors(out);
}

bool same_bits(const mf::model::SafeTensors& a, const mf::model::SafeTensors& b, const std::string& name) {
  return a.at(name).shape == b.at(name).shape && a.at(name).bytes == b.at(name).bytes;
}

const std::vector<std::string> kTrunk = {"blocks.0.conv.weight", "blocks.0.conv.bias", "blocks.1.conv.weight",
                                         "blocks.1.conv.bias",   "fc.weight",          "fc.bias"};

}  // namespace

TEST_CASE("--init-from a 2-class run into 3 classes: trunk loaded, class head re-initialised; train.freeze") {
  TempDir d("transfer");
  write_easy(d / "two.h5", 24, 1, -1, {"normal", "leak"});
  write_easy(d / "three.h5", 36, 2);
  write_easy(d / "three_val.h5", 18, 3);
  Result r = run(fmt::format("train --train {} --out {} --epochs 2 {}", d / "two.h5", d / "src", kModel));
  REQUIRE_MESSAGE(r.code == 0, r.out);
  const mf::model::SafeTensors src = exported(d, d / "src", "src");
  REQUIRE(src.at("class_head.weight").shape == mf::Shape{2, 16});

  // lr 1e-30: one step leaves every weight's bits where it started (the
  // update is far below half an ulp), so the run's checkpoint shows step 0.
  const std::string still = fmt::format(
      "train --train {} --out {{}} --epochs 1 --limit-batches 1 {} --set optim.lr=1e-30", d / "three.h5", kModel);
  r = run(fmt::format(fmt::runtime(still), d / "fresh"));
  REQUIRE_MESSAGE(r.code == 0, r.out);
  const mf::model::SafeTensors fresh = exported(d, d / "fresh", "fresh");
  for (const std::string& from : {newest_checkpoint(d / "src"), d / "src.safetensors"}) {
    CAPTURE(from);
    r = run(fmt::format(fmt::runtime(still), d / "init") + " --init-from " + from);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    CHECK_MESSAGE(has(r, "re-initialised from train.seed: class_head.weight (shape [2, 16] there, [3, 16] here), "
                         "class_head.bias (shape [2] there, [3] here)"), r.out);
    CHECK_MESSAGE(has(r, "loaded 8 parameters (blocks.0.conv.weight, blocks.1.conv.weight, fc.weight, "
                         "leak_head.weight, blocks.0.conv.bias"), r.out);
    const mf::model::SafeTensors init = exported(d, d / "init", "init");
    for (const std::string& name : kTrunk) CHECK_MESSAGE(same_bits(init, src, name), name);
    CHECK(same_bits(init, src, "leak_head.weight"));
    // The new head: a fresh run's values from the same seed.
    CHECK(same_bits(init, fresh, "class_head.weight"));
    CHECK(same_bits(init, fresh, "class_head.bias"));
    CHECK_FALSE(same_bits(init, fresh, "fc.weight"));
    fs::remove_all(d / "init");
  }

  // A trunk of another shape is an error naming the parameter and both shapes.
  r = run(fmt::format(fmt::runtime(still), d / "other") + " --set model.dense=8 --init-from " +
          newest_checkpoint(d / "src"));
  CHECK(r.code == 1);
  CHECK_MESSAGE(has(r, "trunk parameter 'fc.weight' is [16, 128] there and [8, 128] here"), r.out);

  // Training from the transferred trunk works.
  r = run(fmt::format("train --train {} --val {} --out {} --epochs 3 --init-from {} {}", d / "three.h5",
                      d / "three_val.h5", d / "tuned", d / "src.safetensors", kModel));
  REQUIRE_MESSAGE(r.code == 0, r.out);
  CHECK(read_json(d / "tuned/report.json")["val"]["file"]["accuracy"].get<double>() >= 0.8);

  // train.freeze: an unknown entry lists the modules.
  r = run(fmt::format(fmt::runtime(still), d / "bad") + " --set 'train.freeze=[blocks.0, nothing]'");
  CHECK(r.code == 1);
  CHECK_MESSAGE(has(r, "train.freeze: 'nothing' names no parameter of the model; its modules: blocks.0.conv, "
                       "blocks.1.conv, fc, class_head, leak_head"), r.out);
  // The trunk frozen: its bits stay the source's through training and a
  // resume (the list is in the checkpoint's config), the heads train.
  const std::string frozen = fmt::format("train --train {} --out {} --init-from {} {}", d / "three.h5", d / "frozen",
                                         d / "src.safetensors", kModel);
  r = run(frozen + " --epochs 1 --set 'train.freeze=[blocks, fc]'");
  REQUIRE_MESSAGE(r.code == 0, r.out);
  CHECK_MESSAGE(has(r, "train.freeze: 6 of 10 parameters frozen (no update): blocks.0.conv.weight"), r.out);
  r = run(frozen + " --epochs 2 --resume auto");
  REQUIRE_MESSAGE(r.code == 0, r.out);
  mf::model::RunConfig saved;
  mf::model::load_toml_file(saved, d / "frozen/config.toml");
  CHECK(saved.freeze == std::vector<std::string>{"blocks", "fc"});
  const mf::model::SafeTensors tuned = exported(d, d / "frozen", "frozen");
  for (const std::string& name : kTrunk) CHECK_MESSAGE(same_bits(tuned, src, name), name);
  CHECK_FALSE(same_bits(tuned, src, "leak_head.weight"));
  CHECK_FALSE(same_bits(tuned, fresh, "class_head.weight"));
  CHECK_FALSE(same_bits(tuned, fresh, "class_head.bias"));
}
