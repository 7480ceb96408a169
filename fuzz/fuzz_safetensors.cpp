// Fuzz target: a .safetensors file as `melforge train --init-from
// model.safetensors` reads it (train::init_weights_from: model::read_safetensors,
// then every parameter looked up by its PyTorch name, shape-checked, converted
// from F32/BF16/F16 and imported into a LeakCNN). The model is the small one
// fuzz/make_seeds.sh trains and exports for the seeds (kSeedModel below), so
// the seeds get past the name and shape checks.
#include <cstdint>
#include <memory>

#include "engine/error.hpp"
#include "fuzz/fuzz_support.hpp"
#include "model/safetensors.hpp"
#include "model/train_step.hpp"
#include "train/load_model.hpp"

namespace {
constexpr const char* kTarget = "safetensors";

// Must match the model of fuzz/make_seeds.sh (data synth --mels 16 --frames 16
// --classes 4; model.channels=[4,4,4], model.dense=8).
mf::model::TrainStep& seed_model() {
  static std::unique_ptr<mf::model::TrainStep> ts = [] {
    mf::model::TrainConfig tc;
    tc.model.in_mels = 16;
    tc.model.in_frames = 16;
    tc.model.channels = {4, 4, 4};
    tc.model.pools = {2, 2, 2};
    tc.model.kernel = 3;
    tc.model.dense = 8;
    tc.model.classes = 4;
    tc.model.validate();
    tc.micro_batch = 1;
    tc.cuda_graph = false;
    return std::make_unique<mf::model::TrainStep>(tc, mf::Device::cpu());
  }();
  return *ts;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mf::fuzz::quiet();
  mf::model::TrainStep& ts = seed_model();
  const std::string path = mf::fuzz::write_input(data, size, ".safetensors");
  try {
    mf::train::init_weights_from(ts, path);
  } catch (const mf::Error&) {
  } catch (...) {
    mf::fuzz::fail_uncaught(kTarget);
  }
  return 0;
}
