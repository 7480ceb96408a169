// EventTimer: times named regions of work queued on streams, accumulating per
// name, without synchronizing every step. On a GPU each region is a pair of
// CUDA events from a reused pool; `collect()` waits once for the pending pairs
// and folds them into the totals. On the CPU backend (work is synchronous) a
// steady clock measures the region directly.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/device.hpp"

namespace mf {

struct TimerStat {
  double total_ms = 0;
  std::int64_t count = 0;
  double mean_ms() const { return count ? total_ms / double(count) : 0.0; }
};

class EventTimer {
 public:
  explicit EventTimer(Device device = Device::cpu());
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  void start(std::string_view name, cudaStream_t stream = nullptr);
  void stop(std::string_view name, cudaStream_t stream = nullptr);

  // Folds every finished region into the totals (blocks until pending GPU
  // regions have run) and returns them.
  const std::map<std::string, TimerStat, std::less<>>& collect();
  void reset();
  Device device() const { return device_; }

  class Scope {
   public:
    Scope(EventTimer& t, std::string_view name, cudaStream_t stream)
        : t_(t), name_(name), stream_(stream) { t_.start(name_, stream_); }
    ~Scope() { t_.stop(name_, stream_); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
   private:
    EventTimer& t_;
    std::string name_;
    cudaStream_t stream_;
  };

 private:
  struct Open {
    cudaEvent_t start = nullptr;
    std::chrono::steady_clock::time_point t0;
  };
  struct Pending {
    std::string name;
    cudaEvent_t start, stop;
  };
  cudaEvent_t acquire();

  Device device_;
  std::map<std::string, Open, std::less<>> open_;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> pool_;
  std::vector<cudaEvent_t> all_;
  std::map<std::string, TimerStat, std::less<>> totals_;
};

}  // namespace mf
