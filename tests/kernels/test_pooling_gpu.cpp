// The pooling and elementwise ops' CUDA kernels (kernels/pooling.cu) against
// their CPU twins (kernels/pooling.cpp, themselves checked against float64
// loops and PyTorch in test_pooling.cpp): every dtype, odd shapes with floor,
// batch 1, 1x1 spatial, channel counts over one 32-channel tile, H*W = 4096.
// Max pool (values, codes, routed gradients), the average pool (same lane
// order, IEEE division) are compared bit for bit (accumulate, once add_inplace
// here: test_accumulate_gpu.cpp); the channel
// gate (expf and FMA contraction differ) within the dtype's relative L2
// tolerance. Device outputs are NaN-poisoned first, so every element must be
// written, and every op runs twice: the two runs must agree bit for bit.
// Runs only where a GPU (or the CUDA emulator) is usable; else exits 77 (skipped).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <vector>

#include "engine/stream.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/tensor_bits.hpp"
#include "tests/kernels/tolerance.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {

const Device kGpu = Device::cuda(0);
constexpr DType kFloatTypes[] = {DType::f32, DType::bf16, DType::f16};

struct Dims {
  std::int64_t n;
  int h, w, c;
  std::size_t numel() const { return std::size_t(n) * h * w * c; }
  Shape shape() const { return {n, h, w, c}; }
};

std::vector<Dims> shapes() {
  return {
      {1, 5, 7, 3},      // batch 1, odd H and W
      {2, 8, 8, 16},
      {3, 9, 6, 5},
      {1, 1, 1, 4},      // 1x1 spatial
      {2, 4, 5, 1},      // one channel
      {2, 13, 11, 37},   // over one 32-channel tile
      {testing::emu_scaled(4, 2), 64, 64, testing::kEmulatedGpu ? 40 : 96},  // H*W = 4096
  };
}

Layout layout_of(const Shape& s) { return s.size() == 4 ? Layout::nhwc : Layout::plain; }
Tensor host(const std::vector<float>& v, const Shape& s, DType t) { return Tensor::from_floats(v, s, t, layout_of(s)); }
Tensor dev_poisoned(const Shape& s, DType t, Stream& st) {
  return testing::poisoned(s, t, kGpu, layout_of(s), st.handle());
}
// The device outputs of two runs agree bit for bit.
void check_runs_identical(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK_MESSAGE(testing::bytes_of(a[i]) == testing::bytes_of(b[i]), "output ", i, " differs between runs");
}

}  // namespace

TEST_CASE("max_pool forward/backward: CUDA vs CPU twin bit for bit, every dtype, pool 1..4, odd shapes, batch 1") {
  Stream s(kGpu);
  std::uint64_t seed = 1;
  for (const Dims& d : shapes())
    for (int p : {1, 2, 3, 4}) {
      if (d.h < p || d.w < p || (p == 1 && d.h * d.w > 1024 && testing::kEmulatedGpu)) continue;
      const Shape ys{d.n, d.h / p, d.w / p, d.c};
      for (DType t : kFloatTypes) {
        INFO("n ", d.n, " h ", d.h, " w ", d.w, " c ", d.c, " pool ", p, " ", dtype_name(t));
        // Small integers: many ties, so the tie rule is exercised on every window.
        const Tensor x = host(testing::random_small_ints(d.numel(), seed++, -2, 2), d.shape(), t);
        const Tensor dy = host(testing::random_floats(std::size_t(shape_numel(ys)), seed++), ys, t);
        Tensor y = testing::poisoned(ys, t), code = testing::poisoned(ys, DType::u8), dx = testing::poisoned(d.shape(), t);
        ops::max_pool_forward(x, p, y, &code);
        ops::max_pool_backward(dy, code, p, dx);
        const Tensor gx = x.to(kGpu, s), gdy = dy.to(kGpu, s);
        std::vector<Tensor> runs[2];
        for (auto& r : runs) {
          Tensor gy = dev_poisoned(ys, t, s), gcode = dev_poisoned(ys, DType::u8, s), gdx = dev_poisoned(d.shape(), t, s);
          ops::max_pool_forward(gx, p, gy, &gcode, s);
          ops::max_pool_backward(gdy, gcode, p, gdx, s);
          Tensor gy2 = dev_poisoned(ys, t, s);
          ops::max_pool_forward(gx, p, gy2, nullptr, s);  // no code: the same y
          r = {gy, gcode, gdx, gy2};
        }
        s.synchronize();
        CHECK(testing::bytes_of(runs[0][0]) == testing::bytes_of(y));
        CHECK(testing::bytes_of(runs[0][1]) == testing::bytes_of(code));
        CHECK(testing::bytes_of(runs[0][2]) == testing::bytes_of(dx));
        CHECK(testing::bytes_of(runs[0][3]) == testing::bytes_of(y));
        check_runs_identical(runs[0], runs[1]);
      }
    }
}

TEST_CASE("max_pool on CUDA: ties to the first, NaN wins (the later NaN), the floor's rows get zero gradient") {
  Stream s(kGpu);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> xv = {1, 3, nan, 5, 2, nan,  //
                                 3, 2, 7, 1, 1, nan,    //
                                 100, nan, 100, 100, 100, 100};
  for (DType t : kFloatTypes) {
    const Tensor gx = host(xv, {1, 3, 6, 1}, t).to(kGpu, s);
    const Tensor gdy = host({10, 20, 30}, {1, 1, 3, 1}, t).to(kGpu, s);
    Tensor gy = dev_poisoned({1, 1, 3, 1}, t, s), gcode = dev_poisoned({1, 1, 3, 1}, DType::u8, s);
    Tensor gdx = dev_poisoned({1, 3, 6, 1}, t, s);
    ops::max_pool_forward(gx, 2, gy, &gcode, s);
    ops::max_pool_backward(gdy, gcode, 2, gdx, s);
    s.synchronize();
    CHECK(testing::bytes_of(gcode) == std::vector<std::uint8_t>{1, 0, 3});
    const auto y = gy.to_floats();
    CHECK(y[0] == 3.f);
    CHECK(std::isnan(y[1]));
    CHECK(std::isnan(y[2]));
    CHECK(gdx.to_floats() == std::vector<float>{0, 10, 20, 0, 0, 0, 0, 0, 0, 0, 0, 30, 0, 0, 0, 0, 0, 0});
  }
}

TEST_CASE("global_avg_pool forward/backward: CUDA vs CPU twin bit for bit (the same lane order), every dtype") {
  Stream s(kGpu);
  std::uint64_t seed = 100;
  for (const Dims& d : shapes())
    for (DType t : kFloatTypes) {
      INFO("n ", d.n, " h ", d.h, " w ", d.w, " c ", d.c, " ", dtype_name(t));
      const Tensor x = host(testing::random_floats(d.numel(), seed++), d.shape(), t);
      const Tensor dy = host(testing::random_floats(std::size_t(d.n * d.c), seed++), {d.n, d.c}, t);
      Tensor y = testing::poisoned({d.n, d.c}, t), dx = testing::poisoned(d.shape(), t);
      ops::global_avg_pool_forward(x, y);
      ops::global_avg_pool_backward(dy, dx);
      const Tensor gx = x.to(kGpu, s), gdy = dy.to(kGpu, s);
      std::vector<Tensor> runs[2];
      for (auto& r : runs) {
        Tensor gy = dev_poisoned({d.n, d.c}, t, s), gdx = dev_poisoned(d.shape(), t, s);
        ops::global_avg_pool_forward(gx, gy, s);
        ops::global_avg_pool_backward(gdy, gdx, s);
        r = {gy, gdx};
      }
      s.synchronize();
      CHECK(testing::bytes_of(runs[0][0]) == testing::bytes_of(y));
      CHECK(testing::bytes_of(runs[0][1]) == testing::bytes_of(dx));
      check_runs_identical(runs[0], runs[1]);
    }
}

TEST_CASE("channel_gate forward/backward: CUDA vs CPU twin, every dtype, residual and relu on/off") {
  Stream s(kGpu);
  std::uint64_t seed = 200;
  for (const Dims& d : shapes())
    for (DType t : kFloatTypes)
      for (bool residual : {false, true})
        for (bool relu : {false, true}) {
          INFO("n ", d.n, " h ", d.h, " w ", d.w, " c ", d.c, " ", dtype_name(t), " residual ", residual, " relu ", relu);
          const Tensor x = host(testing::random_floats(d.numel(), seed++), d.shape(), t);
          auto gv = testing::random_floats(std::size_t(d.n * d.c), seed++, -4.f, 4.f);
          gv[0] = 200.f;  // saturated logits: no overflow in either sigmoid
          if (gv.size() > 1) gv[1] = -200.f;
          const Tensor g = Tensor::from_floats(gv, {d.n, d.c}, t);
          const Tensor res = host(testing::random_floats(d.numel(), seed++), d.shape(), t);
          const Tensor dy0 = host(testing::random_floats(d.numel(), seed++), d.shape(), t);
          Tensor y = testing::poisoned(d.shape(), t), dx = testing::poisoned(d.shape(), t), dg = testing::poisoned({d.n, d.c}, t);
          Tensor dy = Tensor::empty(d.shape(), t);
          dy.copy_from(dy0);
          ops::channel_gate_forward(x, g, relu, y, residual ? &res : nullptr);
          ops::channel_gate_backward(x, g, dy, relu, dx, dg, &y);
          const Tensor gx = x.to(kGpu, s), gg = g.to(kGpu, s), gres = res.to(kGpu, s);
          std::vector<Tensor> runs[2];
          for (auto& r : runs) {
            Tensor gy = dev_poisoned(d.shape(), t, s), gdx = dev_poisoned(d.shape(), t, s);
            Tensor gdg = dev_poisoned({d.n, d.c}, t, s), gdy = dy0.to(kGpu, s);
            ops::channel_gate_forward(gx, gg, relu, gy, residual ? &gres : nullptr, s);
            ops::channel_gate_backward(gx, gg, gdy, relu, gdx, gdg, &gy, s);
            r = {gy, gdy, gdx, gdg};
          }
          s.synchronize();
          const double tol = testing::rel_l2_tolerance(t);
          CHECK(testing::rel_l2(runs[0][0].to_floats(), y.to_floats()) <= tol);
          CHECK(testing::rel_l2(runs[0][1].to_floats(), dy.to_floats()) <= tol);  // masked in place
          CHECK(testing::rel_l2(runs[0][2].to_floats(), dx.to_floats()) <= tol);
          CHECK(testing::rel_l2(runs[0][3].to_floats(), dg.to_floats()) <= tol);
          check_runs_identical(runs[0], runs[1]);
        }
}

