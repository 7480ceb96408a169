// Dropout (kernels/dropout.cu) against its CPU twin: the counter-based mask
// is a function of (seed, stream, counter, index) only, so the CUDA mask, read
// from a device-held counter, equals the twin's bit for bit. Device outputs
// are NaN-poisoned first. Runs only where a GPU (or the CUDA emulator) is
// usable; else exits 77 (skipped).
#include <doctest/doctest.h>

#include "engine/stream.hpp"
#include "kernels/ops.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {
const Device kGpu = Device::cuda(0);
}  // namespace

TEST_CASE("dropout: CUDA mask equals the CPU twin's") {
  Stream s(kGpu);
  const std::int64_t n = 300001;
  const Tensor x = Tensor::from_floats(testing::random_floats(std::size_t(n), 5), {n});
  Tensor y = Tensor::empty({n}, DType::f32);
  std::int32_t ctr = 17;
  ops::dropout_forward(x, &ctr, 0.25f, 99, 2, y);
  Tensor gctr = Tensor::from_floats(std::vector<float>{17.f}, {1}, DType::i32).to(kGpu, s);
  Tensor gx = x.to(kGpu, s), gy = Tensor::empty({n}, DType::f32, kGpu, Layout::plain, s);
  gy.fill_bytes(0xff, s);
  ops::dropout_forward(gx, gctr.data<std::int32_t>(), 0.25f, 99, 2, gy, s);
  s.synchronize();
  CHECK(gy.to_floats() == y.to_floats());
}

TEST_CASE("dropout backward: CUDA equals the CPU twin bit for bit in every precision") {
  // One f32 multiply by 1/(1-p) (IEEE division on both sides, no fast math),
  // then one rounding to the dtype: nothing may differ.
  Stream s(kGpu);
  const std::int64_t n = 300001;
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    const Tensor dy = Tensor::from_floats(testing::random_floats(std::size_t(n), 6), {n}, t);
    Tensor dx = Tensor::empty({n}, t);
    std::int32_t ctr = 5;
    ops::dropout_backward(dy, &ctr, 0.4f, 7, 1, dx);
    Tensor gctr = Tensor::from_floats(std::vector<float>{5.f}, {1}, DType::i32).to(kGpu, s);
    Tensor gdy = dy.to(kGpu, s), gdx = Tensor::empty({n}, t, kGpu, Layout::plain, s);
    gdx.fill_bytes(0xff, s);
    ops::dropout_backward(gdy, gctr.data<std::int32_t>(), 0.4f, 7, 1, gdx, s);
    s.synchronize();
    CHECK(gdx.to_floats() == dx.to_floats());
  }
}
