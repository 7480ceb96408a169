// augment: on-device data augmentation of a training micro-batch, in place,
// where the batch enters the step (model/train_step.cpp, before the first
// conv), inside the captured CUDA graph. Per sample, in this order:
//   1. time shift: circular shift along frames by s, s uniform in
//      [-time_shift, time_shift] (integers);
//   2. gain: + g dB, g uniform in [-gain_db, gain_db] (added to the log-mel
//      value as g / db_per_unit);
//   3. background noise: a noise segment k (uniform over noise_count) mixed in
//      the power domain at an SNR drawn uniformly in [snr_lo_db, snr_hi_db]:
//      P = 10^(v * db_per_unit / 10); the noise is scaled so that
//      mean(P_x) / mean(scale * P_n) = 10^(snr / 10) over the segment, then
//      v' = 10 * log10(P_x + scale * P_n) / db_per_unit;
//   4. SpecAugment masks: freq_masks bands of width w ~ uniform{0..freq_mask_width}
//      starting at f0 ~ uniform{0..mels - w}, then time_masks likewise along
//      frames; masked values are set to the segment's mean after steps 1-3
//      (zero would be a loud 0 dB in log-mel data; the mean keeps the
//      masked region's level neutral). The mean is over the f32 values,
//      before the one rounding of every value to x's dtype (to nearest even).
// The shift's direction: out[t] = in[(t - s) mod frames] (numpy.roll by s).
// Every draw is counter-based (engine/counter_rng.hpp): a pure function of
// (seed, *counter, stream, sample index, draw index), so the same seed gives
// the same augmented batches, a resumed run is bit-identical, the thread count
// changes nothing and a replayed graph draws afresh each step (`counter` is
// the optimizer's iteration in device memory, as for dropout).
// Per-segment means are fixed-order reductions (no atomics). The arithmetic
// of a value is done in f32 on both sides; the CPU twin and the kernel agree
// to rounding of exp/log (the draws themselves are identical integers/floats).
// Layout: x [batch, mels, frames] (the step's nhwc input with C = 1), dtype
// f32, bf16 or f16; noise [noise_count, mels, frames] f32 (device memory on the
// GPU), null when noise is off.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>

#include "engine/counter_rng.hpp"
#include "engine/dtype.hpp"
#include "engine/host_device.hpp"

namespace mf::kernels {

struct AugmentArgs {
  std::int64_t batch = 0, mels = 0, frames = 0;
  std::uint64_t seed = 0;
  std::uint32_t stream = 0;        // the micro-batch index within the step
  std::int64_t first_sample = 0;   // the batch's first sample's index within the step (draws are per sample)
  int time_shift = 0;              // frames; 0: off
  float gain_db = 0;               // 0: off
  int freq_masks = 0, freq_mask_width = 0;
  int time_masks = 0, time_mask_width = 0;
  std::int64_t noise_count = 0;    // 0: no noise
  float snr_lo_db = 0, snr_hi_db = 0;
  float db_per_unit = 1;           // dB per unit of the log-mel values (1: dB; 10: dB/10, melforge data synth)
  bool any() const {
    return time_shift > 0 || gain_db > 0 || freq_masks > 0 || time_masks > 0 || noise_count > 0;
  }
};

// Limits (kernels/ops.cpp checks them): the CUDA kernel runs one block of
// kAugmentThreads threads per sample and stages whole rows of the sample in a
// shared buffer of kAugmentStageFloats floats (the circular shift is in place),
// so a row (frames) must fit it; mask ranges live in shared memory, at most
// kAugmentMaxMasks per axis. Every sum over a segment's N = mels * frames
// values (the noise powers, the mask mean) has one order on both sides: lane
// e mod kAugmentThreads adds the values of its indices e (flat, after the
// shift) in increasing e, then the lanes halve pairwise (lane t += lane t + s
// for s = kAugmentThreads/2, ..., 1); the mean is that sum / float(N). So the
// twin and the kernel differ only where expf/logf do (noise on).
inline constexpr int kAugmentThreads = 256;
inline constexpr int kAugmentStageFloats = 8192;
inline constexpr int kAugmentMaxFrames = kAugmentStageFloats;
inline constexpr int kAugmentMaxMasks = 64;
// The kernel's grid: min(batch, kAugmentMaxBlocks) blocks, each looping over
// samples b, b + grid, ... (enough blocks to fill any GPU several times).
inline constexpr int kAugmentMaxBlocks = 4096;

// The draws of one sample (shared by the twin and the kernel so both see the
// same numbers). `draw` numbers the draws of a sample: 0 shift, 1 gain,
// 2 noise index, 3 snr, 4.. masks (two per mask: width, start; the frequency
// masks first, then the time masks: mask i uses draws 4 + 2i and 5 + 2i).
// splitmix64's finalizer (engine/counter_rng.hpp) over the sample's Weyl point
// seed + gamma * (1 + sample), xor a key scrambling (counter, stream) and the
// draw (draw + 1, so no key equals dropout's (counter, stream) key with the
// same arguments); the top 24 bits -> [0, 1), exact in float.
MF_HOST_DEVICE inline float augment_uniform(const AugmentArgs& d, std::uint32_t counter, std::int64_t sample,
                                            std::uint32_t draw) {
  const std::uint64_t key = ((std::uint64_t(counter) << 32 | d.stream) * 0xbf58476d1ce4e5b9ull) ^
                            ((std::uint64_t(draw) + 1) * 0x94d049bb133111ebull);
  const std::uint64_t z = splitmix64_finalize((d.seed + kSplitmix64Gamma * (1 + std::uint64_t(sample))) ^ key);
  return float(std::uint32_t(z >> 40)) * (1.f / 16777216.f);
}

// An integer uniform in {0..n} (n >= 0, n < 2^39) from a draw u = k / 2^24:
// floor(u * (n + 1)), computed exactly in integers (never above n).
MF_HOST_DEVICE_INLINE std::int64_t augment_int(float u, std::int64_t n) {
  const std::uint64_t k = std::uint64_t(u * 16777216.f);  // exact: u has 24 bits
  return std::int64_t((k * std::uint64_t(n + 1)) >> 24);
}

// f32 arithmetic without contraction: nvcc fuses a * b + c into one fma by
// default, the host compilers (-ffp-contract=off, x86-64 without FMA) do not; the
// explicit round-to-nearest intrinsics make both sides round twice.
MF_HOST_DEVICE_INLINE float augment_mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
MF_HOST_DEVICE_INLINE float augment_add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// One sample's scalar draws.
struct AugmentDraws {
  int shift = 0;            // the drawn shift in [-time_shift, time_shift] (positive: content moves later)
  int rotation = 0;         // shift mod frames, in [0, frames): out[t] = in[(t - rotation) mod frames]
  float offset = 0;         // the gain in value units, g / db_per_unit (0 when gain_db is 0)
  std::int64_t noise = -1;  // the noise segment, -1 when noise is off
  float snr_ratio = 1;      // 10^(snr / 10), snr = lo + u * (hi - lo)
};

MF_HOST_DEVICE inline AugmentDraws augment_draws(const AugmentArgs& d, std::uint32_t counter, std::int64_t sample) {
  AugmentDraws a;
  if (d.time_shift > 0) {
    a.shift = int(augment_int(augment_uniform(d, counter, sample, 0), 2 * std::int64_t(d.time_shift))) - d.time_shift;
    const int f = int(d.frames);
    a.rotation = ((a.shift % f) + f) % f;
  }
  if (d.gain_db > 0) {
    const float u = augment_uniform(d, counter, sample, 1);
    a.offset = (u + u - 1.f) * d.gain_db / d.db_per_unit;  // 2u - 1 is exact
  }
  if (d.noise_count > 0) {
    a.noise = augment_int(augment_uniform(d, counter, sample, 2), d.noise_count - 1);
    const float snr = augment_add(d.snr_lo_db, augment_mul(augment_uniform(d, counter, sample, 3),
                                                           d.snr_hi_db - d.snr_lo_db));
    a.snr_ratio = expf(snr * 0.230258509299404568f);  // 10^(snr/10) = e^(snr ln10 / 10)
  }
  return a;
}

// Mask i (0 <= i < freq_masks + time_masks): i < freq_masks covers mel rows
// [start, start + width), else time mask i - freq_masks covers frames
// [start, start + width). width uniform in {0..W}, start uniform in
// {0..extent - width} (W <= extent is checked by ops::augment).
struct AugmentMask {
  int start = 0, width = 0;
};
MF_HOST_DEVICE inline AugmentMask augment_mask(const AugmentArgs& d, std::uint32_t counter, std::int64_t sample,
                                               int i) {
  const bool freq = i < d.freq_masks;
  const std::int64_t extent = freq ? d.mels : d.frames;
  const int w_max = freq ? d.freq_mask_width : d.time_mask_width;
  AugmentMask m;
  m.width = int(augment_int(augment_uniform(d, counter, sample, 4 + 2 * std::uint32_t(i)), w_max));
  m.start = int(augment_int(augment_uniform(d, counter, sample, 5 + 2 * std::uint32_t(i)), extent - m.width));
  return m;
}

// The power-domain arithmetic (step 3), the same f32 operations on both
// sides: P = 10^(v * db_per_unit / 10) = exp(v * kp), kp = db_per_unit *
// ln(10) / 10; the noise scale = sum(P_x) / (sum(P_n) * snr_ratio) (the means'
// 1/N cancels); v' = ln(P_x + scale * P_n) / kp. expf and logf are the
// library's on the host and CUDA's (<= 2 ulp) on the GPU: the only difference
// between the twin and the kernel. f32 holds P and a segment's sum of P for
// v * db_per_unit within about [-370, 340] dB (log-mel data is far inside); a
// noise segment whose every value is below that underflows to a zero power
// and its sample to inf/NaN.
MF_HOST_DEVICE_INLINE float augment_kp(const AugmentArgs& d) { return d.db_per_unit * 0.230258509299404568f; }
MF_HOST_DEVICE_INLINE float augment_power(float v, float kp) { return expf(v * kp); }
MF_HOST_DEVICE_INLINE float augment_noise_scale(float sum_px, float sum_pn, float snr_ratio) {
  return sum_px / (sum_pn * snr_ratio);
}
MF_HOST_DEVICE_INLINE float augment_mix(float v, float n, float scale, float kp) {
  return logf(augment_add(augment_power(v, kp), augment_mul(scale, augment_power(n, kp)))) / kp;
}

void augment_cpu(const AugmentArgs& d, DType dtype, void* x, const float* noise, const std::int32_t* counter,
                 cudaStream_t stream);
void augment_cuda(const AugmentArgs& d, DType dtype, void* x, const float* noise, const std::int32_t* counter,
                  cudaStream_t stream);

}  // namespace mf::kernels
