// `melforge data build` with the FFT and mel projection on the GPU
// (--device cuda: pinned slots, copy streams and events in
// audio/feature_pipeline.cpp, the CUDA logmel op) against the same build on
// the CPU twin: the same files in the same order and splits, the same labels,
// and features within the CUDA op's tolerance (tests/audio/test_logmel_gpu.cpp
// states it: a floor of 2e-4 dB plus 1e-5 * 10^(h/20) dB, h the depth below
// the strongest band of the frame). Several batches, a partial last one, and a
// bad file in the middle, so the ring of slots turns over. Skipped (77)
// without a GPU; runs on the CUDA emulator in the emulated build.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "audio/dataset_builder.hpp"
#include "io/dataset.hpp"
#include "tests/audio/test_audio_files.hpp"

namespace fs = std::filesystem;
using namespace mf;

namespace {
audio::BuildOptions options(const fs::path& root, const fs::path& out, Device dev) {
  audio::BuildOptions o;
  o.audio_root = root;
  o.out_dir = out;
  auto& p = o.pipeline.frontend;
  p.sample_rate = 8000;
  p.n_fft = 256;
  p.hop_length = 128;
  p.n_mels = 16;
  p.frames = 8;
  p.long_segments = 2;
  p.short_segments = 2;
  o.dtype = DType::f32;
  o.seed = 5;
  o.pipeline.device = dev;
  o.pipeline.threads = 2;
  o.pipeline.batch_files = 4;
  return o;
}

std::vector<float> values(const fs::path& h5, io::DatasetInfo& info) {
  auto ds = io::Dataset::open(h5.string());
  info = ds->info();
  std::vector<float> v(std::size_t(info.num_segments * info.segment_elems()));
  ds->read_all(DType::f32, v.data(), true, 1);
  return v;
}
}  // namespace

TEST_CASE("data build on the GPU: the CPU build's files, labels and features within the op's tolerance") {
  mf::testing::TempDir dir("audio_build_gpu");
  mf::testing::write_class_folders(dir.path() / "audio", {"normal", "leak"}, 11);
  std::ofstream(dir.path() / "audio/leak/broken.wav") << "not audio";
  const auto cpu = audio::build_dataset(options(dir.path() / "audio", dir.path() / "cpu", Device::cpu()));
  const auto gpu = audio::build_dataset(options(dir.path() / "audio", dir.path() / "gpu", Device::cuda(0)));
  REQUIRE(gpu.skipped.size() == 1);
  CHECK(gpu.skipped[0].path == "leak/broken.wav");
  for (std::size_t k = 0; k < 3; ++k) {
    const auto& c = cpu.splits[k];
    const auto& g = gpu.splits[k];
    CAPTURE(c.name);
    REQUIRE(!c.path.empty());
    CHECK(mf::testing::read_h5_strings(c.path, "files") == mf::testing::read_h5_strings(g.path, "files"));
    io::DatasetInfo ci, gi;
    const auto a = values(c.path, ci), b = values(g.path, gi);
    CHECK(ci.file_labels == gi.file_labels);
    REQUIRE(a.size() == b.size());
    // Per frame column: h = depth of each value below the column's strongest band.
    const std::int64_t M = ci.n_mels, T = ci.frames;
    double worst = 0;
    for (std::int64_t seg = 0; seg < ci.num_segments; ++seg)
      for (std::int64_t t = 0; t < T; ++t) {
        double top = -1e30;
        for (std::int64_t m = 0; m < M; ++m) top = std::max(top, double(a[std::size_t((seg * M + m) * T + t)]));
        for (std::int64_t m = 0; m < M; ++m) {
          const std::size_t i = std::size_t((seg * M + m) * T + t);
          const double h = top - a[i], err = std::abs(double(a[i]) - b[i]);
          worst = std::max(worst, err / (2e-4 + 1e-5 * std::pow(10.0, h / 20)));
        }
      }
    MESSAGE(c.name, ": largest error / tolerance ", worst);
    CHECK(worst <= 1.0);
  }
}
