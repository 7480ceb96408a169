// Vector bodies of trial_scores' CPU path (kernels/trial_scores.hpp) for the
// avx512 and avx2 CPU kernels (engine/cpu_kernels.hpp): one body
// (kernels/trial_scores_simd.inc) compiled per instruction set. They keep the
// twin's arithmetic exactly: 32 partial sums of separately rounded products
// (no FMA), partial j over k = j, j + 32, ..., then the same tree; so their
// scores equal the twin's bit for bit. Call a namespace's function only when
// the CPU has that instruction set.
#pragma once

#include <cstdint>

namespace mf::kernels {

// scores[t] for t in [t0, t1), indices already checked.
namespace avx512 {
void trial_scores_range(const float* emb, std::int64_t dim, const std::int32_t* pairs, std::int64_t t0,
                        std::int64_t t1, float* scores);
}  // namespace avx512
namespace avx2 {
void trial_scores_range(const float* emb, std::int64_t dim, const std::int32_t* pairs, std::int64_t t0,
                        std::int64_t t1, float* scores);
}  // namespace avx2

}  // namespace mf::kernels
