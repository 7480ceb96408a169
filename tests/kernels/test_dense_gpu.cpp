// dense (kernels/dense.cu: cuBLASLt with bias/ReLU epilogues) against its CPU
// twin, forward and backward, every precision, odd shapes and batch 1; and on
// device views only 16-byte aligned, as the ParamBuffer's parameter views are.
// Device outputs are NaN-poisoned first, so every element must be written.
// Runs only where a GPU (or the CUDA emulator) is usable; else exits 77 (skipped).
#include <doctest/doctest.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "engine/stream.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/tolerance.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {
const Device kGpu = Device::cuda(0);

// Elements where a and b disagree on y > 0 (the ReLU mask of the backward).
std::int64_t relu_mask_flips(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_floats(), y = b.to_floats();
  std::int64_t n = 0;
  for (std::size_t i = 0; i < x.size(); ++i) n += (x[i] > 0.f) != (y[i] > 0.f);
  return n;
}
}  // namespace

TEST_CASE("dense forward/backward: CUDA (cuBLASLt) vs CPU twin, every precision, odd shapes, batch 1") {
  Stream s(kGpu);
  for (auto [M, K, N] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 8, 3}, {37, 72, 17}, {256, 8192, 256}})
    for (DType t : {DType::f32, DType::bf16, DType::f16})
      for (bool relu : {false, true}) {
        const Tensor x = Tensor::from_floats(testing::random_floats(std::size_t(M * K), 1), {M, K}, t);
        const Tensor w = Tensor::from_floats(testing::random_floats(std::size_t(N * K), 2, -0.1f, 0.1f), {N, K}, t);
        const Tensor b = Tensor::from_floats(testing::random_floats(std::size_t(N), 3), {N}, t);
        const Tensor dyv = Tensor::from_floats(testing::random_floats(std::size_t(M * N), 4), {M, N}, t);
        Tensor y = Tensor::empty({M, N}, t), dy = Tensor::empty({M, N}, t);
        Tensor dx = Tensor::empty({M, K}, t), dw = Tensor::empty({N, K}, DType::f32), db = Tensor::empty({N}, DType::f32);
        dy.copy_from(dyv);
        ops::dense_forward(x, w, b, relu, y);
        Tensor gx = x.to(kGpu, s), gw = w.to(kGpu, s), gb = b.to(kGpu, s), gdy = dyv.to(kGpu, s);
        Tensor gy = Tensor::empty({M, N}, t, kGpu, Layout::plain, s), gdx = Tensor::empty({M, K}, t, kGpu, Layout::plain, s);
        Tensor gdw = Tensor::empty({N, K}, DType::f32, kGpu, Layout::plain, s), gdb = Tensor::empty({N}, DType::f32, kGpu, Layout::plain, s);
        for (Tensor* p : {&gy, &gdx, &gdw, &gdb}) p->fill_bytes(0xff, s);
        ops::dense_forward(gx, gw, gb, relu, gy, s);
        ops::dense_backward(gx, gw, gy, gdy, relu, gdw, gdb, &gdx, s);
        s.synchronize();
        // The backward twin masks with the GPU's y: a y within rounding of 0
        // may be positive on one side only, which is not a backward error.
        INFO("M ", M, " K ", K, " N ", N, " dtype ", dtype_name(t), " relu ", relu, "; y > 0 differs at ",
             relu_mask_flips(gy, y), " of ", M * N);
        ops::dense_backward(x, w, gy.to(Device::cpu()), dy, relu, dw, db, &dx);
        const double tol = testing::rel_l2_tolerance(t);
        CHECK(testing::rel_l2(gy.to_floats(), y.to_floats()) <= tol);
        CHECK(testing::rel_l2(gdx.to_floats(), dx.to_floats()) <= tol);
        CHECK(testing::rel_l2(gdw.to_floats(), dw.to_floats()) <= tol);
        CHECK(testing::rel_l2(gdb.to_floats(), db.to_floats()) <= tol);
      }
}

TEST_CASE("dense on views that are only 16-byte aligned (ParamBuffer offsets): cuBLASLt plans honour the alignment") {
  // cuBLASLt's heuristic assumes 256-byte aligned buffers unless told; the
  // parameter views of the flat ParamBuffer sit at multiples of 8 elements.
  Stream s(kGpu);
  const std::int64_t M = 33, K = 72, N = 11, off = 8;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (bool relu : {false, true}) {
      const Tensor x = Tensor::from_floats(testing::random_floats(std::size_t(M * K), 1), {M, K}, t);
      const Tensor w = Tensor::from_floats(testing::random_floats(std::size_t(N * K), 2, -0.1f, 0.1f), {N, K}, t);
      const Tensor b = Tensor::from_floats(testing::random_floats(std::size_t(N), 3), {N}, t);
      const Tensor dyv = Tensor::from_floats(testing::random_floats(std::size_t(M * N), 4), {M, N}, t);
      Tensor y = Tensor::empty({M, N}, t), dy = Tensor::empty({M, N}, t);
      Tensor dx = Tensor::empty({M, K}, t), dw = Tensor::empty({N, K}, DType::f32), db = Tensor::empty({N}, DType::f32);
      dy.copy_from(dyv);
      ops::dense_forward(x, w, b, relu, y);
      // Every device operand is a view starting `off` elements into a bigger buffer.
      auto view = [&](const Shape& shape, DType dt) {
        std::int64_t n = 1;
        for (auto e : shape) n *= e;
        Tensor flat = Tensor::empty({n + off}, dt, kGpu, Layout::plain, s);
        flat.fill_bytes(0xff, s);
        return flat.slice(off, off + n).reshape(shape);
      };
      Tensor gx = view({M, K}, t), gw = view({N, K}, t), gb = view({N}, t), gdy = view({M, N}, t);
      gx.copy_from(x, s);
      gw.copy_from(w, s);
      gb.copy_from(b, s);
      gdy.copy_from(dyv, s);
      Tensor gy = view({M, N}, t), gdx = view({M, K}, t), gdw = view({N, K}, DType::f32), gdb = view({N}, DType::f32);
      ops::dense_forward(gx, gw, gb, relu, gy, s);
      ops::dense_backward(gx, gw, gy, gdy, relu, gdw, gdb, &gdx, s);
      s.synchronize();
      INFO("dtype ", dtype_name(t), " relu ", relu, "; y > 0 differs at ", relu_mask_flips(gy, y), " of ", M * N);
      ops::dense_backward(x, w, gy.to(Device::cpu()), dy, relu, dw, db, &dx);  // as above
      const double tol = testing::rel_l2_tolerance(t);
      CHECK(testing::rel_l2(gy.to_floats(), y.to_floats()) <= tol);
      CHECK(testing::rel_l2(gdx.to_floats(), dx.to_floats()) <= tol);
      CHECK(testing::rel_l2(gdw.to_floats(), dw.to_floats()) <= tol);
      CHECK(testing::rel_l2(gdb.to_floats(), db.to_floats()) <= tol);
    }
}
