// train::cosine_scores' device path on the GPU (ops::trial_scores' CUDA
// kernel, trials in batches) against the host double reference and the CPU
// twin: equal to f32 rounding, identical bits for any batch size and on a
// rerun; an out-of-range trial is an error naming it (checked on the host, so
// the kernel's NaN never reaches the caller). Runs only where a GPU (or the
// CUDA emulator) is usable; else exits 77 (skipped).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "engine/stream.hpp"
#include "tests/support/testing.hpp"
#include "train/embeddings.hpp"

using namespace mf;

TEST_CASE("cosine_scores gpu: batched device scores = host double to f32 rounding; batch size and reruns change no bits") {
  Stream s(Device::cuda(0));
  for (std::int64_t dim : {1, 3, 257}) {
    CAPTURE(dim);
    train::Embeddings e;
    e.rows = 29;
    e.dim = dim;
    e.values = testing::random_floats(std::size_t(e.rows * dim), std::uint64_t(dim));
    train::normalize_rows(e);
    const std::vector<float> r = testing::random_floats(6000, std::uint64_t(dim + 5), 0.f, 1.f);
    std::vector<model::Trial> trials(r.size() / 2);
    for (std::size_t i = 0; i < trials.size(); ++i) {
      trials[i].a = std::min<std::int64_t>(e.rows - 1, std::int64_t(r[2 * i] * float(e.rows)));
      trials[i].b = std::min<std::int64_t>(e.rows - 1, std::int64_t(r[2 * i + 1] * float(e.rows)));
    }
    const std::vector<float> ref = train::cosine_scores(e, trials);
    const std::vector<float> cpu = train::cosine_scores(e, trials, Device::cpu(), nullptr);
    const std::vector<float> gpu = train::cosine_scores(e, trials, Device::cuda(0), s.handle());
    const std::vector<float> gpu7 = train::cosine_scores(e, trials, Device::cuda(0), s.handle(), 7);
    const std::vector<float> again = train::cosine_scores(e, trials, Device::cuda(0), s.handle(), 1000);
    REQUIRE(gpu.size() == ref.size());
    double worst = 0, worst_cpu = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, double(std::abs(gpu[i] - ref[i])));
      worst_cpu = std::max(worst_cpu, double(std::abs(gpu[i] - cpu[i])));
    }
    CHECK(worst <= 1e-6 + double(dim) * 6e-8);
    CHECK(worst_cpu <= 1e-6 + double(dim) * 6e-8);
    CHECK(std::memcmp(gpu.data(), gpu7.data(), gpu.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(gpu.data(), again.data(), gpu.size() * sizeof(float)) == 0);
  }
  train::Embeddings e;
  e.rows = 3;
  e.dim = 4;
  e.values.assign(12, 0.5f);
  const std::vector<model::Trial> bad{{0, 1, 1}, {2, 3, 0}};
  const std::string err =
      testing::error_of([&] { train::cosine_scores(e, bad, Device::cuda(0), s.handle()); });
  CAPTURE(err);
  CHECK(err.find("trial 1 names files 2 and 3") != std::string::npos);
}
