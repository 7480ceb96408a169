#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "engine/memory.hpp"
#include "engine/parallel.hpp"
#include "engine/tensor.hpp"
#include "engine/timer.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

TEST_CASE("tensor basics: shape, dtype, numel, bytes, alignment") {
  Tensor t = Tensor::empty({2, 3, 4, 5}, DType::bf16, Device::cpu(), Layout::nhwc);
  CHECK(t.numel() == 120);
  CHECK(t.nbytes() == 240);
  CHECK(t.size(-1) == 5);
  CHECK(t.layout() == Layout::nhwc);
  CHECK(reinterpret_cast<std::uintptr_t>(t.raw()) % kHostAlignment == 0);
  CHECK(t.str() == "bf16[2, 3, 4, 5] nhwc on cpu");
  CHECK_THROWS_WITH_AS(Tensor::empty({2, 3}, DType::f32, Device::cpu(), Layout::nhwc),
                       doctest::Contains("needs a 4-d shape"), Error);
  CHECK_THROWS_WITH_AS((void)t.data<float>(), doctest::Contains("holds bf16 but was read as f32"), Error);
}

TEST_CASE("host copies, reshape and slice share or copy storage as documented") {
  const auto v = testing::random_floats(24, 1);
  Tensor a = Tensor::from_floats(v, {4, 6});
  Tensor b = Tensor::empty({4, 6}, DType::f32);
  b.copy_from(a);
  CHECK(b.to_floats() == v);
  Tensor r = a.reshape({2, 12});
  CHECK(r.raw() == a.raw());
  Tensor s = a.slice(1, 3);
  CHECK(s.shape() == Shape{2, 6});
  CHECK(s.to_floats()[0] == v[6]);
  CHECK_THROWS_WITH_AS(a.reshape({5, 5}), doctest::Contains("cannot reshape [4, 6]"), Error);
  CHECK_THROWS_WITH_AS(b.copy_from(Tensor::empty({4, 6}, DType::f16)), doctest::Contains("does not match"), Error);
  Tensor z = Tensor::zeros({3}, DType::f32);
  CHECK(z.to_floats() == std::vector<float>{0, 0, 0});
  z.fill(2.5f);
  CHECK(z.to_floats() == std::vector<float>{2.5f, 2.5f, 2.5f});
}

TEST_CASE("pinned buffers fall back to aligned host memory without a GPU, and can be reused") {
  PinnedBuffer p(1 << 20);
  REQUIRE(p.data() != nullptr);
  CHECK(p.size() == (1u << 20));
  CHECK(p.pinned() == gpu_available());
  void* first = p.data();
  PinnedBuffer q = std::move(p);
  CHECK(q.data() == first);
  CHECK(p.data() == nullptr);
}

TEST_CASE("EventTimer accumulates named regions on the CPU backend") {
  EventTimer t(Device::cpu());
  for (int i = 0; i < 3; ++i) {
    EventTimer::Scope s(t, "sleep", nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  t.start("other");
  t.stop("other");
  const auto& stats = t.collect();
  REQUIRE(stats.count("sleep") == 1);
  CHECK(stats.at("sleep").count == 3);
  CHECK(stats.at("sleep").total_ms >= 15.0);
  CHECK(stats.at("sleep").total_ms < 1000.0);
  CHECK(stats.at("other").count == 1);
  CHECK_THROWS_WITH_AS(t.stop("never"), doctest::Contains("never started"), Error);
  t.start("twice");
  CHECK_THROWS_WITH_AS(t.start("twice"), doctest::Contains("started twice"), Error);
  t.reset();
  CHECK(t.collect().empty());
}

TEST_CASE("parallel_for covers every index exactly once and propagates exceptions") {
  std::vector<int> hits(100003, 0);
  parallel_for(std::int64_t(hits.size()), [&](std::int64_t b, std::int64_t e) {
    for (auto i = b; i < e; ++i) hits[std::size_t(i)] += 1;
  }, 16);
  CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
  CHECK_THROWS_WITH_AS(parallel_for(1000, [](std::int64_t, std::int64_t) { MF_THROW("boom"); }),
                       doctest::Contains("boom"), Error);
}

TEST_CASE("shape_numel is checked: overflow and negative dimensions are errors, never a wrapped count") {
  // Issue 21: file-declared dimensions [2^32, 2^32] wrapped to 0 ("dataset is empty").
  const Shape huge = {std::int64_t(1) << 32, std::int64_t(1) << 32};
  CHECK_FALSE(checked_numel(huge).has_value());
  CHECK_THROWS_WITH_AS(shape_numel(huge),
                       doctest::Contains("shape [4294967296, 4294967296]: expected non-negative dimensions whose "
                                         "product fits in 64 bits, found a product that overflows"),
                       Error);
  CHECK_FALSE(checked_numel({3, -2}).has_value());
  CHECK_THROWS_WITH_AS(shape_numel({3, -2}), doctest::Contains("found a negative dimension"), Error);
  CHECK(checked_numel({std::int64_t(1) << 40, std::int64_t(1) << 40, 0}) == 0);  // exact, not an overflow
  CHECK(checked_numel({}) == 1);
  CHECK(shape_numel({std::int64_t(1) << 31, std::int64_t(1) << 31}) == std::int64_t(1) << 62);
  CHECK_THROWS_WITH_AS(Tensor::empty({std::int64_t(1) << 62, 8}, DType::f32), doctest::Contains("overflow"), Error);
}

TEST_CASE("run_on_threads runs every index once, joins every thread, and rethrows the first error") {
  std::vector<std::atomic<int>> hits(64);
  run_on_threads(64, [&](int i) { hits[std::size_t(i)] += 1; });
  for (const auto& h : hits) CHECK(h.load() == 1);
  CHECK_THROWS_WITH_AS(run_on_threads(8, [](int i) { if (i == 5) MF_THROW("worker {} failed", i); }),
                       doctest::Contains("worker 5 failed"), Error);
  run_on_threads(0, [](int) { FAIL("not called"); });
}

TEST_CASE("parallel_find_first: the lowest matching index whatever the threads; n when none") {
  for (const int threads : {1, 2}) {
    set_cpu_threads(threads);
    CHECK(parallel_find_first(1000000, [](std::int64_t i) { return i == 999999 || i == 123457 || i == 700000; },
                              1000) == 123457);
    CHECK(parallel_find_first(1000000, [](std::int64_t) { return false; }, 1000) == 1000000);
    CHECK(parallel_find_first(0, [](std::int64_t) { return true; }) == 0);
  }
  set_cpu_threads(0);
}
