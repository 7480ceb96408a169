// augment (kernels/augment.cu) against its CPU twin (test_augment.cpp checks
// the twin against a float64 reference): f32/bf16/f16, shapes from one mel
// row to 8192 frames (one staged row), 64x64, 40x101 and a sample staged in
// two pieces, batches of odd sizes and one larger than the kernel's grid,
// noise on and off; the counter read from device memory; a captured CUDA graph
// replayed with the counter advanced between replays. The twin and the kernel
// run the same f32 operations in the same order, so they agree bit for bit
// wherever expf/logf do: always on the emulator, and on a GPU without noise;
// with noise on a GPU, within CUDA's expf/logf error (4 ulp of the sample's
// largest magnitude, plus one ulp of bf16/f16 where the two round apart).
// Runs only where a GPU (or the CUDA emulator) is usable; else exits 77.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/stream.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/augment_testing.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using kernels::AugmentArgs;

namespace {

const Device kGpu = Device::cuda(0);

// Every transform on, with widths that fit the shape.
AugmentArgs everything(std::int64_t batch, std::int64_t mels, std::int64_t frames, bool noise) {
  AugmentArgs d;
  d.batch = batch;
  d.mels = mels;
  d.frames = frames;
  d.seed = 0xa0a0f00d;
  d.stream = 3;
  d.first_sample = 17;
  d.time_shift = int(std::min<std::int64_t>(9, frames - 1));
  d.gain_db = 6;
  d.freq_masks = 2;
  d.freq_mask_width = int(std::min<std::int64_t>(5, mels));
  d.time_masks = 2;
  d.time_mask_width = int(std::min<std::int64_t>(12, frames));
  if (noise) {
    d.noise_count = 3;
    d.snr_lo_db = -5;
    d.snr_hi_db = 20;
  }
  return d;
}

const auto& twin = testing::augment_on_cpu;

Tensor device_counter(std::int32_t ctr, Stream& s) {
  return Tensor::from_floats(std::vector<float>{float(ctr)}, {1}, DType::i32).to(kGpu, s);
}

std::vector<float> on_gpu(const AugmentArgs& d, DType t, const std::vector<float>& x, const std::vector<float>& noise,
                          std::int32_t ctr) {
  Stream s(kGpu);
  Tensor gx = Tensor::from_floats(x, {d.batch, d.mels, d.frames}, t).to(kGpu, s);
  Tensor gn;
  if (!noise.empty()) gn = Tensor::from_floats(noise, {std::int64_t(noise.size())}).to(kGpu, s);
  Tensor gctr = device_counter(ctr, s);
  ops::augment(gx, gctr.data<std::int32_t>(), d, noise.empty() ? nullptr : &gn, s);
  s.synchronize();
  return gx.to_floats();
}

double ulp(DType t, double v) {
  const int bits = t == DType::bf16 ? 8 : t == DType::f16 ? 11 : 24;
  int e = 0;
  std::frexp(v == 0 ? 1e-30 : v, &e);
  return std::ldexp(1.0, e - bits);
}

void check_equal(const AugmentArgs& d, DType t, const std::vector<float>& gpu, const std::vector<float>& cpu) {
  REQUIRE(gpu.size() == cpu.size());
  const bool exact = testing::kEmulatedGpu || d.noise_count == 0;
  const std::int64_t N = d.mels * d.frames;
  std::int64_t bad = 0, first_bad = -1, differ = 0;
  for (std::int64_t b = 0; b < d.batch; ++b) {
    double big = 0;
    for (std::int64_t e = 0; e < N; ++e) big = std::max(big, double(std::fabs(cpu[std::size_t(b * N + e)])));
    for (std::int64_t e = 0; e < N; ++e) {
      const std::size_t i = std::size_t(b * N + e);
      const double tol = exact ? 0 : 4 * ulp(DType::f32, big) + (t == DType::f32 ? 0 : ulp(t, cpu[i]));
      const double err = std::fabs(double(gpu[i]) - cpu[i]);
      differ += gpu[i] != cpu[i];
      if (!(err <= tol)) {
        ++bad;
        if (first_bad < 0) first_bad = std::int64_t(i);
      }
    }
  }
  INFO(dtype_name(t) << " [" << d.batch << ", " << d.mels << ", " << d.frames << "] noise " << d.noise_count
                     << ": " << bad << " values outside the tolerance (first at " << first_bad << "), " << differ
                     << " differ at all, " << (exact ? "exact" : "tolerance") << " comparison");
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("augment CUDA equals the CPU twin: dtypes, shapes, noise on and off") {
  struct Shape3 {
    std::int64_t batch, mels, frames;
  };
  const Shape3 shapes[] = {
      {7, 64, 64},    // the whole sample in one stage
      {5, 40, 101},   // non-square, rows not a multiple of the block
      {3, 150, 101},  // two stages (81 rows, then 69), lanes restarting mid-stage
      {2, 3, 8192},   // the longest row: one row per stage
      {3, 1, 5},      // one mel row
  };
  for (const Shape3& sh : shapes) {
    const std::int64_t N = sh.mels * sh.frames;
    const std::vector<float> x = testing::random_floats(std::size_t(sh.batch * N), std::uint64_t(N), -80.f, 0.f);
    const std::vector<float> noise = testing::random_floats(std::size_t(3 * N), std::uint64_t(N) + 1, -90.f, -10.f);
    for (bool with_noise : {false, true}) {
      const AugmentArgs d = everything(sh.batch, sh.mels, sh.frames, with_noise);
      const std::vector<float> nz = with_noise ? noise : std::vector<float>{};
      for (DType t : {DType::f32, DType::bf16, DType::f16}) {
        const std::int32_t ctr = 11;
        check_equal(d, t, on_gpu(d, t, x, nz, ctr), twin(d, t, x, nz, ctr));
      }
    }
  }
}

TEST_CASE("augment CUDA: a batch larger than the grid (blocks loop over samples) and single transforms") {
  // Narrow masks leave most values their own; with noise on, a block that ran
  // ahead into its next sample would overwrite the reduction and mask ranges
  // the previous sample's threads still read.
  const std::int64_t M = 4, F = 16, N = M * F;
  const std::int64_t B = testing::emu_scaled(kernels::kAugmentMaxBlocks * 2 + 3, 2);
  const std::vector<float> x = testing::random_floats(std::size_t(B * N), 61, -80.f, 0.f);
  const std::vector<float> noise = testing::random_floats(std::size_t(3 * N), 62, -90.f, -10.f);
  AugmentArgs d = everything(B, M, F, true);
  d.freq_masks = d.time_masks = 1;
  d.freq_mask_width = 1;
  d.time_mask_width = 3;
  check_equal(d, DType::f32, on_gpu(d, DType::f32, x, noise, 5), twin(d, DType::f32, x, noise, 5));
  for (int only = 0; only < 4; ++only) {
    AugmentArgs one;
    one.batch = 6;
    one.mels = 2;
    one.frames = 4;
    one.seed = 3;
    one.time_shift = only == 0 ? 3 : 0;
    one.gain_db = only == 1 ? 5.f : 0.f;
    one.freq_masks = only == 2 ? 1 : 0;
    one.freq_mask_width = 2;
    one.time_masks = only == 3 ? 3 : 0;
    one.time_mask_width = 3;
    const std::vector<float> xs(x.begin(), x.begin() + 6 * 8);
    const std::vector<float> cpu = twin(one, DType::f32, xs, {}, 2);
    CHECK(cpu != xs);  // the transform did something
    check_equal(one, DType::f32, on_gpu(one, DType::f32, xs, {}, 2), cpu);
  }
}

TEST_CASE("augment CUDA: a captured graph replayed with the counter advanced draws the twin's new values") {
  const std::int64_t B = 9, M = 40, F = 101, N = M * F;
  const std::vector<float> x = testing::random_floats(std::size_t(B * N), 71, -80.f, 0.f);
  const std::vector<float> noise = testing::random_floats(std::size_t(3 * N), 72, -90.f, -10.f);
  const AugmentArgs d = everything(B, M, F, true);
  Stream s(kGpu);
  const Tensor x0 = Tensor::from_floats(x, {B, M, F}).to(kGpu, s);
  Tensor gx = Tensor::empty({B, M, F}, DType::f32, kGpu, Layout::plain, s);
  const Tensor gn = Tensor::from_floats(noise, {3 * N}).to(kGpu, s);
  Tensor gctr = device_counter(0, s);
  s.synchronize();
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  ops::augment(gx, gctr.data<std::int32_t>(), d, &gn, s);
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  std::vector<float> first;
  for (std::int32_t ctr : {41, 42}) {
    gx.copy_from(x0, s);
    const Tensor host_ctr = Tensor::from_floats(std::vector<float>{float(ctr)}, {1}, DType::i32);
    gctr.copy_from(host_ctr, s);  // outside the graph: the next step's counter
    REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
    s.synchronize();
    const std::vector<float> replayed = gx.to_floats();
    CAPTURE(ctr);
    check_equal(d, DType::f32, replayed, twin(d, DType::f32, x, noise, ctr));
    if (first.empty()) {
      first = replayed;
    } else {
      CHECK(replayed != first);  // the second replay drew afresh
    }
  }
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
  CHECK(cudaGraphDestroy(graph) == cudaSuccess);
}
