// Dropout with the counter-based mask (kernels/dropout.hpp), CPU twin: the
// keep rate and the 1/(1-p) scale, one mask for forward and backward, a new
// mask for a new counter and for another micro-batch stream. The CUDA kernel
// against this twin: test_dropout_gpu.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/ops.hpp"

using namespace mf;

TEST_CASE("dropout: mask rate, scaling, same mask forward/backward, new mask per counter") {
  const std::int64_t n = 100000;
  Tensor x = Tensor::from_floats(std::vector<float>(std::size_t(n), 1.f), {n});
  Tensor y = Tensor::empty({n}, DType::f32), y2 = Tensor::empty({n}, DType::f32), dx = Tensor::empty({n}, DType::f32);
  std::int32_t ctr = 3;
  ops::dropout_forward(x, &ctr, 0.3f, 42, 0, y);
  ops::dropout_backward(x, &ctr, 0.3f, 42, 0, dx);
  CHECK(std::memcmp(y.raw(), dx.raw(), y.nbytes()) == 0);
  const auto v = y.to_floats();
  std::int64_t kept = 0;
  for (float f : v) {
    REQUIRE((f == 0.f || f == doctest::Approx(1 / 0.7f)));
    kept += f != 0.f;
  }
  CHECK(std::fabs(double(kept) / n - 0.7) < 0.01);
  ctr = 4;
  ops::dropout_forward(x, &ctr, 0.3f, 42, 0, y2);
  CHECK(std::memcmp(y.raw(), y2.raw(), y.nbytes()) != 0);
  ops::dropout_forward(x, &ctr, 0.3f, 42, 1, y2);  // another micro-batch stream
  CHECK(std::memcmp(y.raw(), y2.raw(), y.nbytes()) != 0);
}
