// `melforge-bench step`: LeakCNN-64's full training step with the data already
// on the device, batch 1024..8192, each precision: per-phase CUDA-event times
// (eager), step time with and without the CUDA graph, TFLOP/s against a
// measured cuBLAS BF16 GEMM peak.
// `melforge-bench adamw`: the fused AdamW against one update launch per
// parameter tensor and against the HBM roofline (a measured device copy).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "bench/bench_common.hpp"
#include "bench/suites.hpp"
#include "engine/device.hpp"
#include "engine/error.hpp"
#include "engine/stream.hpp"
#include "engine/timer.hpp"
#include "kernels/adamw.hpp"
#include "kernels/ops.hpp"
#include "model/train_step.hpp"

namespace mf::bench {

namespace {

struct StepOptions {
  std::vector<std::int64_t> batches{1024, 2048, 4096, 8192};
  std::vector<std::string> precisions{"fp32", "bf16", "fp16"};
  int steps = 20;
};

// Forward FLOPs per sample (multiply-add = 2) of a LeakCNN.
double forward_flops(const model::LeakCNNConfig& c) {
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

void run_step_bench(const StepOptions& o) {
  if (!gpu_available()) {
    fmt::print("melforge-bench step: no GPU ({}); nothing to measure\n", gpu_info().why_none);
    return;
  }
  Stream s(Device::cuda(0), "bench-step");
  const double peak = bf16_gemm_peak_tflops(s);
  fmt::print("measured cuBLAS BF16 GEMM peak: {:.1f} TFLOP/s\n", peak);
  nlohmann::json res;
  res["bf16_gemm_peak_TFLOPs"] = peak;
  model::LeakCNNConfig mc;  // LeakCNN-64
  const double step_flops_per_sample = 3.0 * forward_flops(mc);  // forward + 2x backward (approx.)
  fmt::print("{:<6} {:>6} {:>12} {:>12} {:>10} {:>8}\n", "prec", "batch", "eager ms", "graph ms", "TFLOP/s", "% peak");
  for (const auto& pname : o.precisions)
    for (std::int64_t B : o.batches) {
      model::TrainConfig cfg;
      cfg.model = mc;
      cfg.precision = model::parse_precision(pname);
      cfg.micro_batch = B;
      double ms[2] = {0, 0};
      std::map<std::string, double> phases;
      for (int g = 0; g < 2; ++g) {
        cfg.cuda_graph = g == 1;
        model::TrainStep ts(cfg, Device::cuda(0), s);
        ts.input_x().fill_bytes(0x3c, s);  // ~1.0 in f16/bf16 high bytes: any finite data will do
        ts.input_labels().fill_bytes(0, s);
        ts.input_leak().fill_bytes(0, s);
        for (int i = 0; i < 3; ++i) ts.step(s);
        ms[g] = time_cuda_ms([&] { ts.step(s); }, s, 1, o.steps, false);
        if (g == 0) {
          EventTimer timer(Device::cuda(0));
          ts.set_phase_timer(&timer);
          for (int i = 0; i < 5; ++i) ts.step(s);
          for (const auto& [name, st] : timer.collect()) phases[name] = st.mean_ms();
          ts.set_phase_timer(nullptr);
        }
        const auto m = ts.read_metrics(s);
        if (!std::isfinite(m.loss)) fmt::print("warning: non-finite loss in {} batch {}\n", pname, B);
      }
      const double tflops = step_flops_per_sample * double(B) / (ms[1] * 1e-3) / 1e12;
      fmt::print("{:<6} {:>6} {:>12.3f} {:>12.3f} {:>10.1f} {:>7.1f}%\n", pname, B, ms[0], ms[1], tflops,
                 100 * tflops / peak);
      std::string ph;
      for (const auto& [name, t] : phases) ph += fmt::format(" {}={:.3f}", name, t);
      fmt::print("       phases (ms, eager):{}\n", ph);
      res["runs"].push_back({{"precision", pname}, {"batch", B}, {"eager_ms", ms[0]}, {"graph_ms", ms[1]},
                             {"TFLOPs", tflops}, {"phases_ms", phases}});
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
  model::ParamBuffer pb(model::LeakCNNConfig{}, DType::bf16, Device::cuda(0), s);
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
                               v.data<float>(), work.raw(), static_cast<kernels::AdamWState*>(state.raw()),
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
  auto* cmd = app.add_subcommand("step", "LeakCNN-64 training step: per-phase times, graphs on/off, TFLOP/s");
  cmd->add_option("--batch", o.batches, "Batch sizes")->capture_default_str();
  cmd->add_option("--precision", o.precisions, "Precisions (fp32, bf16, fp16)")->capture_default_str();
  cmd->add_option("--steps", o.steps, "Timed steps per configuration")->capture_default_str();
  cmd->callback([] { run_step_bench(o); });
  auto* ad = app.add_subcommand("adamw", "Fused AdamW vs one launch per tensor vs the HBM roofline");
  ad->callback(run_adamw_bench);
}

}  // namespace mf::bench
