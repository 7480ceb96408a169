// CPU twin of augment (kernels/augment.hpp): one sample at a time, parallel
// over samples; each sample is copied (shifted, in f32) to a buffer of its
// own, so the in-place shift reads only original values, and every sum runs
// in the kernel's lane order (augment_lane_sum below), so the twin and the
// kernel agree bit for bit wherever expf/logf do.
#include "kernels/augment.hpp"

#include <vector>

#include "engine/error.hpp"
#include "engine/parallel.hpp"

namespace mf::kernels {

namespace {

// sum over e in [0, n) of value(e), in the header's order: lane e mod
// kAugmentThreads accumulates in increasing e, then the lanes halve pairwise
// exactly as the kernel's block reduction does.
template <class F>
float augment_lane_sum(int n, F value) {
  float lanes[kAugmentThreads] = {};
  for (int e = 0; e < n; ++e) lanes[e % kAugmentThreads] += value(e);
  for (int s = kAugmentThreads / 2; s > 0; s >>= 1)
    for (int t = 0; t < s; ++t) lanes[t] += lanes[t + s];
  return lanes[0];
}

// Steps 1-4 on sample `b` of x (x points at the sample), with `buf` (mels *
// frames floats) as its working copy.
template <class T>
void augment_sample(const AugmentArgs& d, T* x, const float* noise, std::uint32_t ctr, std::int64_t b,
                    float* buf) {
  const int M = int(d.mels), F = int(d.frames), N = M * F;
  const std::int64_t sample = d.first_sample + b;
  const AugmentDraws a = augment_draws(d, ctr, sample);
  const bool gain = d.gain_db > 0;
  for (int m = 0; m < M; ++m) {
    const T* row = x + std::int64_t(m) * F;
    float* out = buf + std::int64_t(m) * F;
    for (int t = 0; t < F; ++t) {
      const int src = t >= a.rotation ? t - a.rotation : t - a.rotation + F;
      out[t] = gain ? to_f32(row[src]) + a.offset : to_f32(row[src]);
    }
  }
  if (a.noise >= 0) {
    const float kp = augment_kp(d);
    const float* nz = noise + a.noise * N;
    const float sum_px = augment_lane_sum(N, [&](int e) { return augment_power(buf[e], kp); });
    const float sum_pn = augment_lane_sum(N, [&](int e) { return augment_power(nz[e], kp); });
    const float scale = augment_noise_scale(sum_px, sum_pn, a.snr_ratio);
    for (int e = 0; e < N; ++e) buf[e] = augment_mix(buf[e], nz[e], scale, kp);
  }
  const int masks = d.freq_masks + d.time_masks;
  if (masks > 0) {
    const float mean = augment_lane_sum(N, [&](int e) { return buf[e]; }) / float(N);
    for (int i = 0; i < masks; ++i) {
      const AugmentMask mk = augment_mask(d, ctr, sample, i);
      if (i < d.freq_masks) {
        for (int m = mk.start; m < mk.start + mk.width; ++m)
          for (int t = 0; t < F; ++t) buf[std::int64_t(m) * F + t] = mean;
      } else {
        for (int m = 0; m < M; ++m)
          for (int t = mk.start; t < mk.start + mk.width; ++t) buf[std::int64_t(m) * F + t] = mean;
      }
    }
  }
  for (int e = 0; e < N; ++e) x[e] = from_f32<T>(buf[e]);
}

template <class T>
void augment_all(const AugmentArgs& d, T* x, const float* noise, std::uint32_t ctr) {
  const std::int64_t n = d.mels * d.frames;
  parallel_for(d.batch, [&](std::int64_t b0, std::int64_t b1) {
    std::vector<float> buf(static_cast<std::size_t>(n));
    for (std::int64_t b = b0; b < b1; ++b) augment_sample(d, x + b * n, noise, ctr, b, buf.data());
  });
}

}  // namespace

void augment_cpu(const AugmentArgs& d, DType dtype, void* x, const float* noise, const std::int32_t* counter,
                 cudaStream_t) {
  if (!d.any() || d.batch == 0) return;
  const std::uint32_t ctr = std::uint32_t(*counter);
  switch (dtype) {
    case DType::f32: return augment_all(d, static_cast<float*>(x), noise, ctr);
    case DType::f16: return augment_all(d, static_cast<f16*>(x), noise, ctr);
    case DType::bf16: return augment_all(d, static_cast<bf16*>(x), noise, ctr);
    default: break;
  }
  MF_THROW("augment: unsupported dtype {}", dtype_name(dtype));
}

}  // namespace mf::kernels
