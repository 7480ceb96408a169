// `melforge-bench logmel` (issue 14): the log-mel op alone, without decoding
// or writing: frames/s and files/s of each variant on synthetic one-second
// files held in memory, each variant first checked against the CPU twin's
// variant 1 (FFTW), then timed (median of --repeats).
//   cpu:  the twin's variants (fftw, simd8), all cores (parallel_for over the
//         batch, as `make_logmel_cpu(p, true)`) and one core per file loop (what
//         each decode thread of the pipeline does), with the achieved GFLOP/s
//         beside the nominal f32 peak (cores x 16 flops/cycle x clock: two 8-lane
//         AVX2 pipes, no FMA since the twins do not contract) and
//   cuda: (--device auto with a GPU, or cuda) also the cuFFT op on device buffers, CUDA-event timing, files/s beside
//         issue 14's GPU target (>= 50,000 one-second files/s end to end).
// FLOPs per frame (a model, not a count): real FFT of n as a complex FFT of
// n/2, 5 (n/2) log2(n/2) + 10 (n/2) for the split; power 3 (n/2 + 1); mel
// 2 x the filter bank's nonzeros; window n; log ~25 per band.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <numbers>
#include <string>
#include <thread>
#include <vector>

#include "audio/logmel.hpp"
#include "audio/mel_filterbank.hpp"
#include "bench/bench_common.hpp"
#include "bench/suites.hpp"
#include "engine/device.hpp"
#include "engine/error.hpp"
#include "engine/memory.hpp"
#include "engine/parallel.hpp"
#include "engine/stream.hpp"

namespace mf::bench {

namespace {

constexpr double kGpuTargetFilesPerS = 50'000;  // issue 14, end to end from page cache

struct LogmelOptions {
  std::string device = "auto";  // auto: the GPU (and the CPU variants) when there is one, else the CPU
  std::string algo = "all";  // cpu: all | fftw | simd8
  std::int64_t files = 0;    // 0: 512 on the CPU, 16384 on a GPU
  std::int64_t sample_rate = 16000, n_fft = 1024, hop = 256, mels = 64, frames = 62;
  int repeats = 5;
  int threads = 0;
};

audio::FrontendParams frontend(const LogmelOptions& o) {
  audio::FrontendParams p;
  p.sample_rate = o.sample_rate;
  p.n_fft = o.n_fft;
  p.hop_length = o.hop;
  p.n_mels = o.mels;
  p.frames = o.frames;
  p.validate();
  return p;
}

// Tones at a few frequencies over a little noise, different per file.
std::vector<float> synthetic_waves(const audio::FrontendParams& p, std::int64_t files) {
  const std::int64_t W = p.window_samples();
  std::vector<float> w(std::size_t(files * W));
  std::uint64_t s = 12345;
  for (std::int64_t b = 0; b < files; ++b)
    for (std::int64_t i = 0; i < W; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      const double noise = double(s >> 40) / double(1ull << 24) - 0.5;
      const double t = double(i) / double(p.sample_rate);
      w[std::size_t(b * W + i)] = float(0.3 * std::sin(2 * std::numbers::pi * (200.0 + 37.0 * double(b % 50)) * t) +
                                        0.05 * std::sin(2 * std::numbers::pi * 3100.0 * t) + 0.01 * noise);
    }
  return w;
}

double flops_per_frame(const audio::FrontendParams& p) {
  const double h = double(p.n_fft) / 2;
  double nnz = 0;
  for (auto c : audio::mel_filterbank(p).count) nnz += double(c);
  return 5 * h * std::log2(h) + 10 * h + 3 * (h + 1) + 2 * nnz + double(p.n_fft) + 25.0 * double(p.n_mels);
}

// Nominal f32 peak of the cores used: 16 flops/cycle/core at the clock /proc/cpuinfo reports (0: unknown).
double nominal_cpu_gflops(int cores) {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("cpu MHz", 0) == 0) return double(cores) * 16 * std::stod(line.substr(line.find(':') + 1)) / 1000;
  return 0;
}

// Largest |a - b| (dB) over the values within 60 dB of the batch's largest (what a user sees).
double max_db_difference(const std::vector<float>& a, const std::vector<float>& b) {
  const float top = *std::max_element(b.begin(), b.end());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (b[i] > top - 60.f) worst = std::max(worst, double(std::fabs(a[i] - b[i])));
  return worst;
}

nlohmann::json time_cpu_variant(const LogmelOptions& o, const audio::FrontendParams& p, audio::LogmelCpuAlgo algo,
                                const std::vector<float>& wave, const std::vector<float>& reference) {
  const std::int64_t n = o.files, E = p.segments() * p.n_mels * p.frames, W = p.window_samples();
  std::vector<float> out(std::size_t(n * E));
  auto all_cores = audio::make_logmel_cpu(p, true, algo);
  auto one_core = audio::make_logmel_cpu(p, false, algo);
  all_cores->compute(n, wave.data(), out.data(), nullptr);  // warm-up and the check
  const double diff = max_db_difference(out, reference);
  MF_CHECK(diff <= 0.01, "logmel bench: {} differs from the FFTW twin by {} dB (allowed 0.01 dB within 60 dB of the top)",
           audio::logmel_cpu_algo_name(algo), diff);
  std::vector<double> many, single;
  for (int r = 0; r < o.repeats; ++r) {
    double t0 = now_s();
    all_cores->compute(n, wave.data(), out.data(), nullptr);
    many.push_back(now_s() - t0);
    t0 = now_s();
    for (std::int64_t b = 0; b < n; ++b) one_core->compute(1, wave.data() + b * W, out.data() + b * E, nullptr);
    single.push_back(now_s() - t0);
  }
  const double frames = double(n * p.total_frames()), fl = flops_per_frame(p);
  const double t_all = median(many), t_one = median(single);
  const int cores = cpu_threads();
  const double peak = nominal_cpu_gflops(cores);
  fmt::print("  {:<6} {} cores: {:9.0f} files/s {:7.3f} us/frame {:6.1f} GFLOP/s ({:.0f}% of {:.0f} nominal) | "
             "1 core: {:8.0f} files/s {:7.3f} us/frame | max diff vs fftw {:.2g} dB\n",
             audio::logmel_cpu_algo_name(algo), cores, double(n) / t_all, 1e6 * t_all / frames,
             frames * fl / t_all / 1e9, peak > 0 ? 100 * frames * fl / t_all / 1e9 / peak : 0, peak,
             double(n) / t_one, 1e6 * t_one / frames, diff);
  return {{"algo", audio::logmel_cpu_algo_name(algo)}, {"threads", cores},
          {"files_per_s", double(n) / t_all}, {"us_per_frame", 1e6 * t_all / frames},
          {"gflops", frames * fl / t_all / 1e9}, {"nominal_peak_gflops", peak},
          {"one_core_files_per_s", double(n) / t_one}, {"one_core_us_per_frame", 1e6 * t_one / frames},
          {"max_db_diff_vs_fftw", diff}, {"seconds_all_cores", many}, {"seconds_one_core", single}};
}

nlohmann::json time_cuda(const LogmelOptions& o, const audio::FrontendParams& p, const std::vector<float>& wave,
                         const std::vector<float>& reference) {
  const std::int64_t n = o.files, E = p.segments() * p.n_mels * p.frames;
  const Device dev = parse_device(o.device);
  set_current(dev);
  Stream s(dev, "bench.logmel");
  auto op = audio::make_logmel_cuda(p, n);
  auto* d_wave = static_cast<float*>(device_alloc(wave.size() * sizeof(float), dev.index, s));
  auto* d_out = static_cast<float*>(device_alloc(std::size_t(n * E) * sizeof(float), dev.index, s));
  MF_CUDA_CHECK(cudaMemcpyAsync(d_wave, wave.data(), wave.size() * sizeof(float), cudaMemcpyHostToDevice, s));
  op->compute(n, d_wave, d_out, s);
  std::vector<float> out(std::size_t(n * E));
  MF_CUDA_CHECK(cudaMemcpyAsync(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
  s.synchronize();
  const double diff = max_db_difference(out, reference);
  MF_CHECK(diff <= 0.01, "logmel bench: the CUDA op differs from the FFTW twin by {} dB (allowed 0.01 dB)", diff);
  const double ms = time_cuda_ms([&] { op->compute(n, d_wave, d_out, s); }, s, 3, 20, false);
  device_free(d_wave, s);
  device_free(d_out, s);
  s.synchronize();
  const double fps = double(n) / (ms / 1000), frames = double(n * p.total_frames());
  fmt::print("  cuda   {:9.0f} files/s {:7.4f} us/frame {:7.1f} GFLOP/s (issue 14's end-to-end target: {:.0f} files/s) "
             "| max diff vs fftw {:.2g} dB\n",
             fps, 1e3 * ms / frames, frames * flops_per_frame(p) / (ms / 1000) / 1e9, kGpuTargetFilesPerS, diff);
  return {{"algo", "cuda"}, {"files_per_s", fps}, {"us_per_frame", 1e3 * ms / frames},
          {"gflops", frames * flops_per_frame(p) / (ms / 1000) / 1e9}, {"ms_per_batch", ms},
          {"target_files_per_s", kGpuTargetFilesPerS}, {"max_db_diff_vs_fftw", diff}};
}

void run_logmel_bench(LogmelOptions o) {
  if (o.threads > 0) set_cpu_threads(o.threads);
  if (o.device == "auto") o.device = gpu_available() ? "cuda" : "cpu";
  const bool gpu = o.device != "cpu";
  if (o.files <= 0) o.files = gpu ? 16384 : 512;
  const audio::FrontendParams p = frontend(o);
  const RunInfo info = run_info();
  fmt::print("melforge-bench logmel: {} files of {} samples ({} frames of n_fft {}, hop {}, {} mels), {}; {}\n", o.files,
             p.window_samples(), p.total_frames(), p.n_fft, p.hop_length, p.n_mels, info.device, info.commit);
  const std::vector<float> wave = synthetic_waves(p, o.files);
  std::vector<float> reference(std::size_t(o.files * p.segments() * p.n_mels * p.frames));
  audio::make_logmel_cpu(p, true, audio::LogmelCpuAlgo::fftw)->compute(o.files, wave.data(), reference.data(), nullptr);
  nlohmann::json runs = nlohmann::json::array();
  if (gpu) runs.push_back(time_cuda(o, p, wave, reference));
  for (auto algo : {audio::LogmelCpuAlgo::fftw, audio::LogmelCpuAlgo::simd8}) {
    if (o.algo != "all" && o.algo != audio::logmel_cpu_algo_name(algo)) continue;
    if (audio::resolve_logmel_cpu_algo(p, algo) != algo) continue;  // simd8: power-of-two n_fft only
    runs.push_back(time_cpu_variant(o, p, algo, wave, reference));
  }
  nlohmann::json res = {{"files", o.files},
                        {"frontend", {{"sample_rate", p.sample_rate}, {"n_fft", p.n_fft}, {"hop_length", p.hop_length},
                                      {"n_mels", p.n_mels}, {"frames", p.frames}}},
                        {"flops_per_frame", flops_per_frame(p)},
                        {"hardware_threads", std::thread::hardware_concurrency()},
                        {"runs", runs}};
  if (!common().no_write) fmt::print("wrote {}\n", write_results(common().out_dir, "logmel", res));
}

}  // namespace

void register_logmel(CLI::App& app) {
  static LogmelOptions o;
  auto* cmd = app.add_subcommand("logmel", "The audio front-end's log-mel op alone (no decoding, no writing): files/s "
                                           "and us/frame of each CPU variant, or the CUDA op");
  cmd->add_option("--device", o.device, "auto (cuda when a GPU is usable), cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--algo", o.algo, "CPU variants: all, fftw, simd8 or none (with a GPU: the CUDA op only)")->capture_default_str();
  cmd->add_option("--files", o.files, "Files in the batch (0: 512 on the CPU, 16384 on a GPU)")->capture_default_str();
  cmd->add_option("--sample-rate", o.sample_rate, "Hz")->capture_default_str();
  cmd->add_option("--n-fft", o.n_fft, "FFT size")->capture_default_str();
  cmd->add_option("--hop", o.hop, "Hop length")->capture_default_str();
  cmd->add_option("--mels", o.mels, "Mel bands")->capture_default_str();
  cmd->add_option("--frames", o.frames, "Frames per file (one segment)")->capture_default_str();
  cmd->add_option("--repeats", o.repeats, "Timed repeats (median reported)")->capture_default_str();
  cmd->add_option("--threads", o.threads, "CPU threads (0: every core)")->capture_default_str();
  cmd->callback([] { run_logmel_bench(o); });
}

}  // namespace mf::bench
