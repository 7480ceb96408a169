// mixup: mixes each training micro-batch with itself (Zhang et al., "mixup:
// Beyond Empirical Risk Minimization", 2018), on the device, inside the
// captured step, after kernels/augment.hpp's transforms.
//
// Within a micro-batch of B samples, sample i is mixed with its partner
//   j = (i + r) mod B,  r = 1 + floor(u * (B - 1)),
// u one counter-based uniform per micro-batch (mixup_pair_shift below): a
// random cyclic pairing (the reader already shuffles, so a cyclic shift is as
// good as a permutation, and needs no scratch). r is in [1, B - 1], so no
// sample is its own partner when B >= 2; with B = 1, r = 1 and j = i (the
// sample is mixed with itself: lam x + (1 - lam) x, x up to rounding).
// Each sample draws its own weight lam_i ~ Beta(alpha, alpha) (mixup_lambda),
// and the outputs are (out of place: the partner's original values are read):
//   x_out[i]    = lam_i * x[i] + (1 - lam_i) * x[j]      (f32 arithmetic, one
//                  rounding to x's dtype; products and the sum rounded
//                  separately on both sides: no fma)
//   leak_out[i] = lam_i * leak[i] + (1 - lam_i) * leak[j] (f32, same rounding)
//   labels_b[i] = labels[j]; lam[i] = lam_i (f32)
// where 1 - lam_i is the f32 1.f - lam_i. The class targets are then
// (labels[i], labels_b[i], lam[i]) for kernels/loss.hpp's soft-target loss.
//
// Beta(alpha, alpha) = G1 / (G1 + G2), G1, G2 ~ Gamma(alpha, 1) independent,
// each by Marsaglia and Tsang ("A simple method for generating gamma
// variables", 2000): for shape a >= 1, d = a - 1/3, c = 1 / sqrt(9 d); repeat
// { x ~ N(0, 1); v = (1 + c x)^3; if v > 0 and log(U) < x^2 / 2 + d - d v +
// d log v: return d v }; for a < 1 (alpha < 1): Gamma(a + 1) * U^(1/a). The
// normal is Box-Muller's sqrt(-2 log u1) cos(2 pi u2). Every uniform is a pure
// function of (seed, *counter, stream, sample, draw index) (mixup_uniform), so
// the weights depend on nothing else: not on threads, grids or graph replays.
// Draw indices: Gamma variate g (0 or 1) uses draws g * 1024 + 3k + {0, 1, 2}
// in its k-th trial (u1, u2, U) for k < kMixupMaxTrials, and g * 1024 + 1023
// for the U of the alpha < 1 boost. A trial accepts with probability > 0.95
// (d >= 2/3), so kMixupMaxTrials = 300 trials all failing has probability
// < 1e-390; should it happen anyway the variate is d (the mode), so the
// result is still a finite lam in [0, 1].
// All of it is done in double on both sides (the CPU twin and CUDA): they
// agree bit for bit wherever log/pow/sqrt/cos do (always on the emulator; on a
// GPU, CUDA's double log/pow/cos are within 1-2 ulp of glibc's, which rounds
// to the same f32 lam except in ~1e-8 of the draws).
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>

#include "engine/counter_rng.hpp"
#include "engine/dtype.hpp"
#include "engine/host_device.hpp"

namespace mf::kernels {

struct MixupArgs {
  std::int64_t batch = 0;         // B, samples in the micro-batch
  std::int64_t elems = 0;         // values per sample (mels * frames)
  float alpha = 0;                // Beta(alpha, alpha); > 0 (0: mixup off, nothing runs)
  std::uint64_t seed = 0;
  std::uint32_t stream = 0;       // the micro-batch index within the step
  std::int64_t first_sample = 0;  // the batch's first sample's index within the step (weights are per sample)
};

inline constexpr int kMixupMaxTrials = 300;
inline constexpr std::uint32_t kMixupGammaDraws = 1024;  // draw indices per Gamma variate
// The kernel: one block of kMixupThreads per sample (grid-stride beyond kMixupMaxBlocks).
inline constexpr int kMixupThreads = 256;
inline constexpr int kMixupMaxBlocks = 4096;

// 64 random bits of (seed, counter, stream, sample, draw): splitmix64's
// finalizer over the sample's Weyl point seed + gamma * (1 + sample) xor a
// key of (counter, stream) and draw; the draw's multiplier differs from
// augment_uniform's, and the pair shift uses sample = -1 (Weyl point = seed).
MF_HOST_DEVICE_INLINE std::uint64_t mixup_bits(const MixupArgs& d, std::uint32_t counter, std::int64_t sample,
                                               std::uint32_t draw) {
  const std::uint64_t key = ((std::uint64_t(counter) << 32 | d.stream) * 0xbf58476d1ce4e5b9ull) ^
                            ((std::uint64_t(draw) + 1) * 0xd6e8feb86659fd93ull);
  return splitmix64_finalize((d.seed + kSplitmix64Gamma * (1 + std::uint64_t(sample))) ^ key);
}

// A uniform in (0, 1]: (top 53 bits + 1) / 2^53, never 0 (log(u) is finite).
MF_HOST_DEVICE_INLINE double mixup_uniform(const MixupArgs& d, std::uint32_t counter, std::int64_t sample,
                                           std::uint32_t draw) {
  return double((mixup_bits(d, counter, sample, draw) >> 11) + 1) * 0x1.0p-53;
}

// r in [1, B - 1] (1 when B = 1): 1 + floor(u * (B - 1)) with u = (top 32
// bits) / 2^32, computed exactly in integers (B < 2^31, checked by ops::mixup).
MF_HOST_DEVICE_INLINE std::int64_t mixup_pair_shift(const MixupArgs& d, std::uint32_t counter) {
  if (d.batch <= 1) return 1;
  const std::uint64_t k = mixup_bits(d, counter, -1, 0) >> 32;
  return 1 + std::int64_t((k * std::uint64_t(d.batch - 1)) >> 32);
}

// Gamma(a, 1) for a >= 1 by Marsaglia-Tsang, draws g * kMixupGammaDraws + 3k + {0, 1, 2}.
MF_HOST_DEVICE inline double mixup_gamma_ge1(const MixupArgs& d, std::uint32_t counter, std::int64_t sample,
                                             std::uint32_t g, double a) {
  const double dd = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * dd);
  const std::uint32_t base = g * kMixupGammaDraws;
  for (std::uint32_t k = 0; k < std::uint32_t(kMixupMaxTrials); ++k) {
    const double u1 = mixup_uniform(d, counter, sample, base + 3 * k);
    const double u2 = mixup_uniform(d, counter, sample, base + 3 * k + 1);
    const double x = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    const double t = 1.0 + c * x;
    if (t <= 0.0) continue;
    const double v = t * t * t;
    const double u = mixup_uniform(d, counter, sample, base + 3 * k + 2);
    if (log(u) < 0.5 * x * x + dd - dd * v + dd * log(v)) return dd * v;
  }
  return dd;
}

// Gamma(alpha, 1), variate g of the sample (0 or 1).
MF_HOST_DEVICE inline double mixup_gamma(const MixupArgs& d, std::uint32_t counter, std::int64_t sample,
                                         std::uint32_t g) {
  const double a = double(d.alpha);
  if (a >= 1.0) return mixup_gamma_ge1(d, counter, sample, g, a);
  const double boost = pow(mixup_uniform(d, counter, sample, g * kMixupGammaDraws + kMixupGammaDraws - 1), 1.0 / a);
  return mixup_gamma_ge1(d, counter, sample, g, a + 1.0) * boost;
}

// lam ~ Beta(alpha, alpha) of sample `sample` (the index within the step:
// first_sample + i), rounded once to f32.
MF_HOST_DEVICE inline float mixup_lambda(const MixupArgs& d, std::uint32_t counter, std::int64_t sample) {
  const double g1 = mixup_gamma(d, counter, sample, 0), g2 = mixup_gamma(d, counter, sample, 1);
  return float(g1 / (g1 + g2));
}

// x [B, elems] f32/bf16/f16 and x_out (same dtype, another buffer); labels
// i32 [B]; leak f32 [B] and leak_out f32 [B], both null without the leak
// head; labels_b i32 [B] and lam f32 [B] written; counter: an i32 in the
// tensors' memory (the optimizer's iteration).
void mixup_cpu(const MixupArgs& d, DType dtype, const void* x, void* x_out, const std::int32_t* labels,
               const float* leak, std::int32_t* labels_b, float* lam, float* leak_out, const std::int32_t* counter,
               cudaStream_t stream);
void mixup_cuda(const MixupArgs& d, DType dtype, const void* x, void* x_out, const std::int32_t* labels,
                const float* leak, std::int32_t* labels_b, float* lam, float* leak_out, const std::int32_t* counter,
                cudaStream_t stream);

}  // namespace mf::kernels
