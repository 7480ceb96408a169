// Devices: the CPU backend or one CUDA GPU. Every binary must run on a machine
// without a GPU, so the run-time query never throws for "no driver" or "no
// device": it reports zero GPUs and says why.
#pragma once

#include <string>
#include <string_view>

namespace mf {

struct Device {
  enum class Kind : unsigned char { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;

  static constexpr Device cpu() { return {Kind::cpu, 0}; }
  static constexpr Device cuda(int i = 0) { return {Kind::cuda, i}; }
  constexpr bool is_cpu() const { return kind == Kind::cpu; }
  constexpr bool is_cuda() const { return kind == Kind::cuda; }
  friend constexpr bool operator==(const Device&, const Device&) = default;
  std::string str() const;  // "cpu" or "cuda:N"
};

// Parses "cpu", "cuda", "cuda:N", "gpu" and "auto" (the first GPU when one is
// present, else the CPU). Throws mf::Error for anything else, or for a GPU
// that is not there.
Device parse_device(std::string_view spec);

struct GpuInfo {
  int count = 0;           // 0 when there is no usable GPU
  std::string why_none;    // why, in a user's words, when count == 0 (no_gpu_reason)
};

// Why the CUDA runtime offers no GPU, in a user's words: "no NVIDIA driver
// found" (driver_version 0), a driver too old for the runtime (with both
// versions and what to do), "no NVIDIA GPU found", else the runtime's error
// name and text. status: what cudaGetDeviceCount returned (a cudaError_t);
// versions as CUDA encodes them (1000 * major + 10 * minor).
std::string no_gpu_reason(int status, int driver_version, int runtime_version);

// Cached after the first call; never throws. In the CPU-only build
// (MELFORGE_CUDA=OFF) count is 0 and why_none says the build has no CUDA and
// how to get the GPU build.
const GpuInfo& gpu_info();
// False in the CPU-only build: melforge was built without CUDA, the CPU backend only.
bool built_with_cuda();
inline int cuda_device_count() { return gpu_info().count; }
inline bool gpu_available() { return gpu_info().count > 0; }

// The CUDA versions this process runs with, encoded as CUDA does (1000 * major
// + 10 * minor): the CUDA runtime linked, and the newest CUDA the installed
// NVIDIA driver supports, 0 when no driver is installed. Never throws.
struct CudaVersions {
  int runtime = 0;
  int driver = 0;
};
CudaVersions cuda_versions();
// A version in CUDA's encoding as "major.minor", e.g. 13000 -> "13.0".
std::string cuda_version_string(int version);

struct DeviceProperties {
  std::string name;
  int sm_major = 0, sm_minor = 0, sm_count = 0;
  std::size_t total_memory = 0;
  double memory_clock_khz = 0, memory_bus_bits = 0;
};
DeviceProperties device_properties(int index);

// Makes `d` the current CUDA device of this thread (no-op for the CPU).
void set_current(Device d);

}  // namespace mf
