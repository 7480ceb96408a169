#include "train/sysmon.hpp"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace mf::train {

// The few NVML declarations melforge needs (types and prototypes as in NVML's
// public API; nvml.h is not required at build time).
namespace {
using nvmlReturn_t = int;
constexpr nvmlReturn_t kNvmlSuccess = 0;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
}  // namespace

struct SystemMonitor::Nvml {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  nvmlReturn_t (*handle_by_index)(unsigned int, nvmlDevice_t*);
  nvmlReturn_t (*handle_by_pci)(const char*, nvmlDevice_t*);  // optional
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*);
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*);
  nvmlDevice_t device = nullptr;
};

SystemMonitor::SystemMonitor(int gpu_index) {
  last_cpu_s_ = process_cpu_seconds();
  last_wall_ = std::chrono::steady_clock::now();
  if (gpu_index < 0) {
    nvml_status_ = "no GPU in use";
    return;
  }
  lib_ = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib_) {
    nvml_status_ = "libnvidia-ml.so.1 not found";
    return;
  }
  auto n = new Nvml{};
  auto sym = [&](const char* name) { return ::dlsym(lib_, name); };
  // NVML numbers devices by PCI bus order over all GPUs; a CUDA index counts
  // only the devices CUDA_VISIBLE_DEVICES leaves, fastest first unless
  // CUDA_DEVICE_ORDER=PCI_BUS_ID. The PCI bus id names the same GPU in both;
  // the index is the fallback when it cannot be had.
  auto find_device = [&] {
    char bus[64] = {0};
    if (n->handle_by_pci && cudaDeviceGetPCIBusId(bus, int(sizeof(bus)), gpu_index) == cudaSuccess)
      return n->handle_by_pci(bus, &n->device) == kNvmlSuccess;
    (void)cudaGetLastError();  // clear a failure of the lookup above
    return n->handle_by_index(unsigned(gpu_index), &n->device) == kNvmlSuccess;
  };
  n->init = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlInit_v2"));
  n->shutdown = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlShutdown"));
  n->handle_by_index = reinterpret_cast<nvmlReturn_t (*)(unsigned int, nvmlDevice_t*)>(sym("nvmlDeviceGetHandleByIndex_v2"));
  n->handle_by_pci = reinterpret_cast<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
  n->utilization = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*)>(sym("nvmlDeviceGetUtilizationRates"));
  n->memory = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>(sym("nvmlDeviceGetMemoryInfo"));
  if (!n->init || !n->shutdown || !n->handle_by_index || !n->utilization || !n->memory) {
    nvml_status_ = "libnvidia-ml.so.1 lacks the expected functions";
  } else if (n->init() != kNvmlSuccess) {
    nvml_status_ = "nvmlInit failed";
    n->shutdown = nullptr;
  } else if (!find_device()) {
    nvml_status_ = "no NVML device matches the CUDA device";
  } else {
    nvml_ = n;
    return;
  }
  if (n->shutdown) n->shutdown();
  delete n;
  ::dlclose(lib_);
  lib_ = nullptr;
}

SystemMonitor::~SystemMonitor() {
  if (nvml_) {
    nvml_->shutdown();
    delete nvml_;
  }
  if (lib_) ::dlclose(lib_);
}

SystemSample SystemMonitor::sample() {
  SystemSample s;
  if (nvml_) {
    nvmlUtilization_t u{};
    nvmlMemory_t m{};
    if (nvml_->utilization(nvml_->device, &u) == kNvmlSuccess && nvml_->memory(nvml_->device, &m) == kNvmlSuccess) {
      s.gpu_available = true;
      s.gpu_util_pct = u.gpu;
      s.gpu_mem_used = m.used;
      s.gpu_mem_total = m.total;
    }
  }
  const double cpu = process_cpu_seconds();
  const auto now = std::chrono::steady_clock::now();
  const double wall = std::chrono::duration<double>(now - last_wall_).count();
  if (wall > 0) s.cpu_pct = 100.0 * (cpu - last_cpu_s_) / wall;
  last_cpu_s_ = cpu;
  last_wall_ = now;
  s.rss_bytes = process_rss_bytes();
  s.peak_rss_bytes = process_peak_rss_bytes();
  return s;
}

double process_cpu_seconds() {
  std::ifstream f("/proc/self/stat");
  std::string line;
  if (!std::getline(f, line)) return 0;
  // Field 2 (comm) may hold spaces: parse after its closing parenthesis.
  const auto rp = line.rfind(')');
  if (rp == std::string::npos) return 0;
  std::istringstream is(line.substr(rp + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  // After comm: state(3) ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime(14) stime(15).
  for (int i = 3; i <= 15 && (is >> field); ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  const long hz = ::sysconf(_SC_CLK_TCK);
  return hz > 0 ? double(utime + stime) / double(hz) : 0.0;
}

namespace {
std::uint64_t status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(f, line))
    if (line.rfind(k, 0) == 0) {
      std::istringstream is(line.substr(k.size()));
      std::uint64_t kb = 0;
      is >> kb;
      return kb * 1024;
    }
  return 0;
}
}  // namespace

std::uint64_t process_rss_bytes() { return status_kb("VmRSS"); }
std::uint64_t process_peak_rss_bytes() { return status_kb("VmHWM"); }

}  // namespace mf::train
