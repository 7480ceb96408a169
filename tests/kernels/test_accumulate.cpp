// accumulate (dst += src, any float dtype; kernels/ops.hpp, the CPU twin in
// kernels/pooling.cpp): the gradient accumulation of micro-batches and the
// residual blocks' gradient sums. CPU twin: each element is the f32 sum of
// the two values rounded once to the dtype, so for f32 it equals the f32 sum
// computed here bit for bit, and for bf16/f16 the f32 sum rounded once; exact
// on small integers; src is left unchanged; the same bits with 1 and 2
// threads; shape and dtype mismatches are errors naming the op. The CUDA
// kernel against this twin: test_accumulate_gpu.cpp.
#include <doctest/doctest.h>

#include <vector>

#include "engine/parallel.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/tensor_bits.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {
constexpr DType kFloatTypes[] = {DType::f32, DType::bf16, DType::f16};
}  // namespace

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

TEST_CASE("accumulate: every dtype, the f32 sum rounded once; exact small integers") {
  const Shape shape{3, 5, 7, 9};
  const std::size_t n = 3 * 5 * 7 * 9;
  for (DType t : kFloatTypes) {
    INFO(dtype_name(t));
    const Tensor src = Tensor::from_floats(testing::random_floats(n, 31), shape, t, Layout::nhwc);
    const Tensor dst0 = Tensor::from_floats(testing::random_floats(n, 32), shape, t, Layout::nhwc);
    Tensor dst = Tensor::empty(shape, t, Device::cpu(), Layout::nhwc);
    dst.copy_from(dst0);
    ops::accumulate(src, dst);
    const auto a = src.to_floats(), b = dst0.to_floats();
    std::vector<float> want(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) want[i] = a[i] + b[i];  // f32, then one rounding to T below
    CHECK(testing::bytes_of(dst) == testing::bytes_of(Tensor::from_floats(want, shape, t, Layout::nhwc)));
    const Tensor si = Tensor::from_floats(testing::random_small_ints(n, 33), shape, t, Layout::nhwc);
    Tensor di = Tensor::from_floats(testing::random_small_ints(n, 34), shape, t, Layout::nhwc);
    const auto ai = si.to_floats(), bi = di.to_floats();
    ops::accumulate(si, di);
    const auto ri = di.to_floats();
    int wrong = 0;
    for (std::size_t i = 0; i < ai.size(); ++i) wrong += ri[i] != ai[i] + bi[i];
    CHECK(wrong == 0);
  }
}

TEST_CASE("accumulate: the CPU twin gives the same bits with 1 and 2 threads") {
  const std::int64_t n = 5 * 16 * 16 * 24;
  const int threads = cpu_threads();
  for (DType t : kFloatTypes) {
    INFO(dtype_name(t));
    const Tensor x = Tensor::from_floats(testing::random_floats(std::size_t(n), 41), {n}, t);
    const Tensor res = Tensor::from_floats(testing::random_floats(std::size_t(n), 42), {n}, t);
    std::vector<std::uint8_t> runs[2];
    for (int k = 0; k < 2; ++k) {
      set_cpu_threads(k + 1);
      Tensor acc = Tensor::empty({n}, t);
      acc.copy_from(res);
      ops::accumulate(x, acc);
      runs[k] = testing::bytes_of(acc);
    }
    set_cpu_threads(threads);
    CHECK(runs[0] == runs[1]);
  }
}

TEST_CASE("accumulate rejects mismatched shapes, dtypes and non-float tensors with the op's name") {
  const Tensor src = Tensor::zeros({10}, DType::f32);
  Tensor shorter = Tensor::zeros({9}, DType::f32), half = Tensor::zeros({10}, DType::f16);
  CHECK_THROWS_WITH_AS(ops::accumulate(src, shorter), doctest::Contains("accumulate: dst must have shape"), Error);
  CHECK_THROWS_WITH_AS(ops::accumulate(src, half), doctest::Contains("accumulate"), Error);
  CHECK_THROWS_WITH_AS(ops::accumulate(Tensor::zeros({10}, DType::bf16), half), doctest::Contains("accumulate"), Error);
  const auto err = [](auto&& f) { return testing::error_of(f); };
  const Tensor x = Tensor::empty({2, 5, 7, 3}, DType::f32, Device::cpu(), Layout::nhwc);
  Tensor small = Tensor::empty({2, 5, 7, 2}, DType::f32, Device::cpu(), Layout::nhwc);
  CHECK(err([&] { ops::accumulate(x, small); }) == "accumulate: dst must have shape [2, 5, 7, 3], got [2, 5, 7, 2]");
  Tensor xbf = Tensor::empty({2, 5, 7, 3}, DType::bf16, Device::cpu(), Layout::nhwc);
  CHECK(err([&] { ops::accumulate(x, xbf); }).find("dst must have the dtype of src") != std::string::npos);
  const Tensor ints = Tensor::zeros({10}, DType::i32);
  Tensor idst = Tensor::zeros({10}, DType::i32);
  CHECK(err([&] { ops::accumulate(ints, idst); }).find("accumulate: src must be f32, bf16 or f16, found i32[10]") !=
        std::string::npos);
}
