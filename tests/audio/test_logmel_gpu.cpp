// The CUDA logmel op (audio/logmel.cu, cuFFT) against its CPU twin
// (audio/logmel_cpu.cpp, FFTW3; itself checked against librosa in
// test_logmel.cpp), on tones, a chirp, noise, impulses and silence, for
// several parameter sets; device outputs are NaN-poisoned first. Then: a CUDA
// graph capture of compute() gives the eager bits, two computes the same bits,
// and the multi-piece path (a small buffer budget) agrees too. Runs only where
// a GPU (or the CUDA emulator) is usable; else exits 77 (skipped).
//
// Tolerance: |cuda - cpu| <= kFloorDb + kFftCoeff * 10^(h/20) dB, where h
// (dB) is how far the band's mean power per unit weight lies below the
// frame's mean bin power (sum of the windowed frame's squares, by Parseval).
// Both sides run a float32 FFT, whose rounding adds to every bin an error of
// a fixed fraction of the frame's rms spectrum, so its share of a band's power
// grows as 10^(h/20) in amplitude; the rest (the mel sum in float here and in
// double in the twin, log10f vs log10) is a few float ulps: the floor.
// Measured on the emulator (whose FFT is exact to float, so this is FFTW's
// rounding alone; the MESSAGE lines print it for every case): at h < 20 dB at
// most 7.6e-6 dB (1 ulp of the dB value), err / 10^(h/20) at most 1.4e-6 from
// 20 dB down (largest error 0.14 dB, about 100 dB down). Allowed: a floor of
// 2e-4 dB (about 25 ulps at 100 dB) and kFftCoeff = 1e-5, seven times the
// measured constant, because on a GPU cuFFT's float rounding (of the same
// order as FFTW's: O(log n) butterfly stages with accurate twiddles) adds to
// the twin's. A wrong window, frame offset or bin range shows up at h near 0,
// where the tolerance is 2e-4 dB.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "audio/logmel.hpp"
#include "audio/logmel_cuda.hpp"
#include "audio/mel_filterbank.hpp"
#include "engine/stream.hpp"
#include "engine/tensor.hpp"
#include "tests/audio/logmel_testing.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using audio::FrontendParams;

namespace {

const Device kGpu = Device::cuda(0);
constexpr double kFloorDb = 2e-4;
constexpr double kFftCoeff = 1e-5;

using testing::logmel::describe;
using testing::logmel::params;

void add_tone(std::vector<float>& y, double sr, double hz, double amplitude, double phase) {
  for (std::size_t i = 0; i < y.size(); ++i)
    y[i] += float(amplitude * std::sin(2 * std::numbers::pi * hz * double(i) / sr + phase));
}

// File b of a batch (window_samples() long), cycling through kinds of signal.
std::vector<float> test_file(const FrontendParams& p, std::int64_t b) {
  const std::size_t w = std::size_t(p.window_samples());
  const double sr = double(p.sample_rate);
  std::vector<float> y(w, 0.f);
  switch (b % 7) {
    case 0: y = testing::random_floats(w, std::uint64_t(100 + b), -0.5f, 0.5f); break;
    case 1: add_tone(y, sr, 440, 0.5, 0.3); break;
    case 2:  // a quiet tone that ends half-way (zeros past the file's end)
      add_tone(y, sr, 0.23 * sr, 1e-3, 1.0);
      std::fill(y.begin() + std::ptrdiff_t(w / 2), y.end(), 0.f);
      break;
    case 3: {  // linear chirp 20 Hz .. 0.45 sr
      const double f0 = 20, f1 = 0.45 * sr, dur = double(w) / sr;
      for (std::size_t i = 0; i < w; ++i) {
        const double t = double(i) / sr;
        y[i] = float(0.25 * std::sin(2 * std::numbers::pi * (f0 * t + 0.5 * (f1 - f0) / dur * t * t)));
      }
      break;
    }
    case 4: break;  // silence: -100 dB everywhere, on both sides exactly
    case 5:
      add_tone(y, sr, 100, 0.3, 0.2);
      add_tone(y, sr, 0.41 * sr, 3e-4, 1.1);
      break;
    default:  // impulses, the last at the window's last sample
      y[std::size_t(p.hop_length + 3)] = 1.f;
      y[w - 1] = -0.7f;
      add_tone(y, sr, 1234.5, 1e-5, 0.0);
      break;
  }
  return y;
}

std::vector<float> batch_input(const FrontendParams& p, std::int64_t batch) {
  std::vector<float> wave;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::vector<float> y = test_file(p, b);
    wave.insert(wave.end(), y.begin(), y.end());
  }
  return wave;
}

std::int64_t out_size(const FrontendParams& p, std::int64_t batch) { return batch * p.segments() * p.n_mels * p.frames; }

std::vector<float> run_cpu(const FrontendParams& p, const std::vector<float>& wave, std::int64_t batch) {
  std::vector<float> out(std::size_t(out_size(p, batch)), NAN);
  audio::make_logmel_cpu(p)->compute(batch, wave.data(), out.data(), nullptr);
  return out;
}

// The op on the GPU: input uploaded, output poisoned with NaN bytes first.
std::vector<float> run_gpu(audio::LogmelOp& op, const FrontendParams& p, const std::vector<float>& wave,
                           std::int64_t batch) {
  Stream s(kGpu);
  const Tensor gw = Tensor::from_floats(wave, {std::int64_t(wave.size())}).to(kGpu, s);
  Tensor gout = Tensor::empty({out_size(p, batch)}, DType::f32, kGpu, Layout::plain, s);
  gout.fill_bytes(0xff, s);
  op.compute(batch, gw.data<float>(), gout.data<float>(), s);
  s.synchronize();
  return gout.to_floats();
}

// The largest error, the largest within 20 dB of the frame's mean bin power,
// and the largest err / 10^(h/20) from 20 dB down.
struct Errors {
  double worst = 0, worst_top = 0, worst_scaled = 0;
  std::int64_t checked = 0;
};

// Compares the CUDA output with the twin's; returns the count of values
// outside the tolerance (the first few reported).
std::int64_t compare(const FrontendParams& p, std::int64_t batch, const std::vector<float>& wave,
                     const std::vector<float>& gpu, const std::vector<float>& cpu, Errors& e) {
  const std::int64_t S = p.segments(), M = p.n_mels, F = p.frames, T = p.total_frames(), W = p.window_samples();
  const audio::MelFilterbank fb = audio::mel_filterbank(p);
  std::vector<double> weight_db(static_cast<std::size_t>(M));
  for (std::int64_t m = 0; m < M; ++m) {
    double sum = 0;
    for (std::int64_t k = 0; k < fb.n_bins; ++k) sum += fb.weights[std::size_t(m * fb.n_bins + k)];
    weight_db[std::size_t(m)] = sum > 0 ? 10 * std::log10(sum) : -1e9;
  }
  std::int64_t bad = 0;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < T; ++t) {
      // The frame's mean bin power = sum of its windowed samples squared (Parseval).
      double energy = 0;
      for (std::int64_t i = 0; i < p.n_fft; ++i) {
        const std::int64_t pos = t * p.hop_length + i - p.n_fft / 2;
        const double hann = 0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * double(i) / double(p.n_fft));
        if (pos >= 0 && pos < W) energy += std::pow(double(wave[std::size_t(b * W + pos)]) * hann, 2);
      }
      const double mean_db = energy > 0 ? 10 * std::log10(energy) : -1e9;
      const std::int64_t s = t / F, f = t % F;
      for (std::int64_t m = 0; m < M; ++m) {
        const std::size_t at = std::size_t(((b * S + s) * M + m) * F + f);
        const double g = gpu[at], c = cpu[at], err = std::fabs(g - c);
        const double h = std::max(0.0, mean_db - (c - weight_db[std::size_t(m)]));
        const double tol = kFloorDb + kFftCoeff * std::pow(10.0, h / 20);
        ++e.checked;
        e.worst = std::max(e.worst, err);
        if (h < 20) e.worst_top = std::max(e.worst_top, err);
        if (h >= 20) e.worst_scaled = std::max(e.worst_scaled, err / std::pow(10.0, h / 20));
        if (!(err <= tol) && ++bad <= 5)
          FAIL_CHECK(fmt::format("{}: file {} (kind {}) frame {} mel {}: CUDA {} dB, CPU {} dB ({:.1f} dB below the "
                                 "frame's mean bin power; tolerance {:.3g} dB)",
                                 describe(p), b, b % 7, t, m, g, c, h, tol));
      }
    }
  return bad;
}

void check_against_twin(const FrontendParams& p, std::int64_t batch, std::int64_t max_batch,
                        std::int64_t budget = 0) {
  CAPTURE(describe(p));
  CAPTURE(batch);
  const std::vector<float> wave = batch_input(p, batch);
  const std::vector<float> cpu = run_cpu(p, wave, batch);
  const auto op = budget > 0 ? audio::make_logmel_cuda_with_budget(p, max_batch, budget)
                             : audio::make_logmel_cuda(p, max_batch);
  CHECK(op->on_device());
  CHECK(op->max_batch() == max_batch);
  const std::vector<float> gpu = run_gpu(*op, p, wave, batch);
  Errors e;
  CHECK(compare(p, batch, wave, gpu, cpu, e) == 0);
  MESSAGE(fmt::format("{} batch {} (max {}{}): {} values, max |CUDA - CPU| {:.3g} dB ({:.3g} dB at h < 20 dB), "
                      "max err / 10^(h/20) at h >= 20 dB {:.3g}",
                      describe(p), batch, max_batch, budget > 0 ? fmt::format(", budget {} B", budget) : "", e.checked,
                      e.worst, e.worst_top, e.worst_scaled));
  // Silence is exactly the floor on both sides.
  if (batch > 4) {
    const std::int64_t per_file = p.segments() * p.n_mels * p.frames;
    for (std::int64_t i = 4 * per_file; i < 5 * per_file; ++i) REQUIRE(gpu[std::size_t(i)] == -100.f);
  }
}

}  // namespace

TEST_CASE("logmel CUDA equals the CPU twin: 16 kHz, n_fft 1024, hop 256, 64 mels, L 2 x S 2") {
  check_against_twin(params(16000, 1024, 256, 64, 0, 0, 8, 2, 2), 7, 7);
}

TEST_CASE("logmel CUDA equals the CPU twin: n_fft 400, hop 160, 40 mels, fmin/fmax set, batch below max_batch") {
  // 5 files of 30 frames = 150 frames on an op sized for 9 x 30 = 270: the
  // FFTs run as plans of 128 + 16 + 4 + 2 frames.
  check_against_twin(params(16000, 400, 160, 40, 50, 7600, 10, 3, 1), 5, 9);
}

TEST_CASE("logmel CUDA equals the CPU twin: batch 1, 22.05 kHz, n_fft 512, 32 mels from 300 Hz") {
  check_against_twin(params(22050, 512, 128, 32, 300, 0, 7, 1, 3), 1, 1);
}

TEST_CASE("logmel CUDA: pieces smaller than the batch (a small buffer budget) give the same features") {
  // n_fft 256: 256*4 + 129*8 = 2056 bytes a frame; a budget of 40 frames
  // cuts 6 files x 12 frames = 72 frames into pieces of 40 and 32.
  const FrontendParams p = params(8000, 256, 100, 24, 0, 3000, 4, 1, 3);
  check_against_twin(p, 6, 6, 40 * 2056);
  check_against_twin(p, 3, 6, 7 * 2056 + 100);  // 36 frames: five pieces of 7 and one of 1
}

TEST_CASE("logmel CUDA: deterministic, and a CUDA graph capture gives the eager bits") {
  const FrontendParams p = params(16000, 512, 160, 40, 0, 0, 6, 2, 1);
  const std::int64_t batch = 3;
  const std::vector<float> wave = batch_input(p, batch);
  const auto op = audio::make_logmel_cuda(p, 4);
  Stream s(kGpu);
  const Tensor gw = Tensor::from_floats(wave, {std::int64_t(wave.size())}).to(kGpu, s);
  Tensor out = Tensor::empty({out_size(p, batch)}, DType::f32, kGpu, Layout::plain, s);
  auto eager = [&] {
    out.fill_bytes(0xff, s);
    op->compute(batch, gw.data<float>(), out.data<float>(), s);
    s.synchronize();
    return out.to_floats();
  };
  const std::vector<float> first = eager(), second = eager();
  REQUIRE(std::none_of(first.begin(), first.end(), [](float v) { return std::isnan(v); }));
  CHECK(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)) == 0);

  out.fill_bytes(0xff, s);
  s.synchronize();
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  op->compute(batch, gw.data<float>(), out.data<float>(), s);
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) {
    out.fill_bytes(0xff, s);
    REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
    s.synchronize();
    const std::vector<float> replayed = out.to_floats();
    CHECK(std::memcmp(first.data(), replayed.data(), first.size() * sizeof(float)) == 0);
  }
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
  CHECK(cudaGraphDestroy(graph) == cudaSuccess);
}

TEST_CASE("logmel CUDA: a batch above max_batch, max_batch 0 and bad parameters are refused") {
  const FrontendParams p = params(16000, 256, 128, 16, 0, 0, 4, 1, 1);
  const auto op = audio::make_logmel_cuda(p, 2);
  Stream s(kGpu);
  Tensor w = Tensor::zeros({3 * p.window_samples()}, DType::f32, kGpu, Layout::plain, s);
  Tensor o = Tensor::empty({out_size(p, 3)}, DType::f32, kGpu, Layout::plain, s);
  s.synchronize();
  CHECK(testing::error_of([&] { op->compute(3, w.data<float>(), o.data<float>(), s); }) ==
        "logmel (CUDA): batch 3: expected 0..2 (the op's max_batch)");
  CHECK(testing::error_of([&] { op->compute(1, nullptr, o.data<float>(), s); }).find("null wave or out") !=
        std::string::npos);
  op->compute(0, nullptr, nullptr, s);  // nothing to do
  CHECK(testing::error_of([&] { audio::make_logmel_cuda(p, 0); }) == "logmel (CUDA): max_batch 0: expected >= 1");
  FrontendParams odd = p;
  odd.n_fft = 255;
  CHECK(testing::error_of([&] { audio::make_logmel_cuda(odd, 1); }).find("n_fft 255") != std::string::npos);
}
