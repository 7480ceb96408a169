// trial_scores' CPU twin (kernels/trial_scores.hpp) against a float64 loop
// written from the contract: odd dims (1, 3, 257, ...), no trials, many
// trials, duplicate and self pairs, exact small-integer cases, NaN in a row,
// out-of-range indices (an error naming the trial, nothing written), 1 vs 2
// threads byte for byte, the vector CPU kernels byte for byte against the
// twin, and the dispatch's errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "engine/parallel.hpp"
#include "kernels/ops.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {

using Vec = std::vector<float>;

// Rows of `values` normalised in double (as the callers do), stored f32.
Vec normalized_rows(std::int64_t F, std::int64_t E, std::uint64_t seed) {
  Vec v = testing::random_floats(std::size_t(F * E), seed);
  for (std::int64_t i = 0; i < F; ++i) {
    double ss = 0;
    for (std::int64_t k = 0; k < E; ++k) ss += double(v[std::size_t(i * E + k)]) * v[std::size_t(i * E + k)];
    for (std::int64_t k = 0; k < E; ++k) v[std::size_t(i * E + k)] = float(v[std::size_t(i * E + k)] / std::sqrt(ss));
  }
  return v;
}

std::vector<float> random_pairs(std::int64_t T, std::int64_t F, std::uint64_t seed) {
  const Vec r = testing::random_floats(std::size_t(2 * T), seed, 0.f, 1.f);
  Vec p(r.size());
  for (std::size_t i = 0; i < r.size(); ++i) p[i] = std::min(float(F - 1), std::floor(r[i] * float(F)));
  return p;
}

std::vector<double> reference(const Vec& emb, std::int64_t E, const Vec& pairs) {
  std::vector<double> s(pairs.size() / 2);
  for (std::size_t t = 0; t < s.size(); ++t) {
    const auto a = std::int64_t(pairs[2 * t]), b = std::int64_t(pairs[2 * t + 1]);
    double d = 0;
    for (std::int64_t k = 0; k < E; ++k) d += double(emb[std::size_t(a * E + k)]) * emb[std::size_t(b * E + k)];
    s[t] = d;
  }
  return s;
}

Tensor run(const Vec& emb, std::int64_t F, std::int64_t E, const Vec& pairs) {
  const Tensor e = Tensor::from_floats(emb, {F, E});
  const auto T = std::int64_t(pairs.size() / 2);
  const Tensor p = Tensor::from_floats(pairs, {T, 2}, DType::i32);
  Tensor s = Tensor::empty({T}, DType::f32);
  if (T > 0) s.fill(NAN);
  ops::trial_scores(e, p, s);
  return s;
}

double max_abs_diff(const Vec& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

}  // namespace

TEST_CASE("trial_scores: CPU twin vs the float64 loop, odd dims, few and many trials") {
  struct S {
    std::int64_t F, E, T;
  };
  for (S s : {S{1, 1, 1}, S{2, 3, 5}, S{7, 31, 40}, S{9, 32, 17}, S{5, 33, 64}, S{20, 257, 300}, S{50, 192, 20000},
              S{3, 1000, 11}}) {
    CAPTURE(s.F);
    CAPTURE(s.E);
    CAPTURE(s.T);
    const Vec emb = normalized_rows(s.F, s.E, std::uint64_t(s.F * 131 + s.E));
    const Vec pairs = random_pairs(s.T, s.F, std::uint64_t(s.T + 3));
    const Vec got = run(emb, s.F, s.E, pairs).to_floats();
    const std::vector<double> ref = reference(emb, s.E, pairs);
    CHECK(testing::rel_l2(got, ref) <= 1e-5);
    // Unit rows: every score is in [-1, 1]; f32 sums of E products are within ~E * 2^-24 of the exact cosine.
    CHECK(max_abs_diff(got, ref) <= 1e-6 + double(s.E) * 6e-8);
  }
}

TEST_CASE("trial_scores: exact small-integer cases, self and duplicate pairs, no trials") {
  // Rows (1, 2, 3), (4, -5, 6), (0, 0, 0): integer dot products are exact in f32.
  const Vec emb{1, 2, 3, 4, -5, 6, 0, 0, 0};
  const Vec pairs{0, 1, 1, 0, 0, 0, 1, 1, 0, 1, 2, 1, 2, 2};
  CHECK(run(emb, 3, 3, pairs).to_floats() == Vec{12, 12, 14, 77, 12, 0, 0});
  // Normalised rows: a self pair is the squared norm (1 to rounding), duplicates are identical bits.
  const Vec u = normalized_rows(4, 257, 77);
  const Vec s = run(u, 4, 257, Vec{2, 2, 1, 3, 1, 3, 3, 1}).to_floats();
  CHECK(std::abs(s[0] - 1.f) <= 1e-6f);
  CHECK(std::memcmp(&s[1], &s[2], sizeof(float)) == 0);
  CHECK(std::memcmp(&s[1], &s[3], sizeof(float)) == 0);  // the products commute
  // No trials: nothing to do, no error (even with no files).
  CHECK(run(emb, 3, 3, Vec{}).numel() == 0);
  CHECK(run(Vec{}, 0, 3, Vec{}).numel() == 0);
  // E = 0: the empty sum.
  CHECK(run(Vec{}, 2, 0, Vec{0, 1}).to_floats() == Vec{0});
}

TEST_CASE("trial_scores: NaN in a row makes its trials NaN and no others") {
  Vec emb = normalized_rows(4, 40, 3);
  emb[2 * 40 + 17] = NAN;  // file 2
  const Vec pairs{0, 1, 0, 2, 2, 3, 2, 2, 3, 1};
  const Vec s = run(emb, 4, 40, pairs).to_floats();
  for (std::size_t t = 0; t < s.size(); ++t) CHECK(std::isnan(s[t]) == (pairs[2 * t] == 2 || pairs[2 * t + 1] == 2));
}

TEST_CASE("trial_scores: an index out of range is an error naming the trial; nothing is written") {
  const Vec emb = normalized_rows(3, 8, 5);
  for (const Vec& pairs : {Vec{0, 1, 2, 0, 1, 3}, Vec{0, 1, 2, 0, -1, 0}}) {
    const Tensor e = Tensor::from_floats(emb, {3, 8});
    const Tensor p = Tensor::from_floats(pairs, {3, 2}, DType::i32);
    Tensor s = Tensor::empty({3}, DType::f32);
    s.fill(-7.f);
    const std::string err = testing::error_of([&] { ops::trial_scores(e, p, s); });
    CAPTURE(err);
    CHECK(err.find("trial 2 names files") != std::string::npos);
    CHECK(err.find("expected indices in 0..2 (3 files)") != std::string::npos);
    CHECK(s.to_floats() == Vec{-7, -7, -7});
  }
}

TEST_CASE("trial_scores: 1 vs 2 threads give identical bytes; reruns too") {
  const Vec emb = normalized_rows(100, 257, 9);
  const Vec pairs = random_pairs(50000, 100, 10);
  set_cpu_threads(1);
  const Tensor a = run(emb, 100, 257, pairs);
  set_cpu_threads(2);
  const Tensor b = run(emb, 100, 257, pairs), c = run(emb, 100, 257, pairs);
  set_cpu_threads(0);
  CHECK(std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
  CHECK(std::memcmp(b.raw(), c.raw(), b.nbytes()) == 0);
}

TEST_CASE("trial_scores: the avx512 and avx2 CPU kernels give the twin's bits (dims around the 32 partial sums)") {
  for (const std::int64_t E : {1, 7, 16, 31, 32, 33, 48, 100, 256, 512, 515}) {
    CAPTURE(E);
    Vec emb = normalized_rows(40, E, 11 + std::uint64_t(E));
    emb[5] = NAN;  // row 0 (E > 5) or row 5 / E: its trials NaN in every variant
    // Random pairs (groups of four trials with four first rows), and the
    // same grouped by first row, as make_trials writes lists (groups sharing
    // one first row, loaded once); 3001 trials leave a tail of one.
    Vec random = random_pairs(3001, 40, 12), grouped = random;
    std::vector<std::pair<float, float>> sorted;
    for (std::size_t t = 0; t < grouped.size(); t += 2) sorted.emplace_back(grouped[t], grouped[t + 1]);
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    for (std::size_t t = 0; t < sorted.size(); ++t) {
      grouped[2 * t] = sorted[t].first;
      grouped[2 * t + 1] = sorted[t].second;
    }
    for (const Vec* pairs : {&random, &grouped}) {
      Tensor twin;
      {
        const testing::CpuKernelsScope scope(CpuKernels::twin);
        twin = run(emb, 40, E, *pairs);
      }
      for (const CpuKernels variant : testing::cpu_kernel_variants()) {
        const testing::CpuKernelsScope scope(variant);
        INFO("CPU kernels ", cpu_kernels_name(variant), pairs == &grouped ? ", grouped" : ", random");
        const Tensor got = run(emb, 40, E, *pairs);
        CHECK(std::memcmp(got.raw(), twin.raw(), got.nbytes()) == 0);
      }
    }
  }
}

TEST_CASE("trial_scores: rows beyond the caches are scored tile by tile, each score in its trial's place") {
  // 600 x 512 f32 rows (1.2 MB) and 20 trials per 64 x 64 tile: the tiled order.
  const Vec emb = normalized_rows(600, 512, 13);
  const Vec pairs = random_pairs(2000, 600, 14);
  const std::vector<double> want = reference(emb, 512, pairs);
  set_cpu_threads(1);
  const Tensor one = run(emb, 600, 512, pairs);
  set_cpu_threads(2);
  const Tensor two = run(emb, 600, 512, pairs);
  set_cpu_threads(0);
  CHECK(max_abs_diff(one.to_floats(), want) < 1e-6);
  CHECK(std::memcmp(one.raw(), two.raw(), one.nbytes()) == 0);
  // The same trials grouped by first file (make_trials' order): scored in
  // list order (tile order skipped), the same bits per trial.
  std::vector<std::size_t> order(want.size());
  for (std::size_t t = 0; t < order.size(); ++t) order[t] = t;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return pairs[2 * x] < pairs[2 * y]; });
  Vec grouped(pairs.size());
  for (std::size_t t = 0; t < order.size(); ++t) {
    grouped[2 * t] = pairs[2 * order[t]];
    grouped[2 * t + 1] = pairs[2 * order[t] + 1];
  }
  const auto g = run(emb, 600, 512, grouped).to_floats();
  const auto o = one.to_floats();
  for (std::size_t t = 0; t < order.size(); ++t) CHECK(std::memcmp(&g[t], &o[order[t]], sizeof(float)) == 0);
}

TEST_CASE("trial_scores: errors name what was expected and found") {
  const Tensor e = Tensor::from_floats(Vec(12, 0.5f), {3, 4});
  const Tensor p = Tensor::from_floats(Vec{0, 1, 2, 2}, {2, 2}, DType::i32);
  Tensor s = Tensor::empty({2}, DType::f32);
  auto err = [](const Tensor& a, const Tensor& b, Tensor& c) {
    return testing::error_of([&] { ops::trial_scores(a, b, c); });
  };
  CHECK(err(e, p, s) == "<no error>");
  CHECK(s.to_floats() == Vec{1, 1});
  const Tensor e1 = Tensor::from_floats(Vec(12, 0.5f), {12});
  CHECK(err(e1, p, s).find("emb must be [files, dim]") != std::string::npos);
  const Tensor eh = Tensor::from_floats(Vec(12, 0.5f), {3, 4}, DType::f16);
  CHECK(err(eh, p, s).find("emb") != std::string::npos);
  const Tensor p3 = Tensor::from_floats(Vec{0, 1, 2, 2, 0, 0}, {2, 3}, DType::i32);
  CHECK(err(e, p3, s).find("pairs must be [trials, 2]") != std::string::npos);
  const Tensor pf = Tensor::from_floats(Vec{0, 1, 2, 2}, {2, 2}, DType::f32);
  CHECK(err(e, pf, s).find("pairs") != std::string::npos);
  Tensor s3 = Tensor::empty({3}, DType::f32);
  CHECK(err(e, p, s3).find("scores ([trials])") != std::string::npos);
  Tensor sh = Tensor::empty({2}, DType::f16);
  CHECK(err(e, p, sh).find("scores") != std::string::npos);
}
