// `melforge-bench step`: LeakCNN-64's full training step with the data already
// on the device, batch 1024..8192, each precision: per-phase CUDA-event times
// (eager), step time with and without the CUDA graph, TFLOP/s against a
// measured cuBLAS BF16 GEMM peak. With --augment (issue 15), every
// configuration is measured a second time in the same run with every
// augmentation transform on (typical settings, augment_bench_dims below, and
// mixup): the "augment" and "mixup" phases beside the others, their share of
// the augmented graph step, and the graph step with and without augmentation
// side by side. The augment kernel is first checked against its CPU twin.
// --arch (issue 16) picks the model: leakcnn (default, LeakCNN-64: the output
// as before), a preset stack (resnet34se-light) or cnn with --layers-toml (a
// TOML file whose [model] table holds the layers, as `melforge train` reads
// it); --mels/--frames/--classes set the input (default 64 x 64, 2 classes,
// both heads). Each configuration also reports samples/s and the model's
// FLOPs per sample from train/perf.hpp (model_flops: training = forward +
// backward) with the achieved TFLOP/s. --device cpu measures the CPU backend
// (host clocks; no graphs, no peak): median of --steps steps and the phases
// of 3 steps, for the side by side with PyTorch on the CPU.
// `melforge-bench adamw`: the fused AdamW against one update launch per
// parameter tensor and against the HBM roofline (a measured device copy).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "bench/bench_common.hpp"
#include "bench/cpu_fma_peak.hpp"
#include "bench/suites.hpp"
#include "engine/counter_rng.hpp"
#include "engine/cpu_kernels.hpp"
#include "engine/device.hpp"
#include "engine/error.hpp"
#include "engine/parallel.hpp"
#include "engine/stream.hpp"
#include "engine/timer.hpp"
#include "kernels/adamw.hpp"
#include "kernels/adamw_lab.hpp"
#include "kernels/ops.hpp"
#include "model/run_config.hpp"
#include "model/train_step.hpp"
#include "train/perf.hpp"

namespace mf::bench {

namespace {

struct StepOptions {
  std::vector<std::int64_t> batches{1024, 2048, 4096, 8192};
  std::vector<std::string> precisions{"fp32", "bf16", "fp16"};
  int steps = 20;
  bool augment = false;  // also measure each configuration with every augmentation transform on
  std::string arch = "leakcnn";  // leakcnn | cnn | a preset (model/cnn_layers.hpp)
  std::string layers_toml;       // arch = cnn: a TOML file with [model] layers
  int mels = 64, frames = 64, classes = 2;
  std::string device = "cuda";   // cuda | cpu
};

// The benchmarked model: LeakCNN-64 (arch leakcnn, the keys' defaults), a
// preset, or the stack of --layers-toml, on mels x frames inputs.
model::ModelConfig bench_model(const StepOptions& o) {
  model::ModelConfig m;
  m.in_mels = o.mels;
  m.in_frames = o.frames;
  m.classes = o.classes;
  if (o.arch == "cnn") {
    MF_CHECK(!o.layers_toml.empty(), "melforge-bench step --arch cnn: --layers-toml FILE is required");
    model::RunConfig rc;
    model::load_toml_file(rc, o.layers_toml);
    MF_CHECK(!rc.layers.empty(), "{}: expected [[model.layers]] tables (docs/models.md), found none", o.layers_toml);
    m.arch = model::Arch::cnn;
    m.layers = rc.layers;
  } else if (o.arch != "leakcnn") {
    MF_CHECK(o.layers_toml.empty(), "melforge-bench step: --layers-toml needs --arch cnn, found --arch {}", o.arch);
    m.arch = model::Arch::cnn;
    m.layers = model::cnn_preset(o.arch);
    m.preset = o.arch;
  }
  m.validate();
  return m;
}

std::string model_name(const StepOptions& o) {
  return o.arch == "leakcnn" ? "LeakCNN-64" : o.arch == "cnn" ? "cnn (" + o.layers_toml + ")" : o.arch;
}

// Forward FLOPs per sample (multiply-add = 2) of a LeakCNN.
double forward_flops(const model::ModelConfig& c) {
  double f = 0;
  int h = c.in_mels, w = c.in_frames;
  for (int i = 0; i < c.blocks(); ++i) {
    f += 2.0 * h * w * c.kernel * c.kernel * c.in_channels(i) * c.channels[std::size_t(i)];
    h /= c.pools[std::size_t(i)];
    w /= c.pools[std::size_t(i)];
  }
  f += 2.0 * double(c.flat_features()) * c.dense + 2.0 * c.dense * (c.classes + 1);
  return f;
}

double bf16_gemm_peak_tflops(cudaStream_t s) {
  const int n = 8192;
  void *a = nullptr, *c = nullptr;
  MF_CUDA_CHECK(cudaMalloc(&a, std::size_t(n) * n * 4));
  MF_CUDA_CHECK(cudaMalloc(&c, std::size_t(n) * n * 2));
  MF_CUDA_CHECK(cudaMemsetAsync(a, 0, std::size_t(n) * n * 4, s));
  cublasHandle_t h;
  MF_CUBLAS_CHECK(cublasCreate(&h));
  MF_CUBLAS_CHECK(cublasSetStream(h, s));
  const float alpha = 1, beta = 0;
  const double ms = time_cuda_ms([&] {
    MF_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n,
                                 static_cast<char*>(a) + std::size_t(n) * n * 2, CUDA_R_16BF, n, &beta, c,
                                 CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }, s, 3, 10, false);
  MF_CUBLAS_CHECK(cublasDestroy(h));
  MF_CUDA_CHECK(cudaFree(a));
  MF_CUDA_CHECK(cudaFree(c));
  return 2.0 * n * double(n) * n / (ms * 1e-3) / 1e12;
}

// Typical settings of every transform (issue 15's benchmark): 2 time and 2
// frequency masks of width <= 8, shift <= 8 frames, gain +-6 dB, 64 noise
// segments at an SNR in [0, 20] dB, values in dB (db_per_unit 1). The noise
// is a fixed pseudorandom pattern in [-40, 0] dB: the kernel's work does not
// depend on the values. mixup (a separate op after augment) uses
// kBenchMixupAlpha; its cost does not depend on alpha either.
constexpr float kBenchMixupAlpha = 0.4f;

kernels::AugmentArgs augment_bench_dims() {
  kernels::AugmentArgs d;
  d.time_masks = 2;
  d.time_mask_width = 8;
  d.freq_masks = 2;
  d.freq_mask_width = 8;
  d.time_shift = 8;
  d.gain_db = 6;
  d.noise_count = 64;
  d.snr_lo_db = 0;
  d.snr_hi_db = 20;
  d.db_per_unit = 1;
  return d;
}

std::vector<float> augment_bench_noise(std::int64_t count, std::int64_t mels, std::int64_t frames) {
  std::vector<float> n(std::size_t(count * mels * frames));
  std::uint64_t state = 0x6e6f697365ull;  // "noise"
  for (float& v : n) v = float(-40.0 * unit_double(splitmix64_next(state)));
  return n;
}

double ulp(double v, int bits) {  // of a float with `bits` significand bits (24: f32, 8: bf16)
  int e = 0;
  std::frexp(v == 0 ? 1e-30 : v, &e);
  return std::ldexp(1.0, e - bits);
}

// The augment kernel against its CPU twin on a bf16 batch of 64x64 segments
// with every transform on. They run the same f32 operations and differ only
// where CUDA's expf/logf do (kernels/augment.hpp): the bound is 4 f32 ulp of
// the sample's largest magnitude plus one bf16 ulp of the value (the two may
// round apart), as in tests/kernels/test_augment_gpu.cpp. Returns the largest
// error in units of that bound (<= 1: pass).
double check_augment(cudaStream_t s) {
  kernels::AugmentArgs d = augment_bench_dims();
  d.batch = 512;
  d.mels = 64;
  d.frames = 64;
  d.seed = 0x5eed;
  const std::int64_t seg = d.mels * d.frames;
  const std::vector<float> noise = augment_bench_noise(d.noise_count, d.mels, d.frames);
  std::vector<float> x(std::size_t(d.batch * seg));
  std::uint64_t state = 0x78ull;
  for (float& v : x) v = float(-80.0 + 80.0 * unit_double(splitmix64_next(state)));
  const std::int32_t ctr = 7;
  Tensor cx = Tensor::from_floats(x, {d.batch, d.mels, d.frames}, DType::bf16);
  Tensor gx = cx.to(Device::cuda(0), s);
  Tensor gn = Tensor::from_floats(noise, {std::int64_t(noise.size())}).to(Device::cuda(0), s);
  Tensor gctr = Tensor::from_floats(std::vector<float>{float(ctr)}, {1}, DType::i32).to(Device::cuda(0), s);
  ops::augment(gx, gctr.data<std::int32_t>(), d, &gn, s);
  MF_CUDA_CHECK(cudaStreamSynchronize(s));  // the copy of cx is done before the twin changes it
  const Tensor cn = Tensor::from_floats(noise, {std::int64_t(noise.size())});
  ops::augment(cx, &ctr, d, &cn);
  const std::vector<float> want = cx.to_floats(), got = gx.to_floats();
  double worst = 0;
  for (std::int64_t b = 0; b < d.batch; ++b) {
    const auto first = want.begin() + b * seg;
    double amax = 0;
    for (auto it = first; it != first + seg; ++it) amax = std::max(amax, double(std::fabs(*it)));
    for (std::int64_t i = b * seg; i < (b + 1) * seg; ++i) {
      const double bound = 4 * ulp(amax, 24) + ulp(want[std::size_t(i)], 8);
      const double err = std::fabs(double(got[std::size_t(i)]) - double(want[std::size_t(i)]));
      worst = std::max(worst, std::isfinite(err) ? err / bound : INFINITY);
    }
  }
  return worst;
}

struct StepTimes {
  double eager_ms = 0, graph_ms = 0;
  std::map<std::string, double> phases;  // mean ms per call, eager steps
};

// One configuration: eager and graph step times (median of `steps`), and the
// per-phase CUDA-event times of 5 eager steps. The augmented input is
// augmented again in place every step (nothing refills it): its level drifts
// (the noise adds up to 3 dB a step), which changes no work.
StepTimes measure_step(model::TrainConfig cfg, cudaStream_t s, int steps, const std::string& what) {
  StepTimes t;
  for (int g = 0; g < 2; ++g) {
    cfg.cuda_graph = g == 1;
    model::TrainStep ts(cfg, Device::cuda(0), s);
    ts.input_x().fill_bytes(0x3c, s);  // ~1.0 in f16/bf16 high bytes: any finite data will do
    ts.input_labels().fill_bytes(0, s);
    ts.input_leak().fill_bytes(0, s);
    for (int i = 0; i < 3; ++i) ts.step(s);
    (g ? t.graph_ms : t.eager_ms) = time_cuda_ms([&] { ts.step(s); }, s, 1, steps, false);
    if (g == 0) {
      EventTimer timer(Device::cuda(0));
      ts.set_phase_timer(&timer);
      for (int i = 0; i < 5; ++i) ts.step(s);
      for (const auto& [name, st] : timer.collect()) t.phases[name] = st.mean_ms();
      ts.set_phase_timer(nullptr);
    }
    const auto m = ts.read_metrics(s);
    if (!std::isfinite(m.loss)) fmt::print("warning: non-finite loss in {}\n", what);
  }
  return t;
}

std::string phase_text(const std::map<std::string, double>& phases) {
  std::string ph;
  for (const auto& [name, t] : phases) ph += fmt::format(" {}={:.3f}", name, t);
  return ph;
}

// The augmented measurement of one configuration: its JSON, and two lines.
// Shares are of the augmented graph step (what the trainer replays); the
// phases are CUDA-event times of eager steps. The step's increase also holds
// what mixup's soft targets add to the loss and backward.
nlohmann::json augment_report(const StepTimes& plain, const StepTimes& aug) {
  const auto phase = [&](const char* name) {
    const auto it = aug.phases.find(name);
    return it == aug.phases.end() ? NAN : it->second;
  };
  const double aug_ms = phase("augment"), mix_ms = phase("mixup");
  const double share = 100 * aug_ms / aug.graph_ms, mix_share = 100 * mix_ms / aug.graph_ms;
  const double delta = 100 * (aug.graph_ms - plain.graph_ms) / plain.graph_ms;
  fmt::print("       phases (ms, eager, augment on):{}\n", phase_text(aug.phases));
  fmt::print("       augment {:.3f} ms = {:.2f}%, mixup {:.3f} ms = {:.2f}% of the augmented graph step; graph step "
             "{:.3f} -> {:.3f} ms ({:+.2f}%), eager {:.3f} -> {:.3f} ms\n",
             aug_ms, share, mix_ms, mix_share, plain.graph_ms, aug.graph_ms, delta, plain.eager_ms, aug.eager_ms);
  return {{"eager_ms", aug.eager_ms},     {"graph_ms", aug.graph_ms},
          {"phases_ms", aug.phases},      {"augment_ms", aug_ms},
          {"augment_pct_of_step", share}, {"mixup_ms", mix_ms},
          {"mixup_pct_of_step", mix_share}, {"graph_step_increase_pct", delta}};
}

nlohmann::json model_json(const StepOptions& o, const model::ModelConfig& mc) {
  const train::ModelFlops fl = train::model_flops(mc);
  nlohmann::json j = {{"arch", o.arch},      {"mels", mc.in_mels},
                      {"frames", mc.in_frames}, {"classes", mc.classes},
                      {"leak_head", mc.leak_head}, {"model_forward_flops_per_sample", fl.forward},
                      {"model_train_flops_per_sample", fl.train}};
  if (mc.arch == model::Arch::cnn) {
    j["description"] = nlohmann::json::parse(model::cnn_description_json(mc));
    if (!o.layers_toml.empty()) j["layers_toml"] = o.layers_toml;
  }
  return j;
}

double process_cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return 1e3 * (double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec));
}

// A pseudorandom batch for the CPU step (x in [-1, 1], labels spread over
// the classes, leak = label odd). A constant batch with one label lets the
// model fit it within a few dozen steps; the gradients then decay into
// subnormal floats, which the CPU multiplies through slow microcode assists,
// and later steps time that instead of the training step.
void fill_cpu_bench_batch(model::TrainStep& ts, int classes) {
  std::uint64_t state = 0x62656e6368ull;  // "bench"
  const Tensor& x = ts.input_x();
  std::vector<float> xv(std::size_t(x.numel()));
  for (float& v : xv) v = float(2.0 * unit_double(splitmix64_next(state)) - 1.0);
  ts.input_x().copy_from(Tensor::from_floats(xv, x.shape(), x.dtype(), x.layout()));
  const std::int64_t n = ts.input_labels().numel();
  auto* labels = static_cast<std::int32_t*>(ts.input_labels().raw());
  auto* leak = static_cast<float*>(ts.input_leak().raw());
  for (std::int64_t i = 0; i < n; ++i) {
    labels[i] = std::int32_t(splitmix64_next(state) % std::uint64_t(classes));
    leak[i] = float(labels[i] % 2);
  }
}

// The CPU backend: TrainStep on the host, host clocks. Median of `steps`
// timed steps after 2 untimed ones, and the process's CPU time per step over
// them (user + system, all threads: the work, whatever else shares the
// cores); the phases (fwd.layers, bwd.layers, ...) are means over 3 further
// steps.
void run_step_bench_cpu(const StepOptions& o, const model::ModelConfig& mc) {
  nlohmann::json res;
  res["device"] = "cpu";
  res["cpu_threads"] = cpu_threads();
  res["cpu_kernels"] = cpu_kernels_name(active_cpu_kernels());
  res["model"] = model_json(o, mc);
  const double train_flops = train::model_flops(mc).train;
  fmt::print("melforge-bench step on the CPU ({} threads, {} kernels): {} {}x{}, {:.3f} GFLOP/sample (training step)\n",
             cpu_threads(), cpu_kernels_name(active_cpu_kernels()), model_name(o), mc.in_mels,
             mc.in_frames, train_flops / 1e9);
  fmt::print("{:<6} {:>6} {:>12} {:>12} {:>10} {:>12}\n", "prec", "batch", "step ms", "samples/s", "GFLOP/s",
             "CPU ms/step");
  for (const auto& pname : o.precisions)
    for (std::int64_t B : o.batches) {
      model::TrainConfig cfg;
      cfg.model = mc;
      cfg.precision = model::parse_precision(pname);
      cfg.micro_batch = B;
      cfg.cuda_graph = false;
      model::TrainStep ts(cfg, Device::cpu());
      fill_cpu_bench_batch(ts, mc.classes);
      for (int i = 0; i < 2; ++i) ts.step(nullptr);
      std::vector<double> ms;
      const double cpu0 = process_cpu_ms();
      for (int i = 0; i < o.steps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        ts.step(nullptr);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      const double cpu_ms = (process_cpu_ms() - cpu0) / o.steps;
      std::sort(ms.begin(), ms.end());
      const double step_ms = ms[ms.size() / 2];
      EventTimer timer(Device::cpu());
      ts.set_phase_timer(&timer);
      for (int i = 0; i < 3; ++i) ts.step(nullptr);
      std::map<std::string, double> phases;
      for (const auto& [name, st] : timer.collect()) phases[name] = st.mean_ms();
      ts.set_phase_timer(nullptr);
      if (!std::isfinite(ts.read_metrics(nullptr).loss)) fmt::print("warning: non-finite loss\n");
      const double sps = double(B) / (step_ms * 1e-3);
      const double gflops = train_flops * sps / 1e9;
      fmt::print("{:<6} {:>6} {:>12.2f} {:>12.1f} {:>10.2f} {:>12.1f}\n", pname, B, step_ms, sps, gflops, cpu_ms);
      fmt::print("       phases (ms, host clock):{}\n", phase_text(phases));
      res["runs"].push_back({{"precision", pname},
                             {"batch", B},
                             {"step_ms", step_ms},
                             {"step_ms_min", ms.front()},
                             {"step_ms_max", ms.back()},
                             {"samples_per_s", sps},
                             {"cpu_ms_per_step", cpu_ms},
                             {"model_TFLOPs", gflops / 1e3},
                             {"phases_ms", phases}});
    }
  const CpuFmaPeak peak = measure_cpu_fma_peak();
  if (peak.gflops > 0) {
    fmt::print("roofline: measured f32 FMA peak {:.1f} GFLOP/s ({} thread(s), {} vectors); each step's GFLOP/s above "
               "is that share of it: ",
               peak.gflops, peak.threads, peak.isa);
    for (const auto& r : res["runs"])
      fmt::print("{:.0f}% ", 100 * r["model_TFLOPs"].get<double>() * 1e3 / peak.gflops);
    fmt::print("\n");
    res["fma_peak_GFLOPs"] = peak.gflops;
  }
  if (!common().no_write) fmt::print("wrote {}\n", write_results(common().out_dir, "step", res));
}

void run_step_bench(const StepOptions& o) {
  const model::ModelConfig mc = bench_model(o);
  if (o.device == "cpu") {
    MF_CHECK(!o.augment, "melforge-bench step: --augment is measured on the GPU only");
    run_step_bench_cpu(o, mc);
    return;
  }
  MF_CHECK(o.device == "cuda", "melforge-bench step --device: expected cuda or cpu, found {}", o.device);
  if (!gpu_available()) {
    fmt::print("melforge-bench step: no GPU ({}); nothing to measure\n", gpu_info().why_none);
    return;
  }
  Stream s(Device::cuda(0), "bench-step");
  const double peak = bf16_gemm_peak_tflops(s);
  fmt::print("measured cuBLAS BF16 GEMM peak: {:.1f} TFLOP/s\n", peak);
  nlohmann::json res;
  res["bf16_gemm_peak_TFLOPs"] = peak;
  res["model"] = model_json(o, mc);
  const bool leakcnn = mc.arch == model::Arch::leakcnn;
  if (!leakcnn)
    fmt::print("model: {} {}x{}, {:.3f} GFLOP/sample (training step, train/perf.hpp model_flops)\n", model_name(o),
               mc.in_mels, mc.in_frames, train::model_flops(mc).train / 1e9);
  if (o.augment) {
    const kernels::AugmentArgs a = augment_bench_dims();
    const double check = check_augment(s);
    fmt::print("augment: time_masks {} x {}, freq_masks {} x {}, time_shift {}, gain_db {}, {} noise segments at "
               "[{}, {}] dB SNR, mixup_alpha {}; augment kernel vs CPU twin: largest error {:.3f} of the bound ({})\n",
               a.time_masks, a.time_mask_width, a.freq_masks, a.freq_mask_width, a.time_shift, a.gain_db,
               a.noise_count, a.snr_lo_db, a.snr_hi_db, kBenchMixupAlpha, check, check <= 1 ? "ok" : "FAILED");
    MF_CHECK(check <= 1, "melforge-bench step: the augment kernel differs from its CPU twin by {:.3f} x the bound",
             check);
    res["augment_config"] = {{"time_masks", a.time_masks},   {"time_mask_width", a.time_mask_width},
                             {"freq_masks", a.freq_masks},   {"freq_mask_width", a.freq_mask_width},
                             {"time_shift", a.time_shift},   {"gain_db", a.gain_db},
                             {"noise_count", a.noise_count}, {"noise_snr_db", {a.snr_lo_db, a.snr_hi_db}},
                             {"db_per_unit", a.db_per_unit}, {"mixup_alpha", kBenchMixupAlpha},
                             {"check_error_over_bound", check}};
  }
  // LeakCNN keeps its table (3x the forward FLOPs); stacks use model_flops.
  // The JSON has both, and samples/s.
  const double model_train_flops = train::model_flops(mc).train;
  const double step_flops_per_sample = leakcnn ? 3.0 * forward_flops(mc) : model_train_flops;
  fmt::print("{:<6} {:>6} {:>12} {:>12} {:>10} {:>8}{}\n", "prec", "batch", "eager ms", "graph ms", "TFLOP/s", "% peak",
             leakcnn ? "" : fmt::format(" {:>12}", "samples/s"));
  for (const auto& pname : o.precisions)
    for (std::int64_t B : o.batches) {
      model::TrainConfig cfg;
      cfg.model = mc;
      cfg.precision = model::parse_precision(pname);
      cfg.micro_batch = B;
      const std::string what = fmt::format("{} batch {}", pname, B);
      const StepTimes t = measure_step(cfg, s, o.steps, what);
      const double tflops = step_flops_per_sample * double(B) / (t.graph_ms * 1e-3) / 1e12;
      const double sps = double(B) / (t.graph_ms * 1e-3);
      fmt::print("{:<6} {:>6} {:>12.3f} {:>12.3f} {:>10.1f} {:>7.1f}%{}\n", pname, B, t.eager_ms, t.graph_ms, tflops,
                 100 * tflops / peak, leakcnn ? "" : fmt::format(" {:>12.0f}", sps));
      fmt::print("       phases (ms, eager):{}\n", phase_text(t.phases));
      nlohmann::json run = {{"precision", pname},       {"batch", B},
                            {"eager_ms", t.eager_ms},   {"graph_ms", t.graph_ms},
                            {"TFLOPs", tflops},         {"phases_ms", t.phases},
                            {"samples_per_s", sps},
                            {"model_TFLOPs", model_train_flops * sps / 1e12}};
      if (o.augment) {
        cfg.augment = augment_bench_dims();
        cfg.augment_noise = augment_bench_noise(cfg.augment.noise_count, mc.in_mels, mc.in_frames);
        cfg.mixup_alpha = kBenchMixupAlpha;
        run["augment"] = augment_report(t, measure_step(cfg, s, o.steps, what + " (augment)"));
      }
      res["runs"].push_back(run);
    }
  if (!common().no_write) fmt::print("wrote {}\n", write_results(common().out_dir, "step", res));
}

void run_adamw_bench() {
  if (!gpu_available()) {
    fmt::print("melforge-bench adamw: no GPU ({}); nothing to measure\n", gpu_info().why_none);
    return;
  }
  Stream s(Device::cuda(0), "bench-adamw");
  nlohmann::json res;
  // Roofline: a device-to-device copy's bandwidth.
  const std::size_t cb = std::size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  MF_CUDA_CHECK(cudaMalloc(&a, cb));
  MF_CUDA_CHECK(cudaMalloc(&b, cb));
  const double copy_ms = time_cuda_ms([&] { MF_CUDA_CHECK(cudaMemcpyAsync(b, a, cb, cudaMemcpyDeviceToDevice, s)); }, s, 2, 10, false);
  MF_CUDA_CHECK(cudaFree(a));
  MF_CUDA_CHECK(cudaFree(b));
  const double hbm = 2.0 * double(cb) / (copy_ms * 1e-3) / 1e9;
  fmt::print("roofline (device copy): {:.0f} GB/s\n", hbm);
  res["copy_GBps"] = hbm;
  model::ParamBuffer pb(model::ModelConfig{}, DType::bf16, Device::cuda(0), s);
  std::vector<std::int64_t> ranges;
  for (const auto& p : pb.params()) {
    ranges.push_back(p.offset);
    ranges.push_back(p.offset + p.numel);
  }
  fmt::print("{:<14} {:>10} {:>10} {:>10} {:>8}\n", "variant", "params", "us", "GB/s", "% roof");
  for (std::int64_t n : {pb.size(), std::int64_t(64) << 20}) {
    Tensor master = Tensor::zeros({n}, DType::f32, Device::cuda(0), Layout::plain, s);
    Tensor grad = Tensor::zeros({n}, DType::f32, Device::cuda(0), Layout::plain, s);
    Tensor m = Tensor::zeros({n}, DType::f32, Device::cuda(0), Layout::plain, s);
    Tensor v = Tensor::zeros({n}, DType::f32, Device::cuda(0), Layout::plain, s);
    Tensor work = Tensor::zeros({n}, DType::bf16, Device::cuda(0), Layout::plain, s);
    Tensor state = Tensor::zeros({std::int64_t(sizeof(kernels::AdamWState))}, DType::u8, Device::cuda(0), Layout::plain, s);
    Tensor scratch = Tensor::zeros({std::int64_t(kernels::adamw_scratch_bytes())}, DType::u8, Device::cuda(0), Layout::plain, s);
    kernels::AdamWState st0;
    MF_CUDA_CHECK(cudaMemcpyAsync(state.raw(), &st0, sizeof(st0), cudaMemcpyHostToDevice, s));
    MF_CUDA_CHECK(cudaStreamSynchronize(s));
    kernels::AdamWConfig c;
    c.max_grad_norm = 1.f;
    const kernels::AdamWDims d{n, n / 2};
    // Bytes: norm pass reads grad (4); update reads grad, master, m, v (16), writes master, m, v (12) + bf16 (2).
    const double bytes = 34.0 * double(n);
    auto fused = [&] {
      kernels::adamw_step_cuda(d, c, DType::bf16, master.data<float>(), grad.data<float>(), m.data<float>(),
                               v.data<float>(), work.raw(), nullptr, static_cast<kernels::AdamWState*>(state.raw()),
                               scratch.raw(), s);
    };
    std::vector<std::int64_t> rg = n == pb.size() ? ranges : std::vector<std::int64_t>{};
    if (rg.empty())
      for (int i = 0; i < 12; ++i) {
        rg.push_back(n * i / 12);
        rg.push_back(n * (i + 1) / 12);
      }
    auto per_tensor = [&] {
      kernels::adamw_step_per_tensor_cuda(d, c, DType::bf16, master.data<float>(), grad.data<float>(),
                                          m.data<float>(), v.data<float>(), work.raw(),
                                          static_cast<kernels::AdamWState*>(state.raw()), scratch.raw(), rg.data(),
                                          int(rg.size() / 2), s);
    };
    for (auto& [name, fn] : std::vector<std::pair<std::string, std::function<void()>>>{{"fused", fused}, {"per-tensor", per_tensor}}) {
      const double ms = time_cuda_ms(fn, s, 3, 20, true);
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      fmt::print("{:<14} {:>10} {:>10.1f} {:>10.0f} {:>7.1f}%\n", name, n, ms * 1e3, gbs, 100 * gbs / hbm);
      res["runs"].push_back({{"variant", name}, {"params", n}, {"us", ms * 1e3}, {"GBps", gbs}});
    }
  }
  if (!common().no_write) fmt::print("wrote {}\n", write_results(common().out_dir, "adamw", res));
}

}  // namespace

void register_step(CLI::App& app) {
  static StepOptions o;
  auto* cmd = app.add_subcommand("step", "A training step (LeakCNN-64, or a CNN stack with --arch): per-phase times, "
                                         "graphs on/off, samples/s, TFLOP/s");
  cmd->add_option("--batch", o.batches, "Batch sizes")->capture_default_str();
  cmd->add_option("--precision", o.precisions, "Precisions (fp32, bf16, fp16)")->capture_default_str();
  cmd->add_option("--steps", o.steps, "Timed steps per configuration")->capture_default_str();
  cmd->add_flag("--augment", o.augment,
                "Also measure each configuration with every augmentation transform on (masks 2x8 + 2x8, shift 8, "
                "gain 6 dB, 64 noise segments at 0-20 dB SNR, mixup 0.4): the augment and mixup phases and the step "
                "with and without");
  cmd->add_option("--arch", o.arch, "leakcnn (LeakCNN-64), cnn (with --layers-toml) or a preset (resnet34se-light)")
      ->capture_default_str();
  cmd->add_option("--layers-toml", o.layers_toml,
                  "--arch cnn: a TOML file whose [model] table holds the layers ([[model.layers]], docs/models.md)");
  cmd->add_option("--mels", o.mels, "Input mels")->capture_default_str();
  cmd->add_option("--frames", o.frames, "Input frames")->capture_default_str();
  cmd->add_option("--classes", o.classes, "Classes (the leak head is always on)")->capture_default_str();
  cmd->add_option("--device", o.device, "cuda, or cpu (the CPU backend, host clocks; e.g. --batch 32 --precision fp32)")
      ->capture_default_str();
  cmd->callback([] { run_step_bench(o); });
  auto* ad = app.add_subcommand("adamw", "Fused AdamW vs one launch per tensor vs the HBM roofline");
  ad->callback(run_adamw_bench);
}

}  // namespace mf::bench
