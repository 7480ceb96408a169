// file_vote (kernels/file_vote.hpp) through model::vote_files, CPU twin: the
// voting rules on a hand-made case (majority, a class tie broken by the mean
// probability, leak ties by the mean leak probability; the file metrics read
// from that vote), logits voting as their host-computed probabilities, a
// naive per-file reference on random data with frequent ties, the same vote
// for one thread and all, and a shape mismatch naming the op. The CUDA kernel
// against this twin: test_file_vote_gpu.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/parallel.hpp"
#include "engine/tensor.hpp"
#include "model/metrics.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using namespace mf::model;

namespace {
// F=3 files, L=4 long segments, S=2 short segments (both shorts equal, so the
// means are exact), C=3 classes.
struct VoteCase {
  std::vector<float> cls, leak;
};
VoteCase vote_case() {
  const float long_probs[3][4][3] = {
      {{0.6f, 0.25f, 0.15f}, {0.6f, 0.25f, 0.15f}, {0.1f, 0.8f, 0.1f}, {0.2f, 0.2f, 0.6f}},  // votes 0,0,1,2 -> 0
      {{0.1f, 0.5f, 0.4f}, {0.1f, 0.5f, 0.4f}, {0.1f, 0.2f, 0.7f}, {0.1f, 0.2f, 0.7f}},      // 1,1,2,2: tie -> 2
      {{0.4f, 0.4f, 0.2f}, {0.4f, 0.4f, 0.2f}, {0.25f, 0.5f, 0.25f}, {0.4f, 0.4f, 0.2f}}};   // 0,0,1,0 -> 0
  const float long_leak[3][4] = {{0.75f, 0.75f, 0.25f, 0.125f},  // 2 of 4, mean .46875 -> no leak
                                 {0.75f, 0.5f, 0.25f, 0.5f},     // 3 of 4 -> leak
                                 {1.0f, 0.875f, 0.0f, 0.25f}};   // 2 of 4, mean .53125 -> leak
  VoteCase v;
  for (int f = 0; f < 3; ++f)
    for (int l = 0; l < 4; ++l)
      for (int s = 0; s < 2; ++s) {
        for (int c = 0; c < 3; ++c) v.cls.push_back(long_probs[f][l][c]);
        v.leak.push_back(long_leak[f][l]);
      }
  return v;
}
}  // namespace

TEST_CASE("file vote: majority, a class tie broken by mean probability, leak ties by mean leak probability") {
  const VoteCase vc = vote_case();
  const Tensor cls = Tensor::from_floats(vc.cls, {24, 3});
  const Tensor leak = Tensor::from_floats(vc.leak, {24});
  const FileVote v = vote_files(cls, leak, 3, 4, 2, 0.5, false);
  CHECK(v.klass == std::vector<std::int32_t>{0, 2, 0});
  CHECK(v.leak == std::vector<std::int32_t>{0, 1, 1});
  CHECK(v.leak_prob[0] == 0.46875f);
  CHECK(v.leak_prob[2] == 0.53125f);
  CHECK(v.probs[1 * 3 + 2] == doctest::Approx(0.55f));
  CHECK(v.probs[1 * 3 + 1] == doctest::Approx(0.35f));
  // File metrics from the vote.
  const std::vector<std::int32_t> fl{0, 2, 1}, fleak{0, 1, 1};
  const ClassMetrics m = file_metrics(v, fl, fleak, 0.5);
  CHECK(m.accuracy == doctest::Approx(2.0 / 3));
  CHECK(m.detection_rate == 1.0);
  CHECK(m.false_alarm_rate == 0.0);
  // A lower threshold flips file 0 (2 of 4 at .5 -> with .2: all four vote leak).
  CHECK(vote_files(cls, leak, 3, 4, 2, 0.2, false).leak[0] == 1);
}

TEST_CASE("file vote from logits equals the vote from host-computed probabilities") {
  const std::int64_t F = 37, L = 5, S = 3, C = 4, N = F * L * S;
  auto logits = testing::random_floats(std::size_t(N * C), 11, -3.f, 3.f);
  auto leak_logits = testing::random_floats(std::size_t(N), 12, -4.f, 4.f);
  std::vector<float> probs(logits.size()), leak(leak_logits.size());
  for (std::int64_t i = 0; i < N; ++i) {
    float mx = logits[std::size_t(i * C)];
    for (std::int64_t c = 1; c < C; ++c) mx = std::max(mx, logits[std::size_t(i * C + c)]);
    float z = 0;
    for (std::int64_t c = 0; c < C; ++c) z += std::exp(logits[std::size_t(i * C + c)] - mx);
    for (std::int64_t c = 0; c < C; ++c) probs[std::size_t(i * C + c)] = std::exp(logits[std::size_t(i * C + c)] - mx) / z;
    leak[std::size_t(i)] = 1.f / (1.f + std::exp(-leak_logits[std::size_t(i)]));
  }
  const FileVote a = vote_files(Tensor::from_floats(logits, {N, C}), Tensor::from_floats(leak_logits, {N}), F, L, S,
                                0.5, true);
  const FileVote b = vote_files(Tensor::from_floats(probs, {N, C}), Tensor::from_floats(leak, {N}), F, L, S, 0.5, false);
  CHECK(a.klass == b.klass);
  CHECK(a.leak == b.leak);
  CHECK(testing::rel_l2(a.probs, b.probs) < 1e-6);
}

TEST_CASE("file vote against a naive reference on random data, for any thread count") {
  const std::int64_t F = 301, L = 3, S = 4, C = 5, N = F * L * S;
  auto p = testing::random_floats(std::size_t(N * C), 21, 0.f, 1.f);
  // Coarse values make ties frequent.
  for (float& x : p) x = std::round(x * 4.f) / 4.f;
  auto q = testing::random_floats(std::size_t(N), 22, 0.f, 1.f);
  for (float& x : q) x = std::round(x * 4.f) / 4.f;
  const Tensor cls = Tensor::from_floats(p, {N, C}), leak = Tensor::from_floats(q, {N});
  set_cpu_threads(1);
  const FileVote one = vote_files(cls, leak, F, L, S, 0.5, false);
  set_cpu_threads(0);
  const FileVote all = vote_files(cls, leak, F, L, S, 0.5, false);
  CHECK(one.probs == all.probs);
  CHECK(one.klass == all.klass);
  for (std::int64_t f = 0; f < F; ++f) {
    std::vector<double> mean(C, 0);
    std::vector<int> votes(C, 0);
    double leak_mean = 0;
    int leak_votes = 0;
    for (std::int64_t l = 0; l < L; ++l) {
      std::vector<double> lm(C, 0);
      double ql = 0;
      for (std::int64_t s = 0; s < S; ++s) {
        const std::int64_t row = (f * L + l) * S + s;
        for (std::int64_t c = 0; c < C; ++c) lm[std::size_t(c)] += p[std::size_t(row * C + c)] / double(S);
        ql += q[std::size_t(row)] / double(S);
      }
      ++votes[std::size_t(std::max_element(lm.begin(), lm.end()) - lm.begin())];
      for (std::int64_t c = 0; c < C; ++c) mean[std::size_t(c)] += lm[std::size_t(c)] / double(L);
      leak_mean += ql / double(L);
      leak_votes += ql >= 0.5;
    }
    int want = 0;
    for (int c = 1; c < C; ++c)
      if (votes[std::size_t(c)] > votes[std::size_t(want)] ||
          (votes[std::size_t(c)] == votes[std::size_t(want)] && mean[std::size_t(c)] > mean[std::size_t(want)] + 1e-9))
        want = c;
    const int want_leak = 2 * leak_votes > L ? 1 : (2 * leak_votes < L ? 0 : (leak_mean >= 0.5 - 1e-9 ? 1 : 0));
    CHECK_MESSAGE(all.klass[std::size_t(f)] == want, "file ", f);
    CHECK_MESSAGE(all.leak[std::size_t(f)] == want_leak, "file ", f);
  }
}

TEST_CASE("file_vote rejects mismatched shapes with the op's name") {
  const Tensor cls = Tensor::zeros({10, 3}, DType::f32), leak = Tensor::zeros({10}, DType::f32);
  CHECK_THROWS_WITH_AS(vote_files(cls, leak, 3, 2, 2, 0.5, false), doctest::Contains("file_vote"), Error);
}
