// The logmel op's CPU variant 2 (audio/logmel.hpp, LogmelCpuAlgo::simd8):
// eight consecutive frames of a file per pass, one per SIMD lane, for a
// power-of-two n_fft. Same features as variant 1 (logmel_cpu.cpp):
//   x[i]     = row[t*hop + i - n_fft/2] * hann[i]   (0 outside the row), float
//   power[k] = |rfft(x)[k]|^2                       (audio/power_spectrum_x8.hpp)
//   mel[m]   = sum over band m's nonzero bins k, in increasing k, of w[m,k] * power[k],
//              accumulated in float (as librosa's float32 matrix product does;
//              variant 1 sums in double: the two differ by at most ~count * 6e-8
//              relative, well inside the op's tolerance, tests/audio/README.md)
//   out      = 10 * log10(max(mel, 1e-10))  (audio/log10_float.hpp)
// Frames are taken in groups of eight (frame 8g + j in lane j; lanes past the
// file's last frame are discarded). A frame's bits depend only
// on its samples: not on its lane, its group or the thread count.
//
// Threads: parallel_for over (file, group) pairs; each thread's scratch
// (~3.5 n_fft * 8 floats) is kept between calls, so the pipeline's decode
// threads, which call the op once per file, allocate nothing per file.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numbers>
#include <vector>

#include "audio/log10_float.hpp"
#include "audio/logmel.hpp"
#include "audio/mel_filterbank.hpp"
#include "audio/power_spectrum_x8.hpp"
#include "engine/error.hpp"
#include "engine/memory.hpp"
#include "engine/parallel.hpp"
#include "engine/vec8.hpp"

namespace mf::audio {

namespace {

constexpr std::int64_t kLanes = PowerSpectrumX8::kLanes;

// One thread's buffers: frames (the FFT's input, overwritten), the FFT's
// scratch, the power spectrum, the bands in dB, a zero-padded copy of the
// samples of a group at either end of the row. Grown on demand, never shrunk.
struct GroupScratch {
  struct HostFree {
    void operator()(float* p) const noexcept { host_free(p); }
  };
  std::unique_ptr<float, HostFree> mem;
  std::int64_t capacity = 0;
  float *x = nullptr, *fft = nullptr, *power = nullptr, *db = nullptr, *pad = nullptr;

  // hop <= n_fft (FrontendParams::validate), so a group's samples fit in 8 n_fft.
  void reserve(std::int64_t n_fft, std::int64_t n_mels) {
    const std::int64_t need = kLanes * (3 * n_fft + n_fft / 2 + 1 + n_mels);
    if (need > capacity) {
      mem.reset(static_cast<float*>(host_alloc(std::size_t(need) * sizeof(float))));
      capacity = need;
    }
    x = mem.get();
    fft = x + kLanes * n_fft;
    power = fft + kLanes * n_fft;
    db = power + kLanes * (n_fft / 2 + 1);
    pad = db + kLanes * n_mels;
  }
};

GroupScratch& thread_scratch(std::int64_t n_fft, std::int64_t n_mels) {
  thread_local GroupScratch s;
  s.reserve(n_fft, n_mels);
  return s;
}

// Frames t0 .. t0 + 7 of a row of len samples, windowed, lane-interleaved into
// x ([n][8]), read 8 samples x 8 frames at a time and transposed in registers.
// A group that reaches past either end of the row is first copied into `pad`
// (7 hop + n floats) with zeros outside the row. Lanes past the file's last
// frame are computed from whatever samples they cover and discarded by the
// caller (lanes do not interact).
MF_SIMD_CLONES void pack_frames(const float* row, std::int64_t len, std::int64_t t0, std::int64_t n,
                                std::int64_t hop, const float* hann, float* pad, float* x) {
  const std::int64_t first = t0 * hop - n / 2, span = (kLanes - 1) * hop + n;
  const float* src = row + first;
  if (first < 0 || first + span > len) {
    const std::int64_t lo = std::clamp<std::int64_t>(-first, 0, span), hi = std::clamp<std::int64_t>(len - first, lo, span);
    std::fill(pad, pad + lo, 0.f);
    std::copy(row + first + lo, row + first + hi, pad + lo);
    std::fill(pad + hi, pad + span, 0.f);
    src = pad;
  }
  for (std::int64_t i0 = 0; i0 < n; i0 += kLanes) {
    v8f v[kLanes];
    for (std::int64_t j = 0; j < kLanes; ++j) v[j] = load8(src + j * hop + i0);
    transpose8x8(v);
    for (std::int64_t i = 0; i < kLanes; ++i) store8(x + (i0 + i) * kLanes, v[i] * hann[i0 + i]);
  }
}

// Band m's mel power of the 8 frames, in dB, into db[m * 8 + j].
MF_SIMD_CLONES void mel_db(const float* power, const MelFilterbank& fb, float* db) {
  for (std::int64_t m = 0; m < fb.n_mels; ++m) {
    const float* w = &fb.weights[std::size_t(m * fb.n_bins)];
    const std::int32_t k0 = fb.first[std::size_t(m)], k1 = k0 + fb.count[std::size_t(m)];
    v8f acc{};
    for (std::int32_t k = k0; k < k1; ++k) acc += w[k] * load8(power + k * kLanes);
    store8(db + m * kLanes, power_to_db(acc));
  }
}

class LogmelCpuX8 final : public LogmelOp {
 public:
  LogmelCpuX8(const FrontendParams& p, bool threaded)
      : p_(p), threaded_(threaded), fb_(mel_filterbank(p)), fft_(p.n_fft), hann_(std::size_t(p.n_fft)) {
    for (std::int64_t i = 0; i < p_.n_fft; ++i)
      hann_[std::size_t(i)] = float(0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * double(i) / double(p_.n_fft)));
  }

  void compute(std::int64_t batch, const float* wave, float* out, cudaStream_t /*stream*/) override {
    MF_CHECK(batch >= 0, "logmel (CPU): batch {}: expected >= 0", batch);
    if (batch == 0) return;
    MF_CHECK(wave != nullptr && out != nullptr, "logmel (CPU): null wave or out pointer for a batch of {}", batch);
    const std::int64_t groups = (p_.total_frames() + kLanes - 1) / kLanes;
    const auto run = [&](std::int64_t begin, std::int64_t end) {
      GroupScratch& s = thread_scratch(p_.n_fft, p_.n_mels);
      for (std::int64_t i = begin; i < end; ++i) {
        const std::int64_t b = i / groups, g = i % groups;
        group(wave + b * p_.window_samples(), g * kLanes, s,
              out + b * p_.segments() * p_.n_mels * p_.frames);
      }
    };
    if (threaded_)
      parallel_for(batch * groups, run, /*grain=*/1);
    else
      run(0, batch * groups);
  }
  bool on_device() const override { return false; }
  std::int64_t max_batch() const override { return std::numeric_limits<std::int64_t>::max(); }

 private:
  // Frames t0 .. t0 + 7 of one file (row: its window_samples() samples,
  // out_b: its [segments, n_mels, frames] output).
  void group(const float* row, std::int64_t t0, GroupScratch& s, float* out_b) const {
    const std::int64_t T = p_.total_frames(), F = p_.frames, M = p_.n_mels;
    const std::int64_t valid = std::min(kLanes, T - t0);
    pack_frames(row, p_.window_samples(), t0, p_.n_fft, p_.hop_length, hann_.data(), s.pad, s.x);
    fft_.compute(s.x, s.power, s.fft);
    mel_db(s.power, fb_, s.db);
    const float* db = s.db;
    const std::int64_t seg = t0 / F, f = t0 % F;
    if (valid == kLanes && f + kLanes <= F) {  // the 8 frames are adjacent outputs of one segment
      float* o = out_b + seg * M * F + f;
      for (std::int64_t m = 0; m < M; ++m) std::copy_n(db + m * kLanes, kLanes, o + m * F);
      return;
    }
    for (std::int64_t j = 0; j < valid; ++j) {
      const std::int64_t t = t0 + j;
      float* o = out_b + (t / F) * M * F + t % F;
      for (std::int64_t m = 0; m < M; ++m) o[m * F] = db[m * kLanes + j];
    }
  }

  FrontendParams p_;
  bool threaded_;
  MelFilterbank fb_;
  PowerSpectrumX8 fft_;
  std::vector<float> hann_;
};

}  // namespace

std::unique_ptr<LogmelOp> make_logmel_cpu_x8(const FrontendParams& p, bool threaded) {
  return std::make_unique<LogmelCpuX8>(p, threaded);
}

}  // namespace mf::audio
