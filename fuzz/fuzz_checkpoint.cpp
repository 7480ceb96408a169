// Fuzz target: a checkpoint as `melforge eval`, `predict` and `export` load it
// (train::load_model: model::read_checkpoint with its CRC checks, then the
// configuration TOML, precision, sizes, class names and parameter layout it
// holds, and the model rebuilt on the CPU), which is also the reader behind
// `train --resume` and `--init-from ckpt.h5`.
#include <cstdint>

#include "engine/error.hpp"
#include "fuzz/fuzz_support.hpp"
#include "train/load_model.hpp"

namespace {
constexpr const char* kTarget = "checkpoint";
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mf::fuzz::quiet();
  const std::string path = mf::fuzz::write_input(data, size, ".h5");
  try {
    const mf::train::LoadedModel lm = mf::train::load_model(path, "cpu", "");
    FUZZ_CHECK(lm.ts != nullptr, kTarget);
    FUZZ_CHECK(lm.class_names.size() == std::size_t(lm.model.classes), kTarget);
    FUZZ_CHECK(lm.normal_class >= 0 && lm.normal_class < lm.model.classes, kTarget);
  } catch (const mf::Error&) {
  } catch (...) {
    mf::fuzz::fail_uncaught(kTarget);
  }
  mf::fuzz::check_no_open_hdf5_objects(kTarget);
  return 0;
}
