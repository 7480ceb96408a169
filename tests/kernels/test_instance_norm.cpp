// instance_norm's CPU twin (kernels/instance_norm.hpp) against a float64 loop
// written from the contract (every dtype, [B, mels, frames] and
// [B, mels, frames, 1], batch 1, odd sizes, one frame, large offsets that a
// one-pass variance would lose), exact small cases, in place = out of place
// bit for bit, 1 vs 2 threads (identical bytes), NaN confined to its row,
// error messages, and PyTorch's torch.nn.InstanceNorm1d
// (tests/oracle/instance_norm.py, float64).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/parallel.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/tolerance.hpp"
#include "tests/support/oracle_files.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;

// The contract in float64 on the values the kernel sees (rounded to t).
DVec reference(const Vec& x, std::int64_t rows, int frames, DType t) {
  const Vec xr = Tensor::from_floats(x, {std::int64_t(x.size())}, t).to_floats();
  DVec y(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int f = 0; f < frames; ++f) mean += xr[std::size_t(r * frames + f)];
    mean /= frames;
    for (int f = 0; f < frames; ++f) var += (xr[std::size_t(r * frames + f)] - mean) * (xr[std::size_t(r * frames + f)] - mean);
    var /= frames;
    for (int f = 0; f < frames; ++f)
      y[std::size_t(r * frames + f)] = (xr[std::size_t(r * frames + f)] - mean) / std::sqrt(var + 1e-5);
  }
  return y;
}

Tensor run(const Vec& x, const Shape& shape, DType t) {
  const Tensor xt = Tensor::from_floats(x, shape, t);
  Tensor y = Tensor::empty(shape, t);
  y.fill_bytes(0xff);
  ops::instance_norm(xt, y);
  return y;
}

// Log-mel-like rows: an offset per row (-80..0 dB) plus unit noise.
Vec logmel_like(std::size_t rows, int frames, std::uint64_t seed, float offset_scale = 80.f) {
  const Vec noise = testing::random_floats(rows * std::size_t(frames), seed);
  const Vec off = testing::random_floats(rows, seed + 1, -offset_scale, 0.f);
  Vec x(noise.size());
  for (std::size_t r = 0; r < rows; ++r)
    for (int f = 0; f < frames; ++f) x[r * std::size_t(frames) + std::size_t(f)] = off[r] + noise[r * std::size_t(frames) + std::size_t(f)];
  return x;
}

}  // namespace

TEST_CASE("instance_norm: CPU twin vs the float64 loop, every dtype, both shapes, batch 1, odd sizes") {
  struct S3 {
    std::int64_t B, mels;
    int frames;
  };
  for (S3 s : {S3{1, 1, 2}, S3{1, 3, 7}, S3{2, 40, 101}, S3{3, 64, 200}, S3{5, 7, 33}, S3{1, 80, 1000}})
    for (bool rank4 : {false, true})
      for (DType t : {DType::f32, DType::bf16, DType::f16}) {
        CAPTURE(s.B);
        CAPTURE(s.mels);
        CAPTURE(s.frames);
        CAPTURE(rank4);
        CAPTURE(dtype_name(t));
        const Vec x = logmel_like(std::size_t(s.B * s.mels), s.frames, std::uint64_t(s.B * 1000 + s.frames));
        const Shape shape = rank4 ? Shape{s.B, s.mels, s.frames, 1} : Shape{s.B, s.mels, s.frames};
        const Tensor y = run(x, shape, t);
        CHECK(testing::rel_l2(y.to_floats(), reference(x, s.B * s.mels, s.frames, t)) <= testing::rel_l2_tolerance(t));
      }
}

TEST_CASE("instance_norm: exact small cases; one frame gives 0; a constant row gives 0") {
  // Row (1, 3): mean 2, var 1 -> (-1, 1) / sqrt(1 + 1e-5). Row (5, 5, 5, 5): 0.
  const Tensor y = run(Vec{1, 3, 5, 5}, {1, 2, 2}, DType::f32);
  const float k = 1.f / std::sqrt(1.f + 1e-5f);
  CHECK(y.to_floats() == Vec{-k, k, 0.f, 0.f});
  const Tensor y1 = run(Vec{-7, 3, 1e4f}, {1, 3, 1, 1}, DType::bf16);
  CHECK(y1.to_floats() == Vec{0, 0, 0});
  // Two frames (a, b): +-(b - a) / 2 / sqrt((b - a)^2 / 4 + 1e-5).
  const Tensor y2 = run(Vec{-60, -62}, {1, 1, 2}, DType::f32);
  const float v = 1.f / std::sqrt(1.f + 1e-5f);
  CHECK(y2.to_floats() == Vec{v, -v});
}

TEST_CASE("instance_norm: the two-pass variance keeps a small spread on a large offset") {
  // Offset 1e4, spread 1e-2: a one-pass E[x^2] - E[x]^2 in f32 would lose every digit.
  Vec x(300);
  const Vec n = testing::random_floats(x.size(), 5);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 1e4f + 1e-2f * n[i];
  const Tensor y = run(x, {1, 3, 100}, DType::f32);
  // (the reference sees the same rounded x; a mean rounded at 1e4 would be ~1e-2 off here)
  CHECK(testing::rel_l2(y.to_floats(), reference(x, 3, 100, DType::f32)) <= 1e-5);
}

TEST_CASE("instance_norm: in place gives the out-of-place bits; 1 vs 2 threads give identical bytes") {
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    const Vec x = logmel_like(7 * 40, 123, 9);
    const Tensor ref = run(x, {7, 40, 123, 1}, t);
    Tensor inplace = Tensor::from_floats(x, {7, 40, 123, 1}, t);
    ops::instance_norm(inplace, inplace);
    CHECK(std::memcmp(inplace.raw(), ref.raw(), ref.nbytes()) == 0);
    set_cpu_threads(1);
    const Tensor a = run(x, {7, 40, 123}, t);
    set_cpu_threads(2);
    const Tensor b = run(x, {7, 40, 123}, t);
    set_cpu_threads(0);
    CHECK(std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
    CHECK(std::memcmp(a.raw(), ref.raw(), a.nbytes()) == 0);
  }
}

TEST_CASE("instance_norm: NaN makes its row NaN and no other") {
  Vec x = logmel_like(6, 10, 11);
  x[23] = NAN;  // row 2
  const Vec y = run(x, {2, 3, 10}, DType::f32).to_floats();
  for (std::size_t i = 0; i < y.size(); ++i) CHECK(std::isnan(y[i]) == (i / 10 == 2));
}

TEST_CASE("instance_norm: errors name what was expected and found") {
  const Tensor x = Tensor::from_floats(Vec(24, 1.f), {2, 3, 4});
  auto err = [](const Tensor& a, Tensor& b) { return testing::error_of([&] { ops::instance_norm(a, b); }); };
  Tensor y = Tensor::empty({2, 3, 4}, DType::f32);
  CHECK(err(x, y) == "<no error>");
  const Tensor x2 = Tensor::from_floats(Vec(24, 1.f), {6, 4});
  CHECK(err(x2, y).find("x must be [B, mels, frames] or [B, mels, frames, 1]") != std::string::npos);
  const Tensor x4 = Tensor::from_floats(Vec(24, 1.f), {2, 3, 2, 2});
  CHECK(err(x4, y).find("x must be [B, mels, frames] or [B, mels, frames, 1]") != std::string::npos);
  Tensor y2 = Tensor::empty({2, 3, 5}, DType::f32);
  CHECK(err(x, y2).find("y (x's shape)") != std::string::npos);
  Tensor yh = Tensor::empty({2, 3, 4}, DType::f16);
  CHECK(err(x, yh).find("y (x's dtype)") != std::string::npos);
  const Tensor xi = Tensor::zeros({2, 3, 4}, DType::i32);
  Tensor yi = Tensor::zeros({2, 3, 4}, DType::i32);
  CHECK(err(xi, yi).find("x must be f32, bf16 or f16") != std::string::npos);
}

TEST_CASE("instance_norm: PyTorch oracle (torch.nn.InstanceNorm1d, float64)") {
  struct Case {
    std::int64_t B, mels;
    int frames;
    DType t;
    Vec x;
    Tensor y;
    std::filesystem::path dir;
  };
  const auto root = std::filesystem::temp_directory_path() / ("mf_instance_norm_oracle_" + std::to_string(getpid()));
  std::filesystem::create_directories(root);
  std::vector<Case> cases;
  int id = 0;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (auto [B, mels, frames] : {std::tuple<std::int64_t, std::int64_t, int>{1, 40, 200}, {3, 7, 33}, {2, 64, 2}}) {
      Case c{B, mels, frames, t, logmel_like(std::size_t(B * mels), frames, std::uint64_t(200 + id)), {}, root / std::to_string(id)};
      ++id;
      std::filesystem::create_directories(c.dir);
      c.y = run(c.x, {B, mels, frames, 1}, t);
      const Vec seen = Tensor::from_floats(c.x, {std::int64_t(c.x.size())}, t).to_floats();
      testing::write_bin(c.dir / "x.bin", seen);
      cases.push_back(std::move(c));
    }
  {
    std::ofstream f(root / "cases.txt");
    for (const Case& c : cases) f << c.dir.string() << ' ' << c.B << ' ' << c.mels << ' ' << c.frames << '\n';
  }
  REQUIRE(testing::run_oracle("instance_norm.py", (root / "cases.txt").string()) == 0);
  for (const Case& c : cases) {
    CAPTURE(c.dir.string());
    const std::size_t n = c.x.size();
    const DVec want = testing::read_f64(c.dir / "y.bin", n);
    CHECK(testing::rel_l2(c.y.to_floats(), want) <= testing::rel_l2_tolerance(c.t));
  }
  std::filesystem::remove_all(root);
}
