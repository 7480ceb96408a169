#include "tools/version_report.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <hdf5.h>

#include <cstddef>
#include <string_view>

#include "audio/library_versions.hpp"
#include "engine/device.hpp"
#include "tools/build_info.hpp"

namespace mf::cli {
namespace {

std::string cuda_archs() {
  if (!built_with_cuda()) return "none: built without CUDA (MELFORGE_CUDA=OFF, or no CUDA toolkit when configured)";
  if (build_info::cuda_emulated())
    return "none: the CUDA code runs on the CPU emulator of CUDA (MELFORGE_CUDA_EMU, for tests only)";
  return fmt::format("{} (compiled; set CUDAARCHS or -DCMAKE_CUDA_ARCHITECTURES to build others)",
                     build_info::cuda_architectures());
}

// Why there is no GPU is gpu_info()'s reason (engine/device.hpp, no_gpu_reason).
std::string cuda() {
  if (!built_with_cuda()) return gpu_info().why_none;  // "built without CUDA: the CPU backend only (...)"
  const CudaVersions v = cuda_versions();
  const std::string versions = fmt::format("runtime {}, driver {}", cuda_version_string(v.runtime),
                                           v.driver == 0 ? "none" : cuda_version_string(v.driver));
  if (build_info::cuda_emulated()) return versions + " (both the CPU emulator's)";
  const GpuInfo& g = gpu_info();
  if (g.count == 0) return fmt::format("{}; {}: the CPU backend is used", versions, g.why_none);
  return versions;
}

// melforge links no cuDNN: the one the dynamic loader finds (LD_LIBRARY_PATH,
// the ld.so cache) is asked for its version, then unloaded.
std::string cudnn() {
  constexpr std::string_view kOptional = "optional; only melforge-bench uses it";
  if (!built_with_cuda()) return "not used (built without CUDA, no melforge-bench)";
  for (const char* soname : {"libcudnn.so.9", "libcudnn.so"}) {
    void* lib = dlopen(soname, RTLD_LAZY | RTLD_LOCAL);
    if (lib == nullptr) continue;
    std::string found;
    if (void* f = dlsym(lib, "cudnnGetVersion")) {
      // 9.x: 10000 * major + 100 * minor + patch; 8.x and before: 1000 * major + 100 * minor + patch.
      const std::size_t v = reinterpret_cast<std::size_t (*)()>(f)();
      const std::size_t major = v >= 90000 ? v / 10000 : v / 1000;
      const std::size_t minor = v >= 90000 ? v % 10000 / 100 : v % 1000 / 100;
      found = fmt::format("{}.{}.{} ({}; {})", major, minor, v % 100, soname, kOptional);
    }
    dlclose(lib);
    if (!found.empty()) return found;
  }
  return fmt::format("not found ({})", kOptional);
}

std::string hdf5() {
  unsigned major = 0, minor = 0, release = 0;
  if (H5get_libversion(&major, &minor, &release) < 0) return "unknown";
  return fmt::format("{}.{}.{}", major, minor, release);
}

}  // namespace

std::string version_line() { return fmt::format("melforge {}", build_info::version()); }

std::string version_report() {
  const std::string_view type = build_info::build_type();
  std::string out = version_line();
  const auto line = [&out](std::string_view label, std::string_view value) {
    out += fmt::format("\n{:<13}{}", label, value);
  };
  line("commit:", build_info::commit());
  line("build type:", type.empty() ? "none" : type);
  line("cuda archs:", cuda_archs());
  line("cuda:", cuda());
  line("cudnn:", cudnn());
  line("hdf5:", hdf5());
  line("sndfile:", audio::sndfile_version());
  line("fftw:", audio::fftw_version());
  line("soxr:", audio::soxr_version());
  return out;
}

}  // namespace mf::cli
