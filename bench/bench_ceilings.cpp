// `melforge-bench ceilings`: the machine's measured limits, the roofline every
// other figure is put beside: device-to-device copy GB/s, pinned host-to-device
// GB/s, and a large cuBLAS BF16 GEMM in TFLOP/s.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "bench/bench_common.hpp"
#include "bench/suites.hpp"
#include "engine/device.hpp"
#include "engine/error.hpp"
#include "engine/memory.hpp"

namespace mf::bench {

namespace {
void run_ceilings() {
  if (!gpu_available()) {
    fmt::print("melforge-bench ceilings: no GPU ({}); nothing to measure\n", gpu_info().why_none);
    return;
  }
  cudaStream_t s;
  MF_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  nlohmann::json res;

  const std::size_t bytes = std::size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  MF_CUDA_CHECK(cudaMalloc(&a, bytes));
  MF_CUDA_CHECK(cudaMalloc(&b, bytes));
  const double d2d_ms = time_cuda_ms([&] { MF_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s)); }, s, 2, 10, false);
  const double d2d_gbs = 2.0 * bytes / (d2d_ms * 1e-3) / 1e9;  // read + write
  res["d2d_copy_GBps"] = d2d_gbs;

  const std::size_t hbytes = std::size_t(256) << 20;
  PinnedBuffer host(hbytes);
  const double h2d_ms = time_cuda_ms([&] { MF_CUDA_CHECK(cudaMemcpyAsync(a, host.data(), hbytes, cudaMemcpyHostToDevice, s)); }, s, 2, 10, false);
  const double h2d_gbs = hbytes / (h2d_ms * 1e-3) / 1e9;
  res["pinned_h2d_GBps"] = h2d_gbs;

  cublasHandle_t h;
  MF_CUBLAS_CHECK(cublasCreate(&h));
  MF_CUBLAS_CHECK(cublasSetStream(h, s));
  const int n = 8192;
  const float alpha = 1.f, beta = 0.f;
  // a and b hold >= 3 * n * n * 2 bytes together: A and B in a, C in b.
  auto gemm = [&] {
    MF_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n,
                                 static_cast<char*>(a) + std::size_t(n) * n * 2, CUDA_R_16BF, n, &beta, b,
                                 CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  MF_CUDA_CHECK(cudaMemsetAsync(a, 0, bytes, s));
  const double gemm_ms = time_cuda_ms(gemm, s, 3, 10, false);
  const double tflops = 2.0 * n * double(n) * n / (gemm_ms * 1e-3) / 1e12;
  res["bf16_gemm_TFLOPs"] = tflops;
  MF_CUBLAS_CHECK(cublasDestroy(h));
  MF_CUDA_CHECK(cudaFree(a));
  MF_CUDA_CHECK(cudaFree(b));
  MF_CUDA_CHECK(cudaStreamDestroy(s));

  fmt::print("{:<28} {:>10}\n", "ceiling", "value");
  fmt::print("{:<28} {:>10.1f} GB/s\n", "device-to-device copy", d2d_gbs);
  fmt::print("{:<28} {:>10.1f} GB/s\n", "pinned host-to-device", h2d_gbs);
  fmt::print("{:<28} {:>10.1f} TFLOP/s\n", "cuBLAS BF16 GEMM 8192^3", tflops);
  if (!common().no_write) fmt::print("wrote {}\n", write_results(common().out_dir, "ceilings", res));
}
}  // namespace

void register_ceilings(CLI::App& app) {
  auto* cmd = app.add_subcommand("ceilings", "Measure copy bandwidths and BF16 GEMM peak (the roofline)");
  cmd->callback(run_ceilings);
}

}  // namespace mf::bench
