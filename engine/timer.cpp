#include "engine/timer.hpp"

#include <cuda_runtime.h>

#include "engine/error.hpp"

namespace mf {

EventTimer::EventTimer(Device device) : device_(device) {}

EventTimer::~EventTimer() {
  for (cudaEvent_t e : all_) MF_CUDA_CHECK_PRINT(cudaEventDestroy(e));
}

cudaEvent_t EventTimer::acquire() {
  if (!pool_.empty()) {
    cudaEvent_t e = pool_.back();
    pool_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  set_current(device_);
  MF_CUDA_CHECK(cudaEventCreate(&e));
  all_.push_back(e);
  return e;
}

void EventTimer::start(std::string_view name, cudaStream_t stream) {
  auto [it, inserted] = open_.try_emplace(std::string(name));
  MF_CHECK(inserted, "EventTimer: region '{}' started twice without stop", name);
  if (device_.is_cuda()) {
    it->second.start = acquire();
    MF_CUDA_CHECK(cudaEventRecord(it->second.start, stream));
  } else {
    it->second.t0 = std::chrono::steady_clock::now();
  }
}

void EventTimer::stop(std::string_view name, cudaStream_t stream) {
  auto it = open_.find(name);
  MF_CHECK(it != open_.end(), "EventTimer: region '{}' stopped but never started", name);
  if (device_.is_cuda()) {
    cudaEvent_t stop = acquire();
    MF_CUDA_CHECK(cudaEventRecord(stop, stream));
    pending_.push_back({it->first, it->second.start, stop});
  } else {
    const auto dt = std::chrono::steady_clock::now() - it->second.t0;
    TimerStat& s = totals_[it->first];
    s.total_ms += std::chrono::duration<double, std::milli>(dt).count();
    s.count += 1;
  }
  open_.erase(it);
}

const std::map<std::string, TimerStat, std::less<>>& EventTimer::collect() {
  for (const Pending& p : pending_) {
    MF_CUDA_CHECK(cudaEventSynchronize(p.stop));
    float ms = 0;
    MF_CUDA_CHECK(cudaEventElapsedTime(&ms, p.start, p.stop));
    TimerStat& s = totals_[p.name];
    s.total_ms += ms;
    s.count += 1;
    pool_.push_back(p.start);
    pool_.push_back(p.stop);
  }
  pending_.clear();
  return totals_;
}

void EventTimer::reset() {
  collect();
  totals_.clear();
}

}  // namespace mf
