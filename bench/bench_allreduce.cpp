// melforge-bench allreduce: the collectives of data-parallel training
// (dist/world.hpp) across the processes of an MPI job, 4 KB to 256 MB, beside
// this machine's memory copy bandwidth. Run it under the launcher:
//   mpirun -np 2 build/bench/melforge-bench allreduce
// Bandwidths as nccl-tests define them (docs/benchmarks.md): for an
// all-reduce of S bytes taking t, algbw = S / t and busbw = algbw 2(N-1)/N;
// for the all-gather of the ordered mode (each rank S bytes, N S in all),
// algbw = N S / t and busbw = algbw (N-1)/N. Each result is checked (every
// rank's contribution is known) before it is timed. The NCCL path (GPUs)
// follows with the NCCL reduction itself.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <span>
#include <vector>

#include "bench/bench_common.hpp"
#include "bench/suites.hpp"
#include "dist/world.hpp"
#include "engine/error.hpp"

namespace mf::bench {
namespace {

struct AllreduceOptions {
  std::int64_t min_bytes = 4 << 10, max_bytes = 256 << 20;
  int repeats = 10;
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

void run_allreduce_bench(const AllreduceOptions& o) {
  const dist::World& w = dist::World::get();
  if (w.is_root())
    fmt::print("allreduce: {} process(es), {}\n{:>12} {:>12} {:>10} {:>10} {:>12} {:>10} {:>10} {:>10}\n", w.size(),
               w.engine(), "bytes", "allreduce us", "algbw", "busbw", "allgather us", "algbw", "busbw",
               "memcpy");
  nlohmann::json rows = nlohmann::json::array();
  for (std::int64_t b = o.min_bytes; b <= o.max_bytes; b *= 4) {
    const nlohmann::json r = bench_size(w, b, o.repeats);
    rows.push_back(r);
    if (w.is_root())
      fmt::print("{:>12} {:>12.1f} {:>10.2f} {:>10.2f} {:>12.1f} {:>10.2f} {:>10.2f} {:>10.2f}  GB/s\n", b,
                 r["allreduce_us"].get<double>(), r["allreduce_algbw_GBps"].get<double>(),
                 r["allreduce_busbw_GBps"].get<double>(), r["allgather_us"].get<double>(),
                 r["allgather_algbw_GBps"].get<double>(), r["allgather_busbw_GBps"].get<double>(),
                 r["memcpy_GBps"].get<double>());
  }
  if (w.is_root() && !common().no_write) {
    const nlohmann::json res = {{"engine", w.engine()}, {"world_size", w.size()}, {"sizes", rows}};
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
  cmd->callback([] { run_allreduce_bench(o); });
}

}  // namespace mf::bench
