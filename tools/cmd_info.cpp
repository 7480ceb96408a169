// `melforge info`: what melforge sees on this machine.
#include <fmt/format.h>

#include "engine/cpu_kernels.hpp"
#include "engine/device.hpp"
#include "engine/parallel.hpp"
#include "tools/commands.hpp"
#include "tools/version_report.hpp"

namespace mf::cli {

void register_info(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Show the GPUs (or why there are none) and CPU threads");
  cmd->callback([] {
    fmt::print("{}\n", version_line());
    fmt::print("cpu threads: {}\n", cpu_threads());
    fmt::print("cpu kernels: {} (MELFORGE_CPU_KERNELS: auto, twin, avx2 or avx512; this CPU: AVX-512 {}, AVX2+FMA {})\n",
               cpu_kernels_name(active_cpu_kernels()), cpu_has_avx512() ? "yes" : "no",
               cpu_has_avx2_fma() ? "yes" : "no");
    const GpuInfo& g = gpu_info();
    if (g.count == 0) {
      fmt::print("gpus: none: {}; the CPU backend is used\n", g.why_none);
      return;
    }
    for (int i = 0; i < g.count; ++i) {
      const DeviceProperties p = device_properties(i);
      fmt::print("cuda:{}: {} (sm_{}{}, {} SMs, {:.1f} GiB)\n", i, p.name, p.sm_major, p.sm_minor,
                 p.sm_count, p.total_memory / 1073741824.0);
    }
  });
}

}  // namespace mf::cli
