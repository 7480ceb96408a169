// train::cosine_scores: the device path (ops::trial_scores in batches; here
// the CPU twin, Device::cpu()) against the host double reference: equal to f32
// rounding, identical bits for any batch size, an out-of-range trial named
// before anything runs, no trials; all_pair_scores (AS-norm's cohort scores)
// against float64 dots, any thread count.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "engine/parallel.hpp"
#include "tests/support/testing.hpp"
#include "train/embeddings.hpp"

using namespace mf;

namespace {

train::Embeddings unit_embeddings(std::int64_t rows, std::int64_t dim, std::uint64_t seed) {
  train::Embeddings e;
  e.rows = rows;
  e.dim = dim;
  e.values = testing::random_floats(std::size_t(rows * dim), seed);
  train::normalize_rows(e);
  return e;
}

std::vector<model::Trial> random_trials(std::int64_t n, std::int64_t files, std::uint64_t seed) {
  const std::vector<float> r = testing::random_floats(std::size_t(2 * n), seed, 0.f, 1.f);
  std::vector<model::Trial> t(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < t.size(); ++i) {
    t[i].a = std::min(files - 1, std::int64_t(r[2 * i] * float(files)));
    t[i].b = std::min(files - 1, std::int64_t(r[2 * i + 1] * float(files)));
    t[i].label = int(i % 2);
  }
  return t;
}

}  // namespace

TEST_CASE("cosine_scores: the batched device path (CPU twin) = the host double version to f32 rounding") {
  for (std::int64_t dim : {1, 3, 192, 257}) {
    CAPTURE(dim);
    const train::Embeddings e = unit_embeddings(37, dim, std::uint64_t(dim));
    const std::vector<model::Trial> trials = random_trials(5000, e.rows, std::uint64_t(dim + 1));
    const std::vector<float> ref = train::cosine_scores(e, trials);
    const std::vector<float> dev = train::cosine_scores(e, trials, Device::cpu(), nullptr);
    const std::vector<float> small = train::cosine_scores(e, trials, Device::cpu(), nullptr, 7);
    REQUIRE(dev.size() == ref.size());
    double worst = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, double(std::abs(dev[i] - ref[i])));
    CHECK(worst <= 1e-6 + double(dim) * 6e-8);
    CHECK(std::memcmp(dev.data(), small.data(), dev.size() * sizeof(float)) == 0);  // batching changes no bits
  }
}

TEST_CASE("cosine_scores: no trials; an out-of-range trial is an error naming it") {
  const train::Embeddings e = unit_embeddings(4, 8, 1);
  CHECK(train::cosine_scores(e, {}, Device::cpu(), nullptr).empty());
  std::vector<model::Trial> trials = random_trials(10, 4, 2);
  trials[6].b = 4;
  for (bool device : {false, true}) {
    const std::string err = testing::error_of([&] {
      if (device) train::cosine_scores(e, trials, Device::cpu(), nullptr, 3);
      else train::cosine_scores(e, trials);
    });
    CAPTURE(err);
    CHECK(err.find("trial 6 names files") != std::string::npos);
    CHECK(err.find("expected 0..3") != std::string::npos);
  }
}

TEST_CASE("all_pair_scores: every row against every row, the float64 dot to f32 rounding, any thread count") {
  const train::Embeddings a = unit_embeddings(37, 200, 41), b = unit_embeddings(53, 200, 42);
  set_cpu_threads(1);
  const std::vector<float> one = train::all_pair_scores(a, b);
  set_cpu_threads(2);
  const std::vector<float> two = train::all_pair_scores(a, b);
  set_cpu_threads(0);
  REQUIRE(one.size() == std::size_t(37 * 53));
  CHECK(one == two);
  double worst = 0;
  for (std::int64_t i = 0; i < a.rows; ++i)
    for (std::int64_t j = 0; j < b.rows; ++j) {
      double d = 0;
      for (std::int64_t k = 0; k < a.dim; ++k) d += double(a.row(i)[std::size_t(k)]) * b.row(j)[std::size_t(k)];
      worst = std::max(worst, std::abs(d - double(one[std::size_t(i * b.rows + j)])));
    }
  CHECK(worst < 1e-6);
  train::Embeddings other = unit_embeddings(3, 7, 43);
  CHECK_THROWS_WITH_AS(train::all_pair_scores(a, other), doctest::Contains("embeddings of 200 and 7 values"),
                       std::exception);
}
