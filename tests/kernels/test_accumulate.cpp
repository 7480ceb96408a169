// accumulate (dst += src, f32; kernels/adamw.hpp): the gradient accumulation of
// micro-batches. CPU twin: each element is one f32 addition, so the result
// equals the f32 sum computed here bit for bit; src is left unchanged; shape
// and dtype mismatches are errors naming the op. The CUDA kernel against this
// twin: test_accumulate_gpu.cpp.
#include <doctest/doctest.h>

#include <vector>

#include "kernels/ops.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

TEST_CASE("accumulate adds src to dst elementwise in f32, any length") {
  for (std::int64_t n : {1, 7, 1000, 100003}) {
    const auto a = testing::random_floats(std::size_t(n), 40, -3.f, 3.f);
    const auto b = testing::random_floats(std::size_t(n), 41, -3.f, 3.f);
    const Tensor src = Tensor::from_floats(a, {n});
    Tensor dst = Tensor::from_floats(b, {n});
    ops::accumulate(src, dst);
    std::vector<float> want(a.size());
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = b[i] + a[i];
    CHECK(dst.to_floats() == want);
    CHECK(src.to_floats() == a);
    // Twice: dst keeps what it held (accumulation, not assignment).
    ops::accumulate(src, dst);
    for (std::size_t i = 0; i < want.size(); ++i) want[i] += a[i];
    CHECK(dst.to_floats() == want);
  }
}

TEST_CASE("accumulate rejects mismatched shapes and non-f32 tensors with the op's name") {
  const Tensor src = Tensor::zeros({10}, DType::f32);
  Tensor shorter = Tensor::zeros({9}, DType::f32), half = Tensor::zeros({10}, DType::f16);
  CHECK_THROWS_WITH_AS(ops::accumulate(src, shorter), doctest::Contains("accumulate: dst must have shape"), Error);
  CHECK_THROWS_WITH_AS(ops::accumulate(src, half), doctest::Contains("accumulate"), Error);
  CHECK_THROWS_WITH_AS(ops::accumulate(Tensor::zeros({10}, DType::bf16), half), doctest::Contains("accumulate"), Error);
}
