#include "bench/bench_common.hpp"

#include <cuda_runtime.h>
#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "engine/device.hpp"
#include "engine/error.hpp"

namespace mf::bench {

namespace {
std::string git_head() {
  std::array<char, 128> buf{};
  std::string out;
  if (FILE* p = popen("git rev-parse --short=12 HEAD 2>/dev/null", "r")) {
    while (fgets(buf.data(), int(buf.size()), p)) out += buf.data();
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out.empty() ? "unknown" : out;
}
}  // namespace

RunInfo run_info() {
  RunInfo r;
  r.device = gpu_available() ? device_properties(0).name : "cpu (no GPU: " + gpu_info().why_none + ")";
  r.date = fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(std::time(nullptr)));
  r.commit = git_head();
  return r;
}

std::string write_results(const std::string& dir, const std::string& suite,
                          const nlohmann::json& results) {
  const RunInfo info = run_info();
  nlohmann::json j;
  j["suite"] = suite;
  j["device"] = info.device;
  j["date"] = info.date;
  j["commit"] = info.commit;
  j["results"] = results;
  // File name: suite, a short device slug ("NVIDIA_H100_80GB_HBM3", or "cpu"), date.
  std::string dev = gpu_available() ? info.device : std::string("cpu");
  std::replace_if(dev.begin(), dev.end(), [](char c) { return !std::isalnum((unsigned char)c); }, '_');
  std::filesystem::create_directories(dir);
  const std::string path = fmt::format("{}/{}-{}-{}.json", dir, suite, dev.substr(0, 40), info.date.substr(0, 10));
  std::ofstream f(path);
  MF_CHECK(bool(f), "cannot write benchmark results to {}", path);
  f << j.dump(2) << "\n";
  return path;
}

L2Flusher::L2Flusher() {
  int dev = 0, l2 = 0;
  MF_CUDA_CHECK(cudaGetDevice(&dev));
  MF_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  bytes_ = std::size_t(std::max(l2, 1 << 20)) * 2;
  MF_CUDA_CHECK(cudaMalloc(&buf_, bytes_));
}

L2Flusher::~L2Flusher() {
  if (buf_) MF_CUDA_CHECK_PRINT(cudaFree(buf_));
}

void L2Flusher::flush(cudaStream_t stream) { MF_CUDA_CHECK(cudaMemsetAsync(buf_, 0, bytes_, stream)); }

double time_cuda_ms(const std::function<void()>& fn, cudaStream_t stream, int warmup, int reps,
                    bool flush_l2) {
  for (int i = 0; i < warmup; ++i) fn();
  L2Flusher flusher;
  cudaEvent_t a, b;
  MF_CUDA_CHECK(cudaEventCreate(&a));
  MF_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    if (flush_l2) flusher.flush(stream);
    MF_CUDA_CHECK(cudaEventRecord(a, stream));
    fn();
    MF_CUDA_CHECK(cudaEventRecord(b, stream));
    MF_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    MF_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  MF_CUDA_CHECK(cudaEventDestroy(a));
  MF_CUDA_CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace mf::bench
