#include "engine/stream.hpp"

#include <utility>

#include "engine/error.hpp"
#include "engine/nvtx.hpp"

namespace mf {

Stream::Stream(Device device, const std::string& name, int priority) : device_(device) {
  if (device.is_cpu()) return;
  set_current(device);
  MF_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority));
  if (!name.empty()) nvtx_name_stream(stream_, name.c_str());
}

Stream::~Stream() {
  if (stream_) MF_CUDA_CHECK_PRINT(cudaStreamDestroy(stream_));
}

Stream::Stream(Stream&& o) noexcept
    : device_(o.device_), stream_(std::exchange(o.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (stream_) MF_CUDA_CHECK_PRINT(cudaStreamDestroy(stream_));
    device_ = o.device_;
    stream_ = std::exchange(o.stream_, nullptr);
  }
  return *this;
}

void Stream::synchronize() const {
  if (device_.is_cuda()) MF_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

Event::Event(Device device, bool timing) {
  if (device.is_cpu()) return;
  set_current(device);
  MF_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (event_) MF_CUDA_CHECK_PRINT(cudaEventDestroy(event_));
}

Event::Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (event_) MF_CUDA_CHECK_PRINT(cudaEventDestroy(event_));
    event_ = std::exchange(o.event_, nullptr);
  }
  return *this;
}

void Event::record(const Stream& s) { record(s.handle()); }

void Event::record(cudaStream_t s) {
  if (event_) MF_CUDA_CHECK(cudaEventRecord(event_, s));
}

void Event::wait_on(cudaStream_t s) const {
  if (event_) MF_CUDA_CHECK(cudaStreamWaitEvent(s, event_, 0));
}

void Event::synchronize() const {
  if (event_) MF_CUDA_CHECK(cudaEventSynchronize(event_));
}

bool Event::ready() const {
  if (!event_) return true;
  const cudaError_t st = cudaEventQuery(event_);
  if (st == cudaErrorNotReady) return false;
  MF_CUDA_CHECK(st);
  return true;
}

float Event::elapsed_ms(const Event& start, const Event& end) {
  MF_CHECK(start.event_ && end.event_, "Event::elapsed_ms needs two CUDA timing events");
  end.synchronize();
  float ms = 0;
  MF_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, end.event_));
  return ms;
}

}  // namespace mf
