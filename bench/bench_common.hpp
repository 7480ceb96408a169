// Shared pieces of melforge-bench: results metadata (device, date, commit),
// a JSON results writer under bench/results/, an L2 flush between timed runs,
// and a CUDA-event timing loop.
#pragma once

#include <cuda_runtime_api.h>

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace mf::bench {

struct RunInfo {
  std::string device;  // GPU name, or "cpu (no GPU: ...)"
  std::string date;    // ISO 8601, UTC
  std::string commit;  // git HEAD, or "unknown"
};
RunInfo run_info();

// Writes {"suite":..., "device":..., "date":..., "commit":..., "results":...}
// to DIR/<suite>-<device>-<date>.json and returns the path.
std::string write_results(const std::string& dir, const std::string& suite,
                          const nlohmann::json& results);

// Evicts the L2 cache by writing a buffer larger than it.
class L2Flusher {
 public:
  L2Flusher();
  ~L2Flusher();
  void flush(cudaStream_t stream);
 private:
  void* buf_ = nullptr;
  std::size_t bytes_ = 0;
};

// Seconds on the steady clock (for host-timed loops).
double now_s();
// The median of v (the upper middle for an even count).
double median(std::vector<double> v);

// Median milliseconds of `reps` runs of fn, each after an L2 flush, timed with
// CUDA events on `stream` (after `warmup` untimed runs).
double time_cuda_ms(const std::function<void()>& fn, cudaStream_t stream, int warmup = 3,
                    int reps = 20, bool flush_l2 = true);

}  // namespace mf::bench
