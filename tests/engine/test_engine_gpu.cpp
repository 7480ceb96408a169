// GPU suite of the engine: runs only where a GPU is usable (else ctest shows it
// skipped). Copies, the stream-ordered pool's reuse and event timing (the cast
// kernel against its CPU twin: tests/kernels/test_cast_gpu.cpp).
#include <cuda_runtime.h>
#include <doctest/doctest.h>

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
