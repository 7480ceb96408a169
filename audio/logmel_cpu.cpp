// The logmel op's CPU twin (audio/logmel.hpp), variant 1 on FFTW3 (single
// precision), and the choice between the CPU variants.
//
// Per frame t of file b (center=True, pad_mode='constant'):
//   x[i]     = row_b[t*hop + i - n_fft/2] * hann[i]      (0 outside the row), float
//   X        = rfft(x)                                   (FFTW r2c, float)
//   power[k] = re^2 + im^2                               (float)
//   mel[m]   = sum over band m's nonzero bins k, in increasing k, of w[m,k] * power[k]
//   out      = 10 * log10(max(float(mel), 1e-10))      (float, to ~2 ulp:
//              audio/log10_float.hpp; exactly -100 at the floor)
// hann[i] = 0.5 - 0.5 cos(2 pi i / n_fft) (periodic) in double, stored float.
//
// The mel sum is accumulated in double: each float product w*power is exact
// in double, so the sum differs from the exact value of the float inputs by
// at most ~count * 2^-53 relative, whatever the order. librosa sums the same
// products in float32 (an einsum over all bins, BLAS order); its result is an
// approximation of this exact sum, so double accumulation is the closest we
// can get to it without copying its (platform-dependent) order, and it
// leaves the CUDA op free to sum in any order and still match to ~1 ulp. The
// sum is then rounded to float (librosa's mel spectrogram is float32) and
// clamped; the log is a float one (librosa's is numpy's float32 log10).
//
// Threads: parallel_for over (file, frame) pairs; each chunk owns its
// fftwf_malloc'd buffers (allocated once per chunk, not per frame) and writes
// only its frames' outputs, so the bits do not depend on the thread count.
// FFTW's planner is not thread-safe: plans are made (FFTW_ESTIMATE, so the
// same plan every time) and destroyed under one mutex; executing a plan on
// other arrays of the same alignment (fftwf_execute_dft_r2c) is thread-safe.
#include <fftw3.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <string_view>
#include <numbers>
#include <vector>

#include "audio/log10_float.hpp"
#include "audio/logmel.hpp"
#include "audio/power_spectrum_x8.hpp"
#include "audio/mel_filterbank.hpp"
#include "engine/error.hpp"
#include "engine/parallel.hpp"

namespace mf::audio {

namespace {

std::mutex& fftw_planner_mutex() {
  static std::mutex m;
  return m;
}

// One chunk's scratch: the windowed frame, its spectrum and power.
struct FrameScratch {
  FrameScratch(std::int64_t n_fft, std::int64_t n_mels)
      : x(static_cast<float*>(fftwf_malloc(sizeof(float) * std::size_t(n_fft)))),
        spec(static_cast<fftwf_complex*>(fftwf_malloc(sizeof(fftwf_complex) * std::size_t(n_fft / 2 + 1)))),
        power(std::size_t(n_fft / 2 + 1)),
        db(std::size_t(n_mels)) {
    if (x == nullptr || spec == nullptr) {
      release();
      MF_THROW("logmel (CPU): cannot allocate FFT buffers for n_fft {}", n_fft);
    }
  }
  ~FrameScratch() { release(); }
  FrameScratch(const FrameScratch&) = delete;
  FrameScratch& operator=(const FrameScratch&) = delete;
  void release() {
    if (x != nullptr) fftwf_free(x);
    if (spec != nullptr) fftwf_free(spec);
    x = nullptr;
    spec = nullptr;
  }
  float* x;
  fftwf_complex* spec;
  std::vector<float> power;
  std::vector<float> db;  // the frame's bands: mel power, then dB
};

class LogmelCpu final : public LogmelOp {
 public:
  LogmelCpu(const FrontendParams& p, bool threaded)
      : p_(p), threaded_(threaded), fb_(mel_filterbank(p)), hann_(std::size_t(p.n_fft)) {
    for (std::int64_t i = 0; i < p_.n_fft; ++i)
      hann_[std::size_t(i)] = float(0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * double(i) / double(p_.n_fft)));
    FrameScratch s(p_.n_fft, p_.n_mels);  // planning arrays: fftwf_malloc'd like every chunk's
    std::lock_guard<std::mutex> lock(fftw_planner_mutex());
    plan_ = fftwf_plan_dft_r2c_1d(int(p_.n_fft), s.x, s.spec, FFTW_ESTIMATE);
    MF_CHECK(plan_ != nullptr, "logmel (CPU): FFTW could not plan a real FFT of size {}", p_.n_fft);
  }
  ~LogmelCpu() override {
    std::lock_guard<std::mutex> lock(fftw_planner_mutex());
    fftwf_destroy_plan(plan_);
  }
  LogmelCpu(const LogmelCpu&) = delete;
  LogmelCpu& operator=(const LogmelCpu&) = delete;

  void compute(std::int64_t batch, const float* wave, float* out, cudaStream_t /*stream*/) override {
    MF_CHECK(batch >= 0, "logmel (CPU): batch {}: expected >= 0", batch);
    if (batch == 0) return;
    MF_CHECK(wave != nullptr && out != nullptr, "logmel (CPU): null wave or out pointer for a batch of {}", batch);
    const std::int64_t frames = p_.total_frames();
    const auto run = [&](std::int64_t begin, std::int64_t end) {
      FrameScratch s(p_.n_fft, p_.n_mels);
      for (std::int64_t i = begin; i < end; ++i) {
        const std::int64_t b = i / frames, t = i % frames;
        frame(wave + b * p_.window_samples(), t, s, out + b * p_.segments() * p_.n_mels * p_.frames);
      }
    };
    if (threaded_)
      parallel_for(batch * frames, run, /*grain=*/4);
    else
      run(0, batch * frames);
  }
  bool on_device() const override { return false; }
  std::int64_t max_batch() const override { return std::numeric_limits<std::int64_t>::max(); }

 private:
  // Frame t of one file: row = its window_samples() samples, out_b = its
  // [segments, n_mels, frames] output.
  void frame(const float* row, std::int64_t t, FrameScratch& s, float* out_b) const {
    const std::int64_t n = p_.n_fft, start = t * p_.hop_length - n / 2, len = p_.window_samples();
    // Samples of the row inside this frame: i in [i0, i1).
    const std::int64_t i0 = std::clamp<std::int64_t>(-start, 0, n), i1 = std::clamp<std::int64_t>(len - start, 0, n);
    std::fill(s.x, s.x + i0, 0.f);
    for (std::int64_t i = i0; i < i1; ++i) s.x[i] = row[start + i] * hann_[std::size_t(i)];
    std::fill(s.x + std::max(i0, i1), s.x + n, 0.f);
    fftwf_execute_dft_r2c(plan_, s.x, s.spec);
    for (std::size_t k = 0; k < s.power.size(); ++k) s.power[k] = s.spec[k][0] * s.spec[k][0] + s.spec[k][1] * s.spec[k][1];

    const std::int64_t seg = t / p_.frames, f = t % p_.frames;
    float* o = out_b + seg * p_.n_mels * p_.frames + f;
    float* db = s.db.data();
    for (std::int64_t m = 0; m < p_.n_mels; ++m) {
      const float* w = &fb_.weights[std::size_t(m * fb_.n_bins)];
      const std::int32_t k0 = fb_.first[std::size_t(m)], k1 = k0 + fb_.count[std::size_t(m)];
      double acc = 0;
      for (std::int32_t k = k0; k < k1; ++k) acc += double(w[k]) * double(s.power[std::size_t(k)]);
      db[m] = float(acc);
    }
    for (std::int64_t m = 0; m < p_.n_mels; ++m) db[m] = power_to_db(db[m]);
    for (std::int64_t m = 0; m < p_.n_mels; ++m) o[m * p_.frames] = db[m];
  }

  FrontendParams p_;
  bool threaded_;
  MelFilterbank fb_;
  std::vector<float> hann_;
  fftwf_plan plan_ = nullptr;
};

}  // namespace

std::unique_ptr<LogmelOp> make_logmel_cpu_x8(const FrontendParams& p, bool threaded);  // logmel_cpu_x8.cpp

LogmelCpuAlgo logmel_cpu_algo_from_env() {
  const char* e = std::getenv("MELFORGE_LOGMEL_CPU");
  if (!e || !*e) return LogmelCpuAlgo::automatic;
  const std::string_view v(e);
  if (v == "auto") return LogmelCpuAlgo::automatic;
  if (v == "fftw") return LogmelCpuAlgo::fftw;
  if (v == "simd8") return LogmelCpuAlgo::simd8;
  MF_THROW("MELFORGE_LOGMEL_CPU='{}': expected auto, fftw or simd8", v);
}

const char* logmel_cpu_algo_name(LogmelCpuAlgo algo) {
  switch (algo) {
    case LogmelCpuAlgo::automatic: return "auto";
    case LogmelCpuAlgo::fftw: return "fftw";
    case LogmelCpuAlgo::simd8: return "simd8";
  }
  return "?";
}

LogmelCpuAlgo resolve_logmel_cpu_algo(const FrontendParams& p, LogmelCpuAlgo algo) {
  if (algo == LogmelCpuAlgo::automatic) algo = logmel_cpu_algo_from_env();
  if (algo == LogmelCpuAlgo::fftw) return algo;
  return PowerSpectrumX8::supports(p.n_fft) ? LogmelCpuAlgo::simd8 : LogmelCpuAlgo::fftw;
}

std::unique_ptr<LogmelOp> make_logmel_cpu(const FrontendParams& p, bool threaded, LogmelCpuAlgo algo) {
  p.validate();
  if (resolve_logmel_cpu_algo(p, algo) == LogmelCpuAlgo::simd8) return make_logmel_cpu_x8(p, threaded);
  return std::make_unique<LogmelCpu>(p, threaded);
}

}  // namespace mf::audio
