// mixup (kernels/mixup.hpp), CPU twin: the mixed values, leak targets,
// partner labels and weights against a float64 evaluation of the header's
// formulas (the pairing read back from the outputs, not from the header);
// the pairing is one cyclic shift r in [1, B - 1] per micro-batch, every
// shift occurring; the Beta(alpha, alpha) weights' mean (0.5) and variance
// (1 / (4 (2 alpha + 1))) over 20000 draws for alpha 0.2, 0.4, 1, 2, and a
// Kolmogorov-Smirnov distance to the exact CDF for alpha 1 and 2; the same
// bits with 1 and 2 threads; counter, stream and first_sample select
// different draws; argument errors. The CUDA kernel against this twin:
// test_mixup_gpu.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/parallel.hpp"
#include "kernels/ops.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using kernels::MixupArgs;

namespace {

struct Mixed {
  std::vector<float> x, leak, lam, labels_b;
};

MixupArgs dims(std::int64_t B, std::int64_t n, float alpha) {
  MixupArgs d;
  d.batch = B;
  d.elems = n;
  d.alpha = alpha;
  d.seed = 0x5eedf00dull;
  d.stream = 2;
  d.first_sample = 40;
  return d;
}

Mixed run(const MixupArgs& d, DType t, const std::vector<float>& x, const std::vector<float>& labels,
          const std::vector<float>& leak, std::int32_t ctr) {
  const Tensor tx = Tensor::from_floats(x, {d.batch, d.elems}, t);
  const Tensor tl = Tensor::from_floats(labels, {d.batch}, DType::i32);
  const Tensor tk = leak.empty() ? Tensor() : Tensor::from_floats(leak, {d.batch});
  Tensor xo = Tensor::empty({d.batch, d.elems}, t), lb = Tensor::empty({d.batch}, DType::i32),
         lam = Tensor::empty({d.batch}, DType::f32);
  Tensor ko = leak.empty() ? Tensor() : Tensor::empty({d.batch}, DType::f32);
  xo.fill_bytes(0xff);
  lam.fill_bytes(0xff);
  if (ko.defined()) ko.fill_bytes(0xff);
  ops::mixup(tx, tl, &ctr, d, xo, lb, lam, tk.defined() ? &tk : nullptr, ko.defined() ? &ko : nullptr);
  Mixed m{xo.to_floats(), ko.defined() ? ko.to_floats() : std::vector<float>{}, lam.to_floats(), lb.to_floats()};
  return m;
}

double ulp(DType t, double v) {
  const int bits = t == DType::bf16 ? 8 : t == DType::f16 ? 11 : 24;
  int e = 0;
  std::frexp(v == 0 ? 1e-30 : v, &e);
  return std::ldexp(1.0, e - bits);
}

}  // namespace

TEST_CASE("mixup: values, leak targets, partner labels and weights against a float64 reference") {
  for (std::int64_t B : {1, 2, 7, 33})
    for (DType t : {DType::f32, DType::bf16, DType::f16})
      for (bool leak_head : {true, false}) {
        const std::int64_t n = 37;
        const MixupArgs d = dims(B, n, 0.4f);
        const std::vector<float> x = Tensor::from_floats(testing::random_floats(std::size_t(B * n), 5, -80, 10),
                                                         {B * n}, t).to_floats();  // exact in t
        std::vector<float> labels, leak;
        for (std::int64_t i = 0; i < B; ++i) {
          labels.push_back(float(i));  // distinct: labels_b names the partner
          if (leak_head) leak.push_back(float((i * 3) % 5) / 4.f);
        }
        const Mixed m = run(d, t, x, labels, leak, 9);
        CAPTURE(B);
        CAPTURE(dtype_name(t));
        // one cyclic shift for the whole batch, in [1, B - 1] (1 when B = 1)
        // (labels are the indices, so sample 0's partner label is r mod B;
        // a batch of one pairs the sample with itself)
        const std::int64_t r = std::int64_t(m.labels_b[0]);
        if (B == 1) {
          CHECK(r == 0);
        } else {
          REQUIRE(r >= 1);
          REQUIRE(r <= B - 1);
        }
        std::int64_t bad = 0;
        for (std::int64_t i = 0; i < B; ++i) {
          const std::int64_t j = (i + r) % B;
          CHECK(m.labels_b[std::size_t(i)] == float(j));
          const double l = m.lam[std::size_t(i)];
          REQUIRE(l >= 0.0);
          REQUIRE(l <= 1.0);
          CHECK(float(l) == kernels::mixup_lambda(d, 9, d.first_sample + i));
          const double o = double(1.f - float(l));
          for (std::int64_t e = 0; e < n; ++e) {
            const double xi = x[std::size_t(i * n + e)], xj = x[std::size_t(j * n + e)];
            const double want = l * xi + o * xj;
            // f32: two products and a sum rounded (<= 1.5 ulp of the larger
            // magnitude); then one rounding to t
            const double big = std::max(std::fabs(xi), std::fabs(xj));
            const double tol = 2 * ulp(DType::f32, big) + (t == DType::f32 ? 0 : ulp(t, want));
            bad += !(std::fabs(m.x[std::size_t(i * n + e)] - want) <= tol);
          }
          if (leak_head) {
            const double want = l * leak[std::size_t(i)] + o * leak[std::size_t(j)];
            CHECK(std::fabs(m.leak[std::size_t(i)] - want) <= 2 * ulp(DType::f32, 1.0));
          }
        }
        CHECK(bad == 0);
        if (!leak_head) CHECK(m.leak.empty());
      }
}

TEST_CASE("mixup: the pairing is a cyclic shift r in [1, B - 1], every r drawn about equally often") {
  const std::int64_t B = 6;
  MixupArgs d = dims(B, 1, 1.f);
  std::vector<int> seen(std::size_t(B), 0);
  const int steps = 3000;
  for (std::int32_t ctr = 0; ctr < steps; ++ctr) {
    const std::int64_t r = kernels::mixup_pair_shift(d, std::uint32_t(ctr));
    REQUIRE(r >= 1);
    REQUIRE(r <= B - 1);
    ++seen[std::size_t(r)];
  }
  for (std::int64_t r = 1; r < B; ++r) {
    CAPTURE(r);
    CHECK(std::abs(seen[std::size_t(r)] - steps / (B - 1)) < 5 * std::sqrt(steps / double(B - 1)));
  }
  CHECK(seen[0] == 0);
  // the op applies the header's shift
  std::vector<float> labels{0, 1, 2, 3, 4, 5};
  for (std::int32_t ctr : {1, 2, 3}) {
    const Mixed m = run(d, DType::f32, std::vector<float>(std::size_t(B), 1.f), labels, {}, ctr);
    const std::int64_t r = kernels::mixup_pair_shift(d, std::uint32_t(ctr));
    for (std::int64_t i = 0; i < B; ++i) CHECK(m.labels_b[std::size_t(i)] == float((i + r) % B));
  }
}

TEST_CASE("mixup: Beta(alpha, alpha) weights: mean 0.5, variance 1/(4(2 alpha + 1)), KS distance for alpha 1, 2") {
  const int n = 20000;
  for (float alpha : {0.2f, 0.4f, 1.f, 2.f}) {
    const MixupArgs d = dims(1, 1, alpha);
    std::vector<double> v;
    for (int s = 0; s < n; ++s) v.push_back(kernels::mixup_lambda(d, 7, s));
    double mean = 0;
    for (double x : v) mean += x;
    mean /= n;
    double var = 0;
    for (double x : v) var += (x - mean) * (x - mean);
    var /= n - 1;
    double var_of_sq = 0;  // the spread of (x - mean)^2, for the variance's standard error
    for (double x : v) var_of_sq += std::pow((x - mean) * (x - mean) - var, 2);
    var_of_sq /= n - 1;
    const double want_var = 1.0 / (4.0 * (2.0 * alpha + 1.0));
    const double se_mean = std::sqrt(want_var / n), se_var = std::sqrt(var_of_sq / n);
    INFO("alpha " << alpha << ": mean " << mean << " (se " << se_mean << "), variance " << var << " want "
                  << want_var << " (se " << se_var << ")");
    CHECK(std::fabs(mean - 0.5) < 5 * se_mean);
    CHECK(std::fabs(var - want_var) < 5 * se_var);
    CHECK(*std::min_element(v.begin(), v.end()) >= 0.0);
    CHECK(*std::max_element(v.begin(), v.end()) <= 1.0);
    if (alpha >= 1.f) {  // Beta(1, 1) = U(0, 1); Beta(2, 2): F(x) = 3x^2 - 2x^3
      std::sort(v.begin(), v.end());
      double ks = 0;
      for (int k = 0; k < n; ++k) {
        const double x = v[std::size_t(k)];
        const double f = alpha == 1.f ? x : 3 * x * x - 2 * x * x * x;
        ks = std::max({ks, std::fabs(f - double(k) / n), std::fabs(f - double(k + 1) / n)});
      }
      INFO("KS distance " << ks);
      CHECK(ks < 1.63 / std::sqrt(double(n)));  // the 1% critical value
    }
  }
}

TEST_CASE("mixup: the same bits with 1 and 2 threads; counter, stream and first_sample change the draws") {
  const std::int64_t B = 40, n = 50;
  MixupArgs d = dims(B, n, 0.3f);
  const std::vector<float> x = testing::random_floats(std::size_t(B * n), 8, -50, 0);
  std::vector<float> labels, leak;
  for (std::int64_t i = 0; i < B; ++i) {
    labels.push_back(float(i % 4));
    leak.push_back(float(i % 2));
  }
  const int before = cpu_threads();
  set_cpu_threads(1);
  const Mixed one = run(d, DType::bf16, x, labels, leak, 3);
  set_cpu_threads(2);
  const Mixed two = run(d, DType::bf16, x, labels, leak, 3);
  set_cpu_threads(before);
  CHECK(one.x == two.x);
  CHECK(one.lam == two.lam);
  CHECK(one.leak == two.leak);
  CHECK(one.labels_b == two.labels_b);
  CHECK(run(d, DType::bf16, x, labels, leak, 4).lam != one.lam);
  MixupArgs other = d;
  other.stream = 3;
  CHECK(run(other, DType::bf16, x, labels, leak, 3).lam != one.lam);
  other = d;
  other.first_sample = 0;
  CHECK(run(other, DType::bf16, x, labels, leak, 3).lam != one.lam);
}

TEST_CASE("mixup: argument errors name what was expected and found") {
  const std::int64_t B = 4, n = 3;
  const MixupArgs d = dims(B, n, 0.4f);
  const Tensor x = Tensor::zeros({B, n}, DType::f32), labels = Tensor::zeros({B}, DType::i32),
               leak = Tensor::zeros({B}, DType::f32);
  Tensor xo = Tensor::zeros({B, n}, DType::f32), lb = Tensor::zeros({B}, DType::i32),
         lam = Tensor::zeros({B}, DType::f32), ko = Tensor::zeros({B}, DType::f32);
  const std::int32_t ctr = 0;
  MixupArgs bad = d;
  bad.alpha = 0;
  CHECK(testing::error_of([&] { ops::mixup(x, labels, &ctr, bad, xo, lb, lam, &leak, &ko); })
            .find("alpha must be finite and > 0, found 0") != std::string::npos);
  bad = d;
  bad.elems = 4;
  CHECK(testing::error_of([&] { ops::mixup(x, labels, &ctr, bad, xo, lb, lam, &leak, &ko); })
            .find("does not hold 4 samples of 4 values") != std::string::npos);
  Tensor same = x;
  CHECK(testing::error_of([&] { ops::mixup(x, labels, &ctr, d, same, lb, lam, &leak, &ko); })
            .find("another buffer") != std::string::npos);
  CHECK(testing::error_of([&] { ops::mixup(x, labels, &ctr, d, xo, lb, lam, &leak, nullptr); })
            .find("leak and leak_out must both be given") != std::string::npos);
  Tensor wrong = Tensor::zeros({B}, DType::f32);
  CHECK(testing::error_of([&] { ops::mixup(x, labels, &ctr, d, xo, wrong, lam, &leak, &ko); }).find("labels_b") !=
        std::string::npos);
  CHECK(testing::error_of([&] { ops::mixup(x, labels, nullptr, d, xo, lb, lam, &leak, &ko); }).find("counter") !=
        std::string::npos);
}
