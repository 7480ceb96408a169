// Stream and Event: thin owning wrappers. On the CPU backend a Stream is a
// null handle and work runs synchronously on the calling thread.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "engine/device.hpp"

namespace mf {

class Stream {
 public:
  Stream() = default;  // the CPU "stream"
  // A new non-blocking stream on `device` (named for Nsight when `name` is given).
  // For the CPU device this is the null stream.
  explicit Stream(Device device, const std::string& name = {}, int priority = 0);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& o) noexcept;
  Stream& operator=(Stream&& o) noexcept;

  cudaStream_t handle() const { return stream_; }
  operator cudaStream_t() const { return stream_; }
  Device device() const { return device_; }
  void synchronize() const;

 private:
  Device device_ = Device::cpu();
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  Event() = default;
  // timing=false gives the cheaper event used only for ordering streams.
  explicit Event(Device device, bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;

  void record(const Stream& s);
  void record(cudaStream_t s);
  // Makes `s` wait for this event (on the device; the host does not block).
  void wait_on(cudaStream_t s) const;
  void synchronize() const;
  bool ready() const;
  // Milliseconds between two recorded timing events (synchronizes on `end`).
  static float elapsed_ms(const Event& start, const Event& end);
  cudaEvent_t handle() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace mf
