// System monitor: GPU utilization and memory through NVML, loaded at run time
// (dlopen of libnvidia-ml.so.1: no build dependency; absent driver -> the GPU
// fields are simply unavailable), and this process's CPU use and resident
// memory from /proc/self.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace mf::train {

struct SystemSample {
  bool gpu_available = false;
  double gpu_util_pct = 0;          // NVML's sampled kernel-busy percentage
  std::uint64_t gpu_mem_used = 0, gpu_mem_total = 0;
  double cpu_pct = 0;               // process CPU time / wall time since the previous sample (100 = one core)
  std::uint64_t rss_bytes = 0, peak_rss_bytes = 0;
};

class SystemMonitor {
 public:
  // gpu_index: the CUDA device to watch, -1 for none.
  explicit SystemMonitor(int gpu_index = -1);
  ~SystemMonitor();
  SystemMonitor(const SystemMonitor&) = delete;
  SystemMonitor& operator=(const SystemMonitor&) = delete;

  SystemSample sample();
  bool nvml_loaded() const { return nvml_ != nullptr; }
  const std::string& nvml_status() const { return nvml_status_; }  // why NVML is not used, when it is not

 private:
  void* lib_ = nullptr;
  struct Nvml;
  Nvml* nvml_ = nullptr;
  std::string nvml_status_;
  double last_cpu_s_ = 0;
  std::chrono::steady_clock::time_point last_wall_;
};

// Process CPU time (user + system), seconds, from /proc/self/stat.
double process_cpu_seconds();
// VmRSS and VmHWM from /proc/self/status (bytes; 0 when unreadable).
std::uint64_t process_rss_bytes();
std::uint64_t process_peak_rss_bytes();

}  // namespace mf::train
