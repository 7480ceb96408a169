// `melforge smoke`: exercises the engine end to end on the chosen device
// (allocation, host<->device copies, a kernel through the dispatch point,
// event timing) and checks the result against the CPU twin.
#include <fmt/format.h>

#include <cmath>
#include <random>

#include "engine/device.hpp"
#include "engine/stream.hpp"
#include "engine/tensor.hpp"
#include "engine/timer.hpp"
#include "kernels/ops.hpp"
#include "tools/cli_help.hpp"
#include "tools/commands.hpp"

namespace mf::cli {

namespace {
int run_smoke(const std::string& device_spec, std::int64_t n) {
  const Device dev = parse_device(device_spec);
  fmt::print("melforge smoke on {}{}\n", dev.str(),
             gpu_available() ? "" : fmt::format(" (no GPU: {})", gpu_info().why_none));
  Stream stream(dev, "smoke");
  EventTimer timer(dev);

  std::vector<float> values(static_cast<std::size_t>(n));
  std::mt19937 rng(1234);
  std::normal_distribution<float> dist(0.f, 3.f);
  for (float& v : values) v = dist(rng);
  const Tensor host = Tensor::from_floats(values, {n});

  // The device result: f32 -> bf16 -> f32 through the dispatch point.
  timer.start("upload", stream);
  const Tensor x = host.to(dev, stream);
  timer.stop("upload", stream);
  Tensor y = Tensor::empty({n}, DType::bf16, dev, Layout::plain, stream);
  Tensor z = Tensor::empty({n}, DType::f32, dev, Layout::plain, stream);
  for (int rep = 0; rep < 10; ++rep) {
    EventTimer::Scope s(timer, "cast", stream);
    ops::cast(x, y, stream);
    ops::cast(y, z, stream);
  }
  const std::vector<float> got = z.to_floats();

  // The CPU twin's result.
  Tensor yc = Tensor::empty({n}, DType::bf16);
  Tensor zc = Tensor::empty({n}, DType::f32);
  ops::cast(host, yc);
  ops::cast(yc, zc);
  const std::vector<float> want = zc.to_floats();

  std::int64_t mismatches = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i])) ++mismatches;
  for (const auto& [name, st] : timer.collect())
    fmt::print("  {:<8} {:>4} x {:8.3f} ms\n", name, st.count, st.mean_ms());
  fmt::print("  {} elements, {} mismatches against the CPU twin\n", n, mismatches);
  if (mismatches) {
    fmt::print(stderr, "smoke: FAILED\n");
    return 1;
  }
  fmt::print("smoke: OK\n");
  return 0;
}
}  // namespace

void register_smoke(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "smoke", "Exercise the engine on the GPU (or CPU); prints timings and whether it matches the CPU twin");
  static std::string device = "auto";
  static std::int64_t n = 1 << 20;
  cmd->add_option("--device", device, "Where to run")->capture_default_str()->type_name(kDeviceType);
  cmd->add_option("-n,--elements", n, "Elements to push through")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->callback([] {
    if (int rc = run_smoke(device, n); rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace mf::cli
