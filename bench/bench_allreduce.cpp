// melforge-bench allreduce: the collectives of data-parallel training
// (dist/world.hpp) across the processes of an MPI job, 4 KB to 256 MB, beside
// this machine's memory copy bandwidth. Run it under the launcher:
//   mpirun -np 2 build/bench/melforge-bench allreduce
// Bandwidths as nccl-tests define them (docs/benchmarks.md): for an
// all-reduce of S bytes taking t, algbw = S / t and busbw = algbw 2(N-1)/N;
// for the all-gather of the ordered mode (each rank S bytes, N S in all),
// algbw = N S / t and busbw = algbw (N-1)/N. Each result is checked (every
// rank's contribution is known) before it is timed. With --device cuda the
// buffers live on each rank's GPU and the collectives are the training
// step's (dist::Collectives: NCCL, or MPI through host memory, as
// --transport and the machine allow), beside a device-to-device copy.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <span>
#include <vector>

#include "bench/bench_common.hpp"
#include "bench/suites.hpp"
#include "dist/collectives.hpp"
#include "dist/world.hpp"
#include "engine/device.hpp"
#include "engine/error.hpp"
#include "engine/stream.hpp"
#include "engine/tensor.hpp"

namespace mf::bench {
namespace {

struct AllreduceOptions {
  std::int64_t min_bytes = 4 << 10, max_bytes = 256 << 20;
  int repeats = 10;
  std::string device = "cpu";      // cpu | cuda
  std::string transport = "auto";  // --device cuda: auto | nccl | mpi
};

// Median seconds of `repeats` runs of fn (after one untimed run), the ranks
// started together by a barrier each time.
double time_collective(const dist::World& w, const std::function<void()>& fn, int repeats) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    w.barrier("timing a collective");
    const double t0 = now_s();
    fn();
    t.push_back(now_s() - t0);
  }
  // The slowest rank's time is the collective's: take the maximum over ranks.
  const double mine = median(t);
  const std::vector<double> all = w.allgather(std::span<const double>(&mine, 1), "collecting the times");
  return *std::max_element(all.begin(), all.end());
}

// nccl-tests' algorithm and bus bandwidths of one size's timings.
nlohmann::json bandwidths(double N, std::int64_t bytes, double t_ar, double t_ag, double t_copy) {
  const double ar_alg = double(bytes) / t_ar, ag_alg = N * double(bytes) / t_ag;
  return {{"bytes", bytes},
          {"allreduce_us", 1e6 * t_ar},
          {"allreduce_algbw_GBps", ar_alg / 1e9},
          {"allreduce_busbw_GBps", ar_alg * 2 * (N - 1) / N / 1e9},
          {"allgather_us", 1e6 * t_ag},
          {"allgather_algbw_GBps", ag_alg / 1e9},
          {"allgather_busbw_GBps", ag_alg * (N - 1) / N / 1e9},
          {"memcpy_GBps", double(bytes) / t_copy / 1e9}};
}

nlohmann::json bench_size(const dist::World& w, std::int64_t bytes, int repeats) {
  const std::size_t n = std::size_t(bytes) / sizeof(float);
  const double N = w.size();
  // Checked first: rank r contributes r + 1 everywhere, so the sum is N (N + 1) / 2.
  std::vector<float> v(n, float(w.rank() + 1));
  w.allreduce_sum(v, "checking the all-reduce");
  MF_CHECK(v.front() == float(N * (N + 1) / 2) && v.back() == v.front(), "allreduce: rank {} got {}, expected {}",
           w.rank(), v.front(), N * (N + 1) / 2);
  const std::vector<float> g = w.allgather(v, "checking the all-gather");
  MF_CHECK(g.size() == n * std::size_t(w.size()), "allgather: {} values, expected {}", g.size(), n * w.size());
  const double t_ar = time_collective(w, [&] { w.allreduce_sum(v, "timing the all-reduce"); }, repeats);
  const double t_ag = time_collective(w, [&] { (void)w.allgather(v, "timing the all-gather"); }, repeats);
  std::vector<float> dst(n);
  const double t_copy = time_collective(w, [&] { std::memcpy(dst.data(), v.data(), n * sizeof(float)); }, repeats);
  return bandwidths(N, bytes, t_ar, t_ag, t_copy);
}

// The training step's collectives on device tensors (dist::Collectives).
nlohmann::json bench_size_device(const dist::World& w, dist::Collectives& c, Device dev, cudaStream_t s,
                                 std::int64_t bytes, int repeats) {
  const std::int64_t n = bytes / std::int64_t(sizeof(float));
  const double N = w.size();
  Tensor v = Tensor::from_floats(std::vector<float>(std::size_t(n), float(w.rank() + 1)), {n}).to(dev, s);
  c.allreduce_sum(v, s, "checking the all-reduce");
  const std::vector<float> got = v.to_floats();
  MF_CHECK(got.front() == float(N * (N + 1) / 2) && got.back() == got.front(),
           "allreduce: rank {} got {}, expected {}", w.rank(), got.front(), N * (N + 1) / 2);
  Tensor all = Tensor::empty({n * w.size()}, DType::f32, dev, Layout::plain, s);
  c.allgather(v, all, s, "checking the all-gather");
  const std::vector<float> g = all.to_floats();
  MF_CHECK(g.front() == got.front() && g.back() == got.front(), "allgather: rank {} got {} .. {}, expected {}",
           w.rank(), g.front(), g.back(), got.front());
  const double t_ar = time_collective(w, [&] { c.allreduce_sum(v, s, "timing the all-reduce"); }, repeats);
  const double t_ag = time_collective(w, [&] { c.allgather(v, all, s, "timing the all-gather"); }, repeats);
  Tensor dst = Tensor::empty({n}, DType::f32, dev, Layout::plain, s);
  const double t_copy = time_collective(w,
                                        [&] {
                                          dst.copy_from(v, s);
                                          MF_CUDA_CHECK(cudaStreamSynchronize(s));
                                        },
                                        repeats);
  return bandwidths(N, bytes, t_ar, t_ag, t_copy);
}

void run_allreduce_bench(const AllreduceOptions& o) {
  const dist::World& w = dist::World::get();
  MF_CHECK(o.device == "cpu" || o.device == "cuda", "allreduce --device: expected cpu or cuda, found {}", o.device);
  MF_CHECK(o.transport == "auto" || o.transport == "nccl" || o.transport == "mpi",
           "allreduce --transport: expected auto, nccl or mpi, found {}", o.transport);
  const bool gpu = o.device == "cuda";
  MF_CHECK(!gpu || gpu_available(), "allreduce --device cuda: no GPU: {}", gpu_info().why_none);
  const Device dev = gpu ? Device::cuda(w.local_rank() % cuda_device_count()) : Device::cpu();
  std::unique_ptr<Stream> stream;
  std::unique_ptr<dist::Collectives> coll;
  if (gpu) {
    set_current(dev);
    stream = std::make_unique<Stream>(dev, "allreduce");
    coll = dist::make_collectives(w, dev,
                                  o.transport == "nccl"  ? dist::Transport::nccl
                                  : o.transport == "mpi" ? dist::Transport::mpi
                                                         : dist::Transport::automatic);
  }
  const std::string how = gpu ? fmt::format("{} on {}", coll->describe(), dev.str()) : w.engine();
  if (w.is_root())
    fmt::print("allreduce: {} process(es), {}\n{:>12} {:>12} {:>10} {:>10} {:>12} {:>10} {:>10} {:>10}\n", w.size(),
               how, "bytes", "allreduce us", "algbw", "busbw", "allgather us", "algbw", "busbw",
               gpu ? "d2d copy" : "memcpy");
  nlohmann::json rows = nlohmann::json::array();
  for (std::int64_t b = o.min_bytes; b <= o.max_bytes; b *= 4) {
    const nlohmann::json r = gpu ? bench_size_device(w, *coll, dev, *stream, b, o.repeats) : bench_size(w, b, o.repeats);
    rows.push_back(r);
    if (w.is_root())
      fmt::print("{:>12} {:>12.1f} {:>10.2f} {:>10.2f} {:>12.1f} {:>10.2f} {:>10.2f} {:>10.2f}  GB/s\n", b,
                 r["allreduce_us"].get<double>(), r["allreduce_algbw_GBps"].get<double>(),
                 r["allreduce_busbw_GBps"].get<double>(), r["allgather_us"].get<double>(),
                 r["allgather_algbw_GBps"].get<double>(), r["allgather_busbw_GBps"].get<double>(),
                 r["memcpy_GBps"].get<double>());
  }
  if (w.is_root() && !common().no_write) {
    const nlohmann::json res = {{"engine", w.engine()}, {"world_size", w.size()}, {"device", o.device},
                                {"collectives", how}, {"sizes", rows}};
    fmt::print("wrote {}\n", write_results(common().out_dir, "allreduce", res));
  }
}

}  // namespace

void register_allreduce(CLI::App& app) {
  static AllreduceOptions o;
  auto* cmd = app.add_subcommand("allreduce", "Collectives of data-parallel training (MPI) across the processes "
                                              "of a job (run under mpirun), 4 KB to 256 MB, beside memcpy");
  cmd->add_option("--min-bytes", o.min_bytes, "Smallest message")->capture_default_str();
  cmd->add_option("--max-bytes", o.max_bytes, "Largest message (sizes grow 4x)")->capture_default_str();
  cmd->add_option("--repeats", o.repeats, "Timed repeats per size (median; the slowest rank's)")
      ->capture_default_str();
  cmd->add_option("--device", o.device, "cpu (MPI on host buffers) or cuda (each rank's GPU, the training step's "
                  "collectives)")->capture_default_str();
  cmd->add_option("--transport", o.transport, "--device cuda: auto, nccl or mpi (as dist.transport)")
      ->capture_default_str();
  cmd->callback([] { run_allreduce_bench(o); });
}

}  // namespace mf::bench
