// file_vote (kernels/file_vote.cu) through model::vote_files against its CPU
// twin: bit-identical from probabilities (one vote per file, fixed order),
// decisions equal and probabilities within f32 rounding from logits; outputs
// poisoned first so every element must be written; many files in one launch.
// Runs only where a GPU (or the CUDA emulator) is usable; else exits 77 (skipped).
#include <doctest/doctest.h>

#include <cmath>

#include "engine/stream.hpp"
#include "engine/tensor.hpp"
#include "model/metrics.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using namespace mf::model;

TEST_CASE("file_vote CUDA == CPU twin (probabilities: bit for bit; logits: decisions)") {
  Stream s(Device::cuda(0), "test");
  for (auto [F, L, S, C] : {std::array<std::int64_t, 4>{1, 1, 1, 2}, {4099, 3, 5, 4}, {70000, 2, 2, 3},
                            {33, 7, 1, 64}}) {
    const std::int64_t N = F * L * S;
    auto p = testing::random_floats(std::size_t(N * C), std::uint64_t(F), 0.f, 1.f);
    for (float& x : p) x = std::round(x * 8.f) / 8.f;
    auto q = testing::random_floats(std::size_t(N), std::uint64_t(F + 1), 0.f, 1.f);
    const Tensor hc = Tensor::from_floats(p, {N, C}), hl = Tensor::from_floats(q, {N});
    const FileVote want = vote_files(hc, hl, F, L, S, 0.5, false);
    const Tensor dc = hc.to(Device::cuda(0), s), dl = hl.to(Device::cuda(0), s);
    const FileVote got = vote_files(dc, dl, F, L, S, 0.5, false, s);
    CHECK(got.probs == want.probs);
    CHECK(got.klass == want.klass);
    CHECK(got.leak_prob == want.leak_prob);
    CHECK(got.leak == want.leak);
    const FileVote gl = vote_files(dc, dl, F, L, S, 0.5, true, s);
    const FileVote wl = vote_files(hc, hl, F, L, S, 0.5, true);
    CHECK(testing::rel_l2(gl.probs, wl.probs) < 1e-6);
  }
}
