#include "engine/device.hpp"

#include <cuda_runtime.h>

#include <charconv>

#include "engine/cuda_entry.hpp"
#include "engine/error.hpp"

namespace mf {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index);
}

std::string cuda_version_string(int version) { return fmt::format("{}.{}", version / 1000, version % 1000 / 10); }

std::string no_gpu_reason(int status, int driver_version, int runtime_version) {
  const auto st = static_cast<cudaError_t>(status);
  if (driver_version == 0) return "no NVIDIA driver found";
  if (st == cudaErrorInsufficientDriver)
    return fmt::format("the NVIDIA driver supports CUDA up to {}, older than the CUDA {} runtime melforge was "
                       "built with: update the driver",
                       cuda_version_string(driver_version), cuda_version_string(runtime_version));
  if (st == cudaSuccess || st == cudaErrorNoDevice) return "no NVIDIA GPU found";
  return fmt::format("{} ({})", cudaGetErrorName(st), cudaGetErrorString(st));
}

#ifdef MELFORGE_NO_CUDA
namespace {
constexpr const char* kNoCuda =
    "built without CUDA: the CPU backend only (for the GPU, rebuild melforge on a machine with the CUDA toolkit "
    "12.0 or newer, nvcc on PATH: README.md, \"Quick start\")";
}  // namespace

bool built_with_cuda() { return false; }

namespace detail {
void throw_no_cuda() { MF_THROW("melforge was {}", kNoCuda); }  // engine/cuda_entry.hpp
}  // namespace detail
#else
bool built_with_cuda() { return true; }
#endif

const GpuInfo& gpu_info() {
  static const GpuInfo info = [] {
    GpuInfo g;
#ifdef MELFORGE_NO_CUDA
    g.why_none = kNoCuda;
#else
    int n = 0;
    const cudaError_t st = cudaGetDeviceCount(&n);
    (void)cudaGetLastError();  // clear the sticky-free error state
    if (st == cudaSuccess && n > 0) {
      g.count = n;
      return g;
    }
    const CudaVersions v = cuda_versions();
    g.why_none = no_gpu_reason(st, v.driver, v.runtime);
#endif
    return g;
  }();
  return info;
}

CudaVersions cuda_versions() {
  CudaVersions v;
  if (cudaRuntimeGetVersion(&v.runtime) != cudaSuccess) v.runtime = 0;
  if (cudaDriverGetVersion(&v.driver) != cudaSuccess) v.driver = 0;
  (void)cudaGetLastError();  // a failed query leaves no error for a later check to find
  return v;
}

Device parse_device(std::string_view spec) {
  if (spec == "cpu") return Device::cpu();
  if (spec == "auto") return gpu_available() ? Device::cuda(0) : Device::cpu();
  int index = 0;
  if (spec == "cuda" || spec == "gpu") {
    index = 0;
  } else if (spec.starts_with("cuda:")) {
    auto digits = spec.substr(5);
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    MF_CHECK(ec == std::errc() && p == digits.data() + digits.size() && index >= 0,
             "invalid device '{}': expected cpu, cuda, cuda:N or auto", spec);
  } else {
    MF_THROW("invalid device '{}': expected cpu, cuda, cuda:N or auto", spec);
  }
  const GpuInfo& g = gpu_info();
  MF_CHECK(g.count > 0, "device '{}' requested but no GPU is usable: {}", spec, g.why_none);
  MF_CHECK(index < g.count, "device '{}' requested but only {} GPU(s) present", spec, g.count);
  return Device::cuda(index);
}

DeviceProperties device_properties(int index) {
  cudaDeviceProp p{};
  MF_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  DeviceProperties d;
  d.name = p.name;
  d.sm_major = p.major;
  d.sm_minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  d.total_memory = p.totalGlobalMem;
  int clock = 0, bus = 0;
  (void)cudaDeviceGetAttribute(&clock, cudaDevAttrMemoryClockRate, index);
  (void)cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, index);
  d.memory_clock_khz = clock;
  d.memory_bus_bits = bus;
  return d;
}

void set_current(Device d) {
  if (d.is_cuda()) MF_CUDA_CHECK(cudaSetDevice(d.index));
}

}  // namespace mf
