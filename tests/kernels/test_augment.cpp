// augment (kernels/augment.hpp), CPU twin: each transform alone and all
// together against a float64 reference written here from the header's words
// (the draws come from the same augment_uniform, mapped to integers and ranges
// here by floor(u * (n + 1)) in double); the distributions of the drawn shifts,
// gains, mask widths/starts, noise segments and SNRs over 20000 samples, read
// back from the op's output; the achieved SNR equals the drawn one;
// thread-count independence; counter, stream and first_sample; all options 0
// leaves x untouched; argument errors. The CUDA kernel against this twin:
// test_augment_gpu.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/parallel.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/augment_testing.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using kernels::AugmentArgs;

namespace {

AugmentArgs dims(std::int64_t batch, std::int64_t mels, std::int64_t frames) {
  AugmentArgs d;
  d.batch = batch;
  d.mels = mels;
  d.frames = frames;
  d.seed = 0x5eed1234;
  d.stream = 1;
  d.first_sample = 3;
  return d;
}

const auto& run = testing::augment_on_cpu;

// x's values as the op sees them (rounded to t).
std::vector<float> rounded(const std::vector<float>& x, DType t) {
  return Tensor::from_floats(x, {std::int64_t(x.size())}, t).to_floats();
}

struct Reference {
  std::vector<double> y;       // [batch, mels, frames]
  std::vector<char> masked;    // 1 where a mask covers the element
  std::vector<double> max_abs; // per sample: the largest |value| in its input, noise and output
};

// The header's four steps in float64, one sample at a time.
Reference reference(const AugmentArgs& d, const std::vector<float>& x, const std::vector<float>& noise,
                    std::uint32_t ctr) {
  const std::int64_t M = d.mels, F = d.frames, N = M * F;
  Reference r;
  r.y.resize(std::size_t(d.batch * N));
  r.masked.assign(std::size_t(d.batch * N), 0);
  for (std::int64_t b = 0; b < d.batch; ++b) {
    const std::int64_t sample = d.first_sample + b;
    auto u = [&](std::uint32_t k) { return double(kernels::augment_uniform(d, ctr, sample, k)); };
    auto uniform_int = [&](std::uint32_t k, std::int64_t n) {
      return std::min(std::int64_t(std::floor(u(k) * double(n + 1))), n);
    };
    double* y = r.y.data() + b * N;
    const float* xs = x.data() + b * N;
    double big = 0;
    const std::int64_t s = d.time_shift > 0 ? uniform_int(0, 2 * d.time_shift) - d.time_shift : 0;
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t t = 0; t < F; ++t) {
        y[m * F + t] = xs[m * F + ((t - s) % F + F) % F];
        big = std::max(big, std::fabs(y[m * F + t]));
      }
    if (d.gain_db > 0) {
      const double g = (2 * u(1) - 1) * d.gain_db;
      for (std::int64_t e = 0; e < N; ++e) y[e] += g / d.db_per_unit;
    }
    if (d.noise_count > 0) {
      const std::int64_t k = uniform_int(2, d.noise_count - 1);
      const double snr = d.snr_lo_db + u(3) * (double(d.snr_hi_db) - d.snr_lo_db);
      const float* n = noise.data() + k * N;
      std::vector<double> px(static_cast<std::size_t>(N)), pn(static_cast<std::size_t>(N));
      double sx = 0, sn = 0;
      for (std::int64_t e = 0; e < N; ++e) {
        px[e] = std::pow(10.0, y[e] * d.db_per_unit / 10);
        pn[e] = std::pow(10.0, n[e] * double(d.db_per_unit) / 10);
        sx += px[e];
        sn += pn[e];
        big = std::max(big, std::fabs(double(n[e])));
      }
      const double scale = (sx / N) / ((sn / N) * std::pow(10.0, snr / 10));
      for (std::int64_t e = 0; e < N; ++e) y[e] = 10 * std::log10(px[e] + scale * pn[e]) / d.db_per_unit;
    }
    const int masks = d.freq_masks + d.time_masks;
    if (masks > 0) {
      double mean = 0;
      for (std::int64_t e = 0; e < N; ++e) mean += y[e];
      mean /= double(N);
      for (int i = 0; i < masks; ++i) {
        const bool freq = i < d.freq_masks;
        const std::int64_t w = uniform_int(4 + 2 * i, freq ? d.freq_mask_width : d.time_mask_width);
        const std::int64_t start = uniform_int(5 + 2 * i, (freq ? M : F) - w);
        for (std::int64_t m = 0; m < M; ++m)
          for (std::int64_t t = 0; t < F; ++t)
            if ((freq ? m : t) >= start && (freq ? m : t) < start + w) r.masked[b * N + m * F + t] = 1;
      }
      for (std::int64_t e = 0; e < N; ++e)
        if (r.masked[b * N + e]) y[e] = mean;
    }
    for (std::int64_t e = 0; e < N; ++e) big = std::max(big, std::fabs(y[e]));
    r.max_abs.push_back(big);
  }
  return r;
}

// One unit in the last place of dtype t at |v| (normal range): bf16 keeps 8
// significant bits, f16 11, f32 24.
double ulp(DType t, double v) {
  const int bits = t == DType::bf16 ? 8 : t == DType::f16 ? 11 : 24;
  int e = 0;
  std::frexp(v == 0 ? 1e-30 : v, &e);
  return std::ldexp(1.0, e - bits);
}

// Checks out against the reference: |out - ref| <= f32_tol(sample) in f32;
// in bf16/f16 the twin's f32 value and the reference may round to neighbouring
// values of t, so one ulp of t more. Returns the largest error seen relative
// to the f32 tolerance (for the report in the failure message).
void check_against(const AugmentArgs& d, DType t, const std::vector<float>& out, const Reference& r,
                   const std::function<double(std::int64_t b)>& f32_tol) {
  const std::int64_t N = d.mels * d.frames;
  double worst = 0;
  std::int64_t bad = 0, first_bad = -1;
  for (std::int64_t i = 0; i < d.batch * N; ++i) {
    const double tol = f32_tol(i / N) + (t == DType::f32 ? 0.0 : ulp(t, r.y[std::size_t(i)]));
    const double err = std::fabs(double(out[std::size_t(i)]) - r.y[std::size_t(i)]);
    worst = std::max(worst, tol > 0 ? err / tol : (err > 0 ? 1e30 : 0));
    if (!(err <= tol)) {
      ++bad;
      if (first_bad < 0) first_bad = i;
    }
  }
  INFO("dtype " << dtype_name(t) << ": worst error / tolerance " << worst << ", first bad index " << first_bad);
  CHECK(bad == 0);
}

// Inputs: log-mel-like dB values.
std::vector<float> segments(std::int64_t count, std::int64_t n, std::uint64_t seed, float lo, float hi) {
  return testing::random_floats(std::size_t(count * n), seed, lo, hi);
}

}  // namespace

TEST_CASE("augment: augment_uniform is in [0, 1) on a 2^-24 grid, uniform, and uncorrelated across draws") {
  const AugmentArgs d = dims(1, 1, 1);
  const int n = 200000;
  std::vector<int> bins(16);
  double sum = 0, cross_draw = 0, cross_sample = 0;
  for (int s = 0; s < n; ++s) {
    const float u0 = kernels::augment_uniform(d, 7, s, 0), u1 = kernels::augment_uniform(d, 7, s, 1);
    const float v0 = kernels::augment_uniform(d, 7, s + 1, 0);
    REQUIRE(u0 >= 0.f);
    REQUIRE(u0 < 1.f);
    REQUIRE(u0 * 16777216.f == std::floor(u0 * 16777216.f));
    ++bins[std::size_t(u0 * 16)];
    sum += u0;
    cross_draw += (u0 - 0.5) * (u1 - 0.5);
    cross_sample += (u0 - 0.5) * (v0 - 0.5);
  }
  double chi2 = 0;
  for (int c : bins) chi2 += (c - n / 16.0) * (c - n / 16.0) / (n / 16.0);
  CHECK(chi2 < 37.7);  // chi-square, 15 degrees of freedom, p = 0.001
  CHECK(std::fabs(sum / n - 0.5) < 4 * std::sqrt(1 / 12.0 / n));
  // correlation coefficients (variance 1/12 each): 4 standard errors of 1/sqrt(n)
  CHECK(std::fabs(cross_draw / n * 12) < 4 / std::sqrt(double(n)));
  CHECK(std::fabs(cross_sample / n * 12) < 4 / std::sqrt(double(n)));
  // integers: never above n, all values reached
  std::vector<int> seen(4);
  for (int s = 0; s < 1000; ++s) ++seen[std::size_t(kernels::augment_int(kernels::augment_uniform(d, 1, s, 0), 3))];
  for (int c : seen) CHECK(c > 200);
  CHECK(kernels::augment_int(1.f - 1.f / 16777216.f, 5) == 5);
  CHECK(kernels::augment_int(0.f, 5) == 0);
}

TEST_CASE("augment: each transform alone and all together equal the float64 reference") {
  const std::int64_t B = 5, M = 16, F = 24, N = M * F;
  const std::vector<float> x0 = segments(B, N, 11, -80.f, 0.f);
  const std::vector<float> noise = segments(3, N, 12, -90.f, -10.f);
  const std::uint32_t ctr = 9;
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    const std::vector<float> x = rounded(x0, t);
    SUBCASE("time shift: exact (a permutation)") {
      AugmentArgs d = dims(B, M, F);
      d.time_shift = 7;
      const Reference r = reference(d, x, {}, ctr);
      CHECK(run(d, t, x, {}, ctr) == std::vector<float>(r.y.begin(), r.y.end()));
    }
    SUBCASE("gain in dB with a power-of-two range: exact (one rounding of an exact sum)") {
      AugmentArgs d = dims(B, M, F);
      d.gain_db = 4;
      const Reference r = reference(d, x, {}, ctr);
      std::vector<float> want(r.y.size());
      for (std::size_t i = 0; i < want.size(); ++i) want[i] = rounded({float(r.y[i])}, t)[0];
      CHECK(run(d, t, x, {}, ctr) == want);
    }
    SUBCASE("gain in dB/10 units: within one rounding of the f32 gain and sum") {
      AugmentArgs d = dims(B, M, F);
      d.gain_db = 6;
      d.db_per_unit = 10;
      std::vector<float> x10(x0.size());
      for (std::size_t i = 0; i < x10.size(); ++i) x10[i] = x0[i] / 10;
      const std::vector<float> xin = rounded(x10, t);
      const Reference r = reference(d, xin, {}, ctr);
      // the twin rounds g, g / 10 and the sum: 2^-23 of |y| and of |g / 10|
      check_against(d, t, run(d, t, xin, {}, ctr), r,
                    [&](std::int64_t b) { return std::ldexp(r.max_abs[std::size_t(b)] + 0.6, -23); });
    }
    SUBCASE("masks: positions exact, the fill within the f32 mean's rounding") {
      AugmentArgs d = dims(B, M, F);
      d.freq_masks = 2;
      d.freq_mask_width = 6;
      d.time_masks = 3;
      d.time_mask_width = 9;
      const Reference r = reference(d, x, {}, ctr);
      const std::vector<float> out = run(d, t, x, {}, ctr);
      std::int64_t masked = 0;
      for (std::size_t i = 0; i < out.size(); ++i) {
        if (!r.masked[i]) {
          REQUIRE(out[i] == x[i]);  // untouched, bit for bit
        } else {
          ++masked;
        }
      }
      CHECK(masked > 0);
      CHECK(masked < B * N);
      // f32 lane sum of N values: (N/256 + 8 + 1) roundings of at most max|y|
      check_against(d, t, out, r, [&](std::int64_t b) {
        return (double(N) / kernels::kAugmentThreads + 9) * std::ldexp(r.max_abs[std::size_t(b)], -24);
      });
    }
    SUBCASE("noise: within the f32 power-domain arithmetic's error") {
      AugmentArgs d = dims(B, M, F);
      d.noise_count = 3;
      d.snr_lo_db = -5;
      d.snr_hi_db = 20;
      const Reference r = reference(d, x, noise, ctr);
      // P = exp(v * kp) carries the rounding of v * kp (relative to |v|), the
      // log adds its own: 4 ulp of the sample's largest magnitude (measured:
      // 1.5).
      check_against(d, t, run(d, t, x, noise, ctr), r,
                    [&](std::int64_t b) { return 4 * std::ldexp(r.max_abs[std::size_t(b)], -24); });
    }
    SUBCASE("all together") {
      AugmentArgs d = dims(B, M, F);
      d.time_shift = 5;
      d.gain_db = 6;
      d.freq_masks = 2;
      d.freq_mask_width = 4;
      d.time_masks = 2;
      d.time_mask_width = 8;
      d.noise_count = 3;
      d.snr_lo_db = 0;
      d.snr_hi_db = 15;
      const Reference r = reference(d, x, noise, ctr);
      check_against(d, t, run(d, t, x, noise, ctr), r, [&](std::int64_t b) {
        return (double(N) / kernels::kAugmentThreads + 9 + 4) * std::ldexp(r.max_abs[std::size_t(b)], -24);
      });
    }
  }
}

namespace {
double chi_square(const std::vector<std::int64_t>& counts, double expected_each) {
  double c2 = 0;
  for (std::int64_t c : counts) c2 += (double(c) - expected_each) * (double(c) - expected_each) / expected_each;
  return c2;
}
constexpr std::int64_t kDraws = 20000;
}  // namespace

TEST_CASE("augment statistics: time shifts uniform over [-S, S], a true circular shift") {
  const std::int64_t M = 3, F = 16;
  const int S = 5;
  AugmentArgs d = dims(kDraws, M, F);
  d.time_shift = S;
  std::vector<float> x(std::size_t(kDraws * M * F));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(i % F);  // each row 0..F-1
  const std::vector<float> out = run(d, DType::f32, x, {}, 4);
  std::vector<std::int64_t> counts(2 * S + 1);
  for (std::int64_t b = 0; b < kDraws; ++b) {
    const float* o = out.data() + b * M * F;
    const int rot = int(F - std::int64_t(o[0])) % int(F);  // o[0] = (0 - s) mod F
    const int s = rot <= F / 2 ? rot : rot - int(F);
    REQUIRE(s >= -S);
    REQUIRE(s <= S);
    ++counts[std::size_t(s + S)];
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t t = 0; t < F; ++t) REQUIRE(o[m * F + t] == float(((t - s) % F + F) % F));
  }
  CHECK(chi_square(counts, double(kDraws) / (2 * S + 1)) < 29.6);  // 10 degrees of freedom, p = 0.001
}

TEST_CASE("augment statistics: gains uniform over [-g, g] dB, mean 0") {
  const float G = 6;
  AugmentArgs d = dims(kDraws, 2, 2);
  d.gain_db = G;
  const std::vector<float> out = run(d, DType::f32, std::vector<float>(std::size_t(kDraws * 4), 0.f), {}, 4);
  double sum = 0, sum2 = 0, lo = 1e9, hi = -1e9;
  std::vector<std::int64_t> counts(12);
  for (std::int64_t b = 0; b < kDraws; ++b) {
    const double g = out[std::size_t(b * 4)];
    for (int e = 1; e < 4; ++e) REQUIRE(out[std::size_t(b * 4 + e)] == float(g));  // one gain per sample
    REQUIRE(g >= -G);
    REQUIRE(g <= G);
    sum += g;
    sum2 += g * g;
    lo = std::min(lo, g);
    hi = std::max(hi, g);
    ++counts[std::min<std::size_t>(11, std::size_t((g + G) / (2 * G) * 12))];
  }
  const double var = G * G / 3, se = std::sqrt(var / kDraws);
  CHECK(std::fabs(sum / kDraws) < 4 * se);
  CHECK(std::fabs(sum2 / kDraws / var - 1) < 0.03);
  CHECK(lo < -G * 0.999);
  CHECK(hi > G * 0.999);
  CHECK(chi_square(counts, double(kDraws) / 12) < 31.3);  // 11 degrees of freedom, p = 0.001
}

TEST_CASE("augment statistics: mask widths uniform over 0..W, starts uniform over 0..extent - width") {
  for (bool freq : {true, false}) {
    CAPTURE(freq);
    const std::int64_t M = freq ? 16 : 4, F = freq ? 4 : 16, E = freq ? M : F;
    const int W = freq ? 5 : 7;
    AugmentArgs d = dims(kDraws, M, F);
    (freq ? d.freq_masks : d.time_masks) = 1;
    (freq ? d.freq_mask_width : d.time_mask_width) = W;
    // x[m][t] = 100 m + t: integers, so no element equals the (non-integer) mean
    std::vector<float> x(std::size_t(kDraws * M * F));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(100 * ((i / F) % M) + i % F);
    const double mean = 100 * (M - 1) / 2.0 + (F - 1) / 2.0;
    const std::vector<float> out = run(d, DType::f32, x, {}, 6);
    std::vector<std::int64_t> widths(static_cast<std::size_t>(W + 1)), starts(static_cast<std::size_t>(E));
    std::int64_t full_width = 0;
    for (std::int64_t b = 0; b < kDraws; ++b) {
      const float* o = out.data() + b * M * F;
      std::vector<int> hit(static_cast<std::size_t>(E));  // masked positions along the mask's axis
      for (std::int64_t m = 0; m < M; ++m)
        for (std::int64_t t = 0; t < F; ++t) {
          const bool is_mean = o[m * F + t] == float(mean);
          REQUIRE((is_mean || o[m * F + t] == x[std::size_t(b * M * F + m * F + t)]));
          hit[std::size_t(freq ? m : t)] += is_mean;
        }
      int w = 0, start = -1;
      for (std::int64_t p = 0; p < E; ++p) {
        REQUIRE((hit[std::size_t(p)] == 0 || hit[std::size_t(p)] == (freq ? F : M)));  // whole rows/columns
        if (hit[std::size_t(p)]) {
          if (start < 0) start = int(p);
          REQUIRE(p == start + w);  // one contiguous band
          ++w;
        }
      }
      REQUIRE(w <= W);
      ++widths[std::size_t(w)];
      if (w == W) {  // starts given the width: uniform over 0..E - W
        REQUIRE(start + w <= E);
        ++starts[std::size_t(start)];
        ++full_width;
      }
    }
    CHECK(chi_square(widths, double(kDraws) / (W + 1)) < (W == 5 ? 20.5 : 24.3));  // df 5 / 7, p = 0.001
    starts.resize(std::size_t(E - W + 1));
    CHECK(chi_square(starts, double(full_width) / double(E - W + 1)) < (E - W == 11 ? 32.9 : 27.9));  // df 11 / 9
  }
}

TEST_CASE("augment statistics: noise segments uniform, the achieved SNR is the drawn one, SNRs uniform") {
  // x = 0 dB (P_x = 1) everywhere; noise segment k is 0 dB on mel row k and
  // -200 dB elsewhere, so the row the output raises names k, and
  // 10^(out/10) - 1 is the scaled noise power.
  const std::int64_t M = 8, F = 4, N = M * F, K = 5;
  AugmentArgs d = dims(kDraws, M, F);
  d.noise_count = K;
  d.snr_lo_db = 0;
  d.snr_hi_db = 20;
  std::vector<float> noise(std::size_t(K * N), -200.f);
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t t = 0; t < F; ++t) noise[std::size_t(k * N + k * F + t)] = 0.f;
  const std::uint32_t ctr = 2;
  const std::vector<float> out = run(d, DType::f32, std::vector<float>(std::size_t(kDraws * N), 0.f), noise, ctr);
  std::vector<std::int64_t> segs(K), snrs(10);
  double worst = 0, sum = 0;
  for (std::int64_t b = 0; b < kDraws; ++b) {
    const float* o = out.data() + b * N;
    std::int64_t k = 0;
    for (std::int64_t m = 1; m < M; ++m) k = o[m * F] > o[k * F] ? m : k;
    REQUIRE(k < K);
    ++segs[std::size_t(k)];
    double pn = 0;
    for (std::int64_t e = 0; e < N; ++e) pn += std::pow(10.0, o[e] / 10.0) - 1;
    const double achieved = 10 * std::log10(1.0 / (pn / N));  // mean(P_x) / mean(scale P_n)
    const double drawn = d.snr_lo_db + double(kernels::augment_uniform(d, ctr, d.first_sample + b, 3)) *
                                           (d.snr_hi_db - d.snr_lo_db);
    worst = std::max(worst, std::fabs(achieved - drawn));
    REQUIRE(achieved > -0.001);
    REQUIRE(achieved < 20.001);
    ++snrs[std::min<std::size_t>(9, std::size_t(achieved / 2))];
    sum += achieved;
  }
  INFO("largest |achieved - drawn SNR| " << worst << " dB");
  CHECK(worst < 1e-3);
  CHECK(chi_square(segs, double(kDraws) / K) < 18.5);   // df 4, p = 0.001
  CHECK(chi_square(snrs, double(kDraws) / 10) < 27.9);  // df 9, p = 0.001
  CHECK(std::fabs(sum / kDraws - 10) < 4 * 20 / std::sqrt(12.0 * kDraws));
}

namespace {
AugmentArgs everything(std::int64_t batch, std::int64_t mels, std::int64_t frames) {
  AugmentArgs d = dims(batch, mels, frames);
  d.time_shift = 6;
  d.gain_db = 6;
  d.freq_masks = 2;
  d.freq_mask_width = 5;
  d.time_masks = 2;
  d.time_mask_width = 7;
  d.noise_count = 4;
  d.snr_lo_db = 0;
  d.snr_hi_db = 20;
  return d;
}
}  // namespace

TEST_CASE("augment: the same bits on 1 and 2 threads, per counter; new draws per counter, stream, sample") {
  const std::int64_t B = 33, M = 20, F = 30, N = M * F;
  const std::vector<float> x = segments(B, N, 21, -80.f, 0.f), noise = segments(4, N, 22, -90.f, -10.f);
  AugmentArgs d = everything(B, M, F);
  const int threads = cpu_threads();
  set_cpu_threads(1);
  const std::vector<float> one = run(d, DType::f32, x, noise, 8);
  set_cpu_threads(2);
  const std::vector<float> two = run(d, DType::f32, x, noise, 8);
  set_cpu_threads(threads);
  CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
  CHECK(run(d, DType::f32, x, noise, 8) == one);  // the same counter: the same draws
  CHECK(run(d, DType::f32, x, noise, 9) != one);  // the next step: new draws
  AugmentArgs other = d;
  other.stream = 2;  // another micro-batch of the step
  CHECK(run(other, DType::f32, x, noise, 8) != one);
  other = d;
  other.seed = d.seed + 1;
  CHECK(run(other, DType::f32, x, noise, 8) != one);
  // every sample draws differently: the same input in every sample gives
  // B different outputs
  const std::vector<float> same(x.begin(), x.begin() + N);
  std::vector<float> rep;
  for (std::int64_t b = 0; b < B; ++b) rep.insert(rep.end(), same.begin(), same.end());
  const std::vector<float> r = run(d, DType::f32, rep, noise, 8);
  for (std::int64_t b = 1; b < B; ++b)
    CHECK(!std::equal(r.begin(), r.begin() + N, r.begin() + b * N));
}

TEST_CASE("augment: draws follow the sample index, so first_sample splits a batch into equal pieces") {
  const std::int64_t B = 10, M = 12, F = 20, N = M * F;
  const std::vector<float> x = segments(B, N, 31, -80.f, 0.f), noise = segments(4, N, 32, -90.f, -10.f);
  AugmentArgs d = everything(B, M, F);
  d.first_sample = 40;
  const std::vector<float> whole = run(d, DType::bf16, x, noise, 3);
  AugmentArgs a = d, b = d;
  a.batch = 4;
  b.batch = 6;
  b.first_sample = 44;
  std::vector<float> pieces = run(a, DType::bf16, std::vector<float>(x.begin(), x.begin() + 4 * N), noise, 3);
  const std::vector<float> rest = run(b, DType::bf16, std::vector<float>(x.begin() + 4 * N, x.end()), noise, 3);
  pieces.insert(pieces.end(), rest.begin(), rest.end());
  CHECK(pieces == whole);
  d.first_sample = 0;  // other samples: other draws
  CHECK(run(d, DType::bf16, x, noise, 3) != whole);
}

TEST_CASE("augment: with every option 0 nothing changes, whatever the bytes; the counter is not read") {
  const AugmentArgs d = dims(4, 8, 8);
  REQUIRE(!d.any());
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    Tensor x = Tensor::from_floats(segments(4, 64, 41, -80.f, 0.f), {4, 8, 8}, t);
    std::memset(x.raw(), 0xff, 7);  // NaN bytes too
    const std::vector<unsigned char> before(static_cast<unsigned char*>(x.raw()),
                                            static_cast<unsigned char*>(x.raw()) + x.nbytes());
    ops::augment(x, nullptr, d, nullptr);
    CHECK(std::memcmp(before.data(), x.raw(), x.nbytes()) == 0);
  }
}

TEST_CASE("augment: the nhwc input [batch, mels, frames, 1] is accepted; bad arguments are refused") {
  const std::vector<float> v = segments(2, 48, 51, -80.f, 0.f), noise = segments(1, 48, 52, -80.f, 0.f);
  AugmentArgs d = dims(2, 6, 8);
  d.time_shift = 3;
  d.gain_db = 2;
  std::int32_t ctr = 1;
  Tensor x4 = Tensor::from_floats(v, {2, 6, 8, 1});
  ops::augment(x4, &ctr, d, nullptr);
  CHECK(x4.to_floats() == run(d, DType::f32, v, {}, 1));
  Tensor x = Tensor::from_floats(v, {2, 6, 8});
  const Tensor tn = Tensor::from_floats(noise, {std::int64_t(noise.size())});
  auto err = [&](const AugmentArgs& bad, const Tensor* n = nullptr, bool with_counter = true) {
    return testing::error_of([&] { ops::augment(x, with_counter ? &ctr : nullptr, bad, n); });
  };
  AugmentArgs b = d;
  b.frames = 9;
  CHECK(err(b).find("does not match the dims' batch 2, mels 6, frames 9") != std::string::npos);
  b = d;
  b.time_shift = 8;
  CHECK(err(b) == "augment: time_shift must be in [0, frames - 1 = 7], found 8");
  b = d;
  b.freq_masks = 1;
  b.freq_mask_width = 7;
  CHECK(err(b) == "augment: freq_mask_width must be in [0, mels = 6], found 7");
  b = d;
  b.time_masks = kernels::kAugmentMaxMasks + 1;
  CHECK(err(b).find("must be in [0, 64], found 0 and 65") != std::string::npos);
  b = d;
  b.noise_count = 1;
  CHECK(err(b) == "augment: noise must be given exactly when noise_count > 0, found noise_count 1 and noise null");
  CHECK(err(d, &tn).find("found noise_count 0 and noise given") != std::string::npos);
  b.snr_lo_db = 5;
  b.snr_hi_db = 1;
  CHECK(err(b, &tn) == "augment: the SNR range must be finite with lo <= hi, found [5, 1] dB");
  b = d;
  b.gain_db = -1;
  CHECK(err(b) == "augment: gain_db must be finite and >= 0, found -1");
  b = d;
  b.db_per_unit = 0;
  CHECK(err(b) == "augment: db_per_unit must be finite and > 0, found 0");
  CHECK(err(d, nullptr, false) == "augment: the counter must be given (an i32 in x's memory), found null");
  Tensor wide = Tensor::zeros({1, 1, kernels::kAugmentMaxFrames + 1}, DType::f32);
  b = dims(1, 1, kernels::kAugmentMaxFrames + 1);
  b.gain_db = 1;
  CHECK(testing::error_of([&] { ops::augment(wide, &ctr, b, nullptr); }).find("1 <= frames <= 8192") !=
        std::string::npos);
  Tensor ints = Tensor::zeros({2, 6, 8}, DType::i32);
  CHECK(testing::error_of([&] { ops::augment(ints, &ctr, d, nullptr); }).find("x must be f32, bf16 or f16") !=
        std::string::npos);
}
