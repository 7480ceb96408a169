// GPU suite of the engine: runs only where a GPU is usable (else ctest shows it
// skipped). Copies, the stream-ordered pool's reuse and event timing (the cast
// kernel against its CPU twin: tests/kernels/test_cast_gpu.cpp).
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "engine/memory.hpp"
#include "engine/stream.hpp"
#include "engine/tensor.hpp"
#include "engine/timer.hpp"
#include "kernels/ops.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

TEST_CASE("host -> device -> host round trip through pinned and pageable memory") {
  Stream s(Device::cuda(0), "test");
  const auto v = testing::random_floats(1 << 20, 3);
  Tensor h = Tensor::from_floats(v, {1 << 20});
  Tensor d = h.to(Device::cuda(0), s);
  Tensor d2 = Tensor::empty({1 << 20}, DType::f32, Device::cuda(0), Layout::plain, s);
  d2.copy_from(d, s);
  CHECK(d2.to_floats() == v);
  PinnedBuffer pinned(h.nbytes());
  CHECK(pinned.pinned());
  MF_CUDA_CHECK(cudaMemcpyAsync(pinned.data(), d2.raw(), h.nbytes(), cudaMemcpyDeviceToHost, s));
  s.synchronize();
  CHECK(std::memcmp(pinned.data(), h.raw(), h.nbytes()) == 0);
}

TEST_CASE("a copy or fill with no stream waits for the work queued on a non-blocking stream") {
  // Stream is non-blocking, so the legacy default stream does not wait for it:
  // Tensor::to / to_floats / fill_bytes with no stream must wait themselves
  // (found on the first H200 run: readbacks raced the kernels). About 20 ms
  // of queued memsets make a race show every time.
  Stream s(Device::cuda(0), "test");
  const std::int64_t n = testing::emu_scaled(64 << 20, 1 << 20);
  Tensor d = Tensor::empty({n}, DType::u8, Device::cuda(0), Layout::plain, s);
  for (int i = 0; i < 300; ++i) d.fill_bytes(static_cast<unsigned char>(i & 0x3f), s);
  d.fill_bytes(0x5a, s);
  const Tensor h = d.to(Device::cpu());
  const auto* p = static_cast<const std::uint8_t*>(h.raw());
  CHECK(std::all_of(p, p + n, [](std::uint8_t b) { return b == 0x5a; }));
  // And the other way: a stream-less fill is complete before work on `s` reads it.
  Tensor e = Tensor::empty({n}, DType::u8, Device::cuda(0), Layout::plain, s);
  for (int i = 0; i < 300; ++i) e.fill_bytes(0x11, s);
  e.fill_bytes(0x22);
  Tensor f = Tensor::empty({n}, DType::u8, Device::cuda(0), Layout::plain, s);
  f.copy_from(e, s);
  s.synchronize();
  const Tensor hf = f.to(Device::cpu());
  const auto* q = static_cast<const std::uint8_t*>(hf.raw());
  CHECK(std::all_of(q, q + n, [](std::uint8_t b) { return b == 0x22; }));
}

TEST_CASE("the stream-ordered pool reuses freed memory instead of growing") {
  Stream s(Device::cuda(0));
  { Tensor warm = Tensor::empty({64 << 20}, DType::u8, Device::cuda(0), Layout::plain, s); }
  s.synchronize();
  const auto before = device_pool_stats(0).reserved;
  for (int i = 0; i < 20; ++i) {
    Tensor t = Tensor::empty({64 << 20}, DType::u8, Device::cuda(0), Layout::plain, s);
    t.fill_bytes(1, s);
  }
  s.synchronize();
  CHECK(device_pool_stats(0).reserved == before);
}

TEST_CASE("EventTimer measures GPU work without a sync per region") {
  Stream s(Device::cuda(0));
  EventTimer t(Device::cuda(0));
  Tensor a = Tensor::zeros({1 << 24}, DType::f32, Device::cuda(0), Layout::plain, s);
  Tensor b = Tensor::empty({1 << 24}, DType::bf16, Device::cuda(0), Layout::plain, s);
  for (int i = 0; i < 5; ++i) {
    EventTimer::Scope sc(t, "cast", s);
    ops::cast(a, b, s);
  }
  const auto& st = t.collect();
  CHECK(st.at("cast").count == 5);
  CHECK(st.at("cast").total_ms > 0.0);
}
