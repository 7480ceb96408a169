// trial_scores (kernels/trial_scores.cu) against its CPU twin: odd dims
// (1, 3, 257, ...), one trial, many trials, self and duplicate pairs, NaN in a
// row; scores NaN-poisoned first (every element must be written), two runs
// bit-identical; out-of-range indices give NaN for their trials only. Runs only
// where a GPU (or the CUDA emulator) is usable; else exits 77 (skipped).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "engine/stream.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/tensor_bits.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {

using Vec = std::vector<float>;
const Device kGpu = Device::cuda(0);

Vec unit_rows(std::int64_t F, std::int64_t E, std::uint64_t seed) {
  Vec v = testing::random_floats(std::size_t(F * E), seed);
  for (std::int64_t i = 0; i < F; ++i) {
    double ss = 0;
    for (std::int64_t k = 0; k < E; ++k) ss += double(v[std::size_t(i * E + k)]) * v[std::size_t(i * E + k)];
    for (std::int64_t k = 0; k < E; ++k) v[std::size_t(i * E + k)] = float(v[std::size_t(i * E + k)] / std::sqrt(ss));
  }
  return v;
}

Vec random_pairs(std::int64_t T, std::int64_t F, std::uint64_t seed) {
  const Vec r = testing::random_floats(std::size_t(2 * T), seed, 0.f, 1.f);
  Vec p(r.size());
  for (std::size_t i = 0; i < r.size(); ++i) p[i] = std::min(float(F - 1), std::floor(r[i] * float(F)));
  return p;
}

Tensor run_gpu(const Tensor& emb, const Tensor& pairs, Stream& s) {
  const Tensor e = emb.to(kGpu, s.handle()), p = pairs.to(kGpu, s.handle());
  Tensor out = testing::poisoned({pairs.size(0)}, DType::f32, kGpu, Layout::plain, s.handle());
  ops::trial_scores(e, p, out, s.handle());
  s.synchronize();
  return out;
}

}  // namespace

TEST_CASE("trial_scores gpu: CUDA vs CPU twin, odd dims, one and many trials, self/duplicate pairs, reruns") {
  Stream s(kGpu);
  struct S {
    std::int64_t F, E, T;
  };
  const std::int64_t many = testing::emu_scaled(200000, 10);
  for (S sh : {S{1, 1, 1}, S{2, 3, 5}, S{7, 31, 9}, S{9, 32, 17}, S{5, 33, 64}, S{20, 257, 300}, S{50, 192, many},
               S{3, 1000, 11}}) {
    CAPTURE(sh.F);
    CAPTURE(sh.E);
    CAPTURE(sh.T);
    Vec pairs = random_pairs(sh.T, sh.F, std::uint64_t(sh.T * 3 + 1));
    pairs[0] = pairs[1];  // a self pair
    if (sh.T > 2) pairs[4] = pairs[2], pairs[5] = pairs[3];  // a duplicate
    const Tensor emb = Tensor::from_floats(unit_rows(sh.F, sh.E, std::uint64_t(sh.F + sh.E)), {sh.F, sh.E});
    const Tensor p = Tensor::from_floats(pairs, {sh.T, 2}, DType::i32);
    Tensor cpu = Tensor::empty({sh.T}, DType::f32);
    ops::trial_scores(emb, p, cpu);
    const Tensor gpu = run_gpu(emb, p, s), again = run_gpu(emb, p, s);
    CHECK(testing::same_bytes(gpu, again));
    const Vec g = gpu.to_floats(), c = cpu.to_floats();
    double worst = 0;
    for (std::size_t i = 0; i < g.size(); ++i) worst = std::max(worst, double(std::abs(g[i] - c[i])));
    CHECK(worst <= 1e-6 + double(sh.E) * 6e-8);  // unit rows: scores in [-1, 1]; FMA vs not
    CHECK(testing::rel_l2(g, c) <= 1e-5);
    CHECK(std::abs(g[0] - 1.f) <= 1e-6f);
    if (sh.T > 2) CHECK(g[1] == g[2]);
  }
}

TEST_CASE("trial_scores gpu: NaN in a row makes its trials NaN; bad indices give NaN; no trials is a no-op") {
  Stream s(kGpu);
  Vec e = unit_rows(4, 40, 3);
  e[2 * 40 + 17] = NAN;  // file 2
  const Tensor emb = Tensor::from_floats(e, {4, 40});
  const Vec pairs{0, 1, 0, 2, 2, 3, 2, 2, 3, 1, 4, 0, 1, -1, 3, 3};
  const Vec g = run_gpu(emb, Tensor::from_floats(pairs, {8, 2}, DType::i32), s).to_floats();
  for (std::size_t t = 0; t < g.size(); ++t) {
    CAPTURE(t);
    const bool bad = pairs[2 * t] == 2 || pairs[2 * t + 1] == 2 || pairs[2 * t] > 3 || pairs[2 * t + 1] < 0;
    CHECK(std::isnan(g[t]) == bad);
  }
  Tensor none = Tensor::empty({0}, DType::f32, kGpu);
  ops::trial_scores(emb.to(kGpu, s.handle()), Tensor::empty({0, 2}, DType::i32, kGpu), none, s.handle());
  s.synchronize();
}
