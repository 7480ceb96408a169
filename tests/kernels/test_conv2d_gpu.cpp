// conv2d CUDA kernels (kernels/conv2d.cu, conv2d_mma.cu) against the CPU twin,
// forward and backward: every dtype, strides 1 and 2, odd H/W, k 1/3/5/7, Cin 1
// and Cin > 32 (several channel groups in the dw blocks), batch 1, bias and
// ReLU on and off, several dw pixel chunks; exact small-integer cases bit for
// bit; device outputs NaN-poisoned first, so every element must be written;
// each GPU run done twice and compared byte for byte (no atomics, fixed
// reduction order). Every variant (Conv2dAlgo): direct (the default) on the
// first cases; mma on Cin/Cout 16/32/48/80 shapes, where its launch counter
// must show that forward, dx and dw each ran on it; the fallbacks (f32, Cin 1,
// Cin or Cout not a multiple of 16) launch nothing of it and equal direct byte
// for byte.
// Runs only where a GPU (or the CUDA emulator) is usable; else exits 77 (skipped).
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "engine/stream.hpp"
#include "kernels/conv2d.hpp"
#include "kernels/conv_algo_lab.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/tolerance.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using kernels::Conv2dAlgo;
using kernels::Conv2dDims;

namespace {

const Device kGpu = Device::cuda(0);

Conv2dDims dims(std::int64_t n, int h, int w, int cin, int cout, int k, int stride) {
  Conv2dDims d;
  d.n = n;
  d.h = h;
  d.w = w;
  d.cin = cin;
  d.cout = cout;
  d.k = k;
  d.stride = stride;
  return d;
}

struct Outputs {
  Tensor y, dy, dx, dw, db;
};

// Forward then backward on `dev` from the host inputs; outputs poisoned with
// NaN (0xff bytes) first; results copied back to the host.
Outputs run_on(Device dev, Stream* s, const Conv2dDims& d, const Tensor& x, const Tensor& w, const Tensor* b,
               const Tensor& dy0, bool with_dx = true, bool with_db = true) {
  cudaStream_t cs = s ? cudaStream_t(*s) : nullptr;
  const DType t = x.dtype();
  const Shape ys{d.n, d.oh(), d.ow(), d.cout};
  Tensor dx_ = x.to(dev, cs), dw_ = w.to(dev, cs), ddy = dy0.to(dev, cs);
  Tensor db_;
  if (b) db_ = b->to(dev, cs);
  Tensor y = Tensor::empty(ys, t, dev, Layout::nhwc, cs), gx = Tensor::empty(x.shape(), t, dev, Layout::nhwc, cs);
  Tensor gw = Tensor::empty(w.shape(), DType::f32, dev, Layout::plain, cs);
  Tensor gb = Tensor::empty({d.cout}, DType::f32, dev, Layout::plain, cs);
  for (Tensor* p : {&y, &gx, &gw, &gb}) p->fill_bytes(0xff, cs);
  ops::conv2d_forward(dx_, dw_, d.stride, d.relu, y, b ? &db_ : nullptr, cs);
  ops::conv2d_backward(dx_, dw_, ddy, d.stride, d.relu, gw, &y, with_dx ? &gx : nullptr, with_db ? &gb : nullptr,
                       nullptr, cs);
  if (s) s->synchronize();
  Outputs o;
  o.y = y.to(Device::cpu());
  o.dy = ddy.to(Device::cpu());
  o.dx = gx.to(Device::cpu());
  o.dw = gw.to(Device::cpu());
  o.db = gb.to(Device::cpu());
  return o;
}

std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const std::uint8_t*>(t.raw());
  return {p, p + t.nbytes()};
}

std::string describe(const Conv2dDims& d, DType t, bool bias) {
  return std::string(dtype_name(t)) + " n " + std::to_string(d.n) + " h " + std::to_string(d.h) + " w " +
         std::to_string(d.w) + " cin " + std::to_string(d.cin) + " cout " + std::to_string(d.cout) + " k " +
         std::to_string(d.k) + " stride " + std::to_string(d.stride) + (bias ? " bias" : " no-bias") +
         (d.relu ? " relu" : " linear");
}

struct Inputs {
  Tensor x, w, b, dy0;
};

Inputs make_inputs(const Conv2dDims& d, DType t, std::uint64_t seed, bool small_ints) {
  const std::size_t nx = std::size_t(d.n) * d.h * d.w * d.cin, nw = std::size_t(d.cout) * d.k * d.k * d.cin;
  const std::size_t ny = std::size_t(d.n) * d.oh() * d.ow() * d.cout;
  auto draw = [&](std::size_t n, std::uint64_t sd, float scale) {
    return small_ints ? testing::random_small_ints(n, sd, -2, 2) : testing::random_floats(n, sd, -scale, scale);
  };
  Inputs in;
  in.x = Tensor::from_floats(draw(nx, seed, 1.f), {d.n, d.h, d.w, d.cin}, t, Layout::nhwc);
  in.w = Tensor::from_floats(draw(nw, seed + 1, 0.3f), {d.cout, d.k, d.k, d.cin}, t);
  in.b = Tensor::from_floats(draw(std::size_t(d.cout), seed + 2, 0.2f), {d.cout}, t);
  in.dy0 = Tensor::from_floats(draw(ny, seed + 3, 1.f), {d.n, d.oh(), d.ow(), d.cout}, t, Layout::nhwc);
  return in;
}

}  // namespace

TEST_CASE("conv2d forward/backward: CUDA vs CPU twin, every dtype, strides 1/2, odd shapes, batch 1, run twice") {
  Stream s(kGpu);
  const Conv2dDims shapes[] = {
      dims(2, 7, 9, 3, 5, 3, 1),    dims(2, 7, 9, 3, 5, 3, 2),   dims(1, 9, 7, 1, 8, 7, 2),
      dims(3, 8, 10, 16, 12, 1, 2), dims(2, 11, 6, 5, 3, 5, 2),  dims(1, 1, 1, 2, 3, 3, 2),
      dims(2, 5, 7, 40, 6, 3, 2),   // Cin > 32: two channel groups in a dw block
      dims(testing::emu_scaled(4, 2), 40, 60, 8, 8, 3, 1),  // several dw pixel chunks
  };
  std::uint64_t seed = 11;
  for (const Conv2dDims& shape : shapes)
    for (DType t : {DType::f32, DType::bf16, DType::f16})
      for (bool bias : {true, false})
        for (bool relu : {false, true}) {
          Conv2dDims d = shape;
          d.relu = relu;
          INFO(describe(d, t, bias));
          const Inputs in = make_inputs(d, t, seed += 10, false);
          const Tensor* b = bias ? &in.b : nullptr;
          const Outputs cpu = run_on(Device::cpu(), nullptr, d, in.x, in.w, b, in.dy0);
          const Outputs g1 = run_on(kGpu, &s, d, in.x, in.w, b, in.dy0);
          const Outputs g2 = run_on(kGpu, &s, d, in.x, in.w, b, in.dy0);
          const double tol = testing::rel_l2_tolerance(t);
          // rel_l2 is inf on any NaN: a poisoned element left unwritten fails.
          CHECK(testing::rel_l2(g1.y.to_floats(), cpu.y.to_floats()) <= tol);
          CHECK(testing::rel_l2(g1.dy.to_floats(), cpu.dy.to_floats()) <= tol);
          CHECK(testing::rel_l2(g1.dx.to_floats(), cpu.dx.to_floats()) <= tol);
          CHECK(testing::rel_l2(g1.dw.to_floats(), cpu.dw.to_floats()) <= tol);
          CHECK(testing::rel_l2(g1.db.to_floats(), cpu.db.to_floats()) <= tol);
          for (auto [a, c] : {std::pair{&g1.y, &g2.y}, {&g1.dy, &g2.dy}, {&g1.dx, &g2.dx}, {&g1.dw, &g2.dw},
                              {&g1.db, &g2.db}})
            CHECK(bytes_of(*a) == bytes_of(*c));
        }
}

TEST_CASE("conv2d CUDA exact small-integer cases match the CPU twin bit for bit") {
  Stream s(kGpu);
  std::uint64_t seed = 500;
  for (const Conv2dDims& shape : {dims(2, 7, 9, 3, 4, 3, 2), dims(1, 9, 7, 1, 6, 7, 2), dims(2, 6, 7, 3, 5, 1, 2),
                                  dims(2, 5, 6, 2, 3, 3, 1)})
    for (DType t : {DType::f32, DType::bf16, DType::f16})
      for (bool relu : {false, true}) {
        Conv2dDims d = shape;
        d.relu = relu;
        INFO(describe(d, t, true));
        const Inputs in = make_inputs(d, t, seed += 10, true);
        const Outputs cpu = run_on(Device::cpu(), nullptr, d, in.x, in.w, &in.b, in.dy0);
        const Outputs gpu = run_on(kGpu, &s, d, in.x, in.w, &in.b, in.dy0);
        for (auto [a, c] : {std::pair{&gpu.y, &cpu.y}, {&gpu.dy, &cpu.dy}, {&gpu.dx, &cpu.dx}, {&gpu.dw, &cpu.dw},
                            {&gpu.db, &cpu.db}})
          CHECK(testing::rel_l2(a->to_floats(), c->to_floats()) == 0.0);
      }
}

TEST_CASE("conv2d CUDA without dx and db: dw as with them, dx and db untouched") {
  Stream s(kGpu);
  Conv2dDims d = dims(2, 9, 8, 1, 8, 7, 2);
  d.relu = true;
  const Inputs in = make_inputs(d, DType::bf16, 99, false);
  const Outputs all = run_on(kGpu, &s, d, in.x, in.w, &in.b, in.dy0);
  const Outputs some = run_on(kGpu, &s, d, in.x, in.w, &in.b, in.dy0, false, false);
  CHECK(bytes_of(all.dw) == bytes_of(some.dw));
  CHECK(bytes_of(all.dy) == bytes_of(some.dy));
  for (float v : some.dx.to_floats()) REQUIRE(std::isnan(v));
  for (float v : some.db.to_floats()) REQUIRE(std::isnan(v));
}

namespace {

// Selects a variant for the scope (the selector is process-wide).
class AlgoScope {
 public:
  explicit AlgoScope(Conv2dAlgo a) : old_(kernels::conv2d_algo()) { kernels::set_conv2d_algo(a); }
  ~AlgoScope() { kernels::set_conv2d_algo(old_); }
  AlgoScope(const AlgoScope&) = delete;
  AlgoScope& operator=(const AlgoScope&) = delete;

 private:
  Conv2dAlgo old_;
};

Outputs run_with(Conv2dAlgo a, Stream& s, const Conv2dDims& d, const Inputs& in, bool bias) {
  AlgoScope scope(a);
  return run_on(kGpu, &s, d, in.x, in.w, bias ? &in.b : nullptr, in.dy0);
}

// The shapes the mma variant runs: Cin and Cout multiples of 16.
std::vector<Conv2dDims> mma_shapes() {
  return {dims(2, 7, 9, 16, 16, 3, 1),  dims(2, 7, 9, 16, 32, 3, 2),  dims(1, 9, 7, 32, 16, 7, 2),
          dims(1, 6, 5, 48, 16, 7, 1),  dims(3, 8, 11, 32, 48, 1, 2), dims(2, 5, 11, 48, 32, 1, 1),
          dims(1, 1, 1, 16, 16, 3, 2),  dims(2, 11, 13, 16, 80, 3, 2),  // Cout 80: two N tiles, M = 84: two M tiles
          dims(1, 2, 3, 16, 16, 7, 2)};                                 // the 7x7 window larger than the image
}

}  // namespace

TEST_CASE("conv2d selector: names, set/get, resolve (mma needs bf16/f16 and Cin, Cout multiples of 16)") {
  CHECK(std::string(kernels::conv2d_algo_name(Conv2dAlgo::automatic)) == "auto");
  CHECK(std::string(kernels::conv2d_algo_name(Conv2dAlgo::direct)) == "direct");
  CHECK(std::string(kernels::conv2d_algo_name(Conv2dAlgo::mma)) == "mma");
  {
    AlgoScope scope(Conv2dAlgo::mma);
    CHECK(kernels::conv2d_algo() == Conv2dAlgo::mma);
  }
  const Conv2dDims ok = dims(1, 5, 5, 16, 32, 3, 2), odd_cin = dims(1, 5, 5, 24, 32, 3, 1),
                   odd_cout = dims(1, 5, 5, 16, 8, 3, 1), stem = dims(1, 5, 5, 1, 16, 7, 2);
  CHECK(kernels::conv2d_resolve_algo(ok, DType::bf16, Conv2dAlgo::mma) == Conv2dAlgo::mma);
  CHECK(kernels::conv2d_resolve_algo(ok, DType::f16, Conv2dAlgo::mma) == Conv2dAlgo::mma);
  CHECK(kernels::conv2d_resolve_algo(ok, DType::f32, Conv2dAlgo::mma) == Conv2dAlgo::direct);
  CHECK(kernels::conv2d_resolve_algo(ok, DType::bf16, Conv2dAlgo::direct) == Conv2dAlgo::direct);
  CHECK(kernels::conv2d_resolve_algo(odd_cin, DType::bf16, Conv2dAlgo::mma) == Conv2dAlgo::direct);
  CHECK(kernels::conv2d_resolve_algo(odd_cout, DType::bf16, Conv2dAlgo::mma) == Conv2dAlgo::direct);
  CHECK(kernels::conv2d_resolve_algo(stem, DType::bf16, Conv2dAlgo::mma) == Conv2dAlgo::direct);
}

TEST_CASE("conv2d mma variant vs CPU twin: bf16/f16, k 1/3/7, strides 1/2, odd shapes, batch 1, bias/ReLU, run twice") {
  Stream s(kGpu);
  std::uint64_t seed = 2000;
  for (const Conv2dDims& shape : mma_shapes())
    for (DType t : {DType::bf16, DType::f16})
      for (bool bias : {true, false})
        for (bool relu : {false, true}) {
          Conv2dDims d = shape;
          d.relu = relu;
          INFO(describe(d, t, bias));
          REQUIRE(kernels::conv2d_resolve_algo(d, t, Conv2dAlgo::mma) == Conv2dAlgo::mma);
          const Inputs in = make_inputs(d, t, seed += 10, false);
          const Outputs cpu = run_on(Device::cpu(), nullptr, d, in.x, in.w, bias ? &in.b : nullptr, in.dy0);
          const std::uint64_t launches = kernels::conv2d_mma_launches();
          const Outputs g1 = run_with(Conv2dAlgo::mma, s, d, in, bias);
          CHECK(kernels::conv2d_mma_launches() == launches + 3);  // forward, dx, dw: none fell back
          const Outputs g2 = run_with(Conv2dAlgo::mma, s, d, in, bias);
          const double tol = testing::rel_l2_tolerance(t);
          CHECK(testing::rel_l2(g1.y.to_floats(), cpu.y.to_floats()) <= tol);
          CHECK(testing::rel_l2(g1.dy.to_floats(), cpu.dy.to_floats()) <= tol);
          CHECK(testing::rel_l2(g1.dx.to_floats(), cpu.dx.to_floats()) <= tol);
          CHECK(testing::rel_l2(g1.dw.to_floats(), cpu.dw.to_floats()) <= tol);
          CHECK(testing::rel_l2(g1.db.to_floats(), cpu.db.to_floats()) <= tol);
          for (auto [a, c] : {std::pair{&g1.y, &g2.y}, {&g1.dy, &g2.dy}, {&g1.dx, &g2.dx}, {&g1.dw, &g2.dw},
                              {&g1.db, &g2.db}})
            CHECK(bytes_of(*a) == bytes_of(*c));
        }
}

TEST_CASE("conv2d mma variant: exact small-integer cases match the CPU twin bit for bit") {
  Stream s(kGpu);
  std::uint64_t seed = 3000;
  for (const Conv2dDims& shape : {dims(2, 7, 9, 16, 32, 3, 2), dims(1, 6, 5, 48, 16, 7, 1), dims(2, 5, 7, 32, 16, 1, 2)})
    for (DType t : {DType::bf16, DType::f16})
      for (bool relu : {false, true}) {
        Conv2dDims d = shape;
        d.relu = relu;
        INFO(describe(d, t, true));
        const Inputs in = make_inputs(d, t, seed += 10, true);
        const Outputs cpu = run_on(Device::cpu(), nullptr, d, in.x, in.w, &in.b, in.dy0);
        const std::uint64_t launches = kernels::conv2d_mma_launches();
        const Outputs gpu = run_with(Conv2dAlgo::mma, s, d, in, true);
        CHECK(kernels::conv2d_mma_launches() == launches + 3);
        for (auto [a, c] : {std::pair{&gpu.y, &cpu.y}, {&gpu.dy, &cpu.dy}, {&gpu.dx, &cpu.dx}, {&gpu.dw, &cpu.dw},
                            {&gpu.db, &cpu.db}})
          CHECK(testing::rel_l2(a->to_floats(), c->to_floats()) == 0.0);
      }
}

TEST_CASE("conv2d mma variant: several dw pixel chunks") {
  Stream s(kGpu);
  // 2 x 40 x 60 = 4,800 output pixels: 3 dw chunks of <= 2,048 (emulator: 1 image, 2 chunks).
  Conv2dDims d = dims(testing::emu_scaled(2, 2), 40, 60, 16, 16, 3, 1);
  d.relu = true;
  for (DType t : {DType::bf16, DType::f16}) {
    INFO(describe(d, t, true));
    const Inputs in = make_inputs(d, t, 4000 + std::uint64_t(t), false);
    const Outputs cpu = run_on(Device::cpu(), nullptr, d, in.x, in.w, &in.b, in.dy0);
    const std::uint64_t launches = kernels::conv2d_mma_launches();
    const Outputs g1 = run_with(Conv2dAlgo::mma, s, d, in, true);
    CHECK(kernels::conv2d_mma_launches() == launches + 3);
    const Outputs g2 = run_with(Conv2dAlgo::mma, s, d, in, true);
    const double tol = testing::rel_l2_tolerance(t);
    CHECK(testing::rel_l2(g1.y.to_floats(), cpu.y.to_floats()) <= tol);
    CHECK(testing::rel_l2(g1.dx.to_floats(), cpu.dx.to_floats()) <= tol);
    CHECK(testing::rel_l2(g1.dw.to_floats(), cpu.dw.to_floats()) <= tol);
    CHECK(testing::rel_l2(g1.db.to_floats(), cpu.db.to_floats()) <= tol);
    CHECK(bytes_of(g1.dw) == bytes_of(g2.dw));
    CHECK(bytes_of(g1.db) == bytes_of(g2.db));
  }
}

TEST_CASE("conv2d mma selected where it cannot run: falls back to direct, byte for byte") {
  Stream s(kGpu);
  std::uint64_t seed = 5000;
  // f32 (no TF32), Cin 1 (the stem), Cin or Cout not a multiple of 16.
  const std::pair<Conv2dDims, DType> cases[] = {
      {dims(2, 7, 9, 16, 16, 3, 2), DType::f32}, {dims(1, 9, 7, 1, 16, 7, 2), DType::bf16},
      {dims(2, 5, 7, 24, 16, 3, 1), DType::f16}, {dims(2, 5, 7, 16, 8, 1, 2), DType::bf16}};
  for (const auto& [shape, t] : cases)
    for (bool relu : {false, true}) {
      Conv2dDims d = shape;
      d.relu = relu;
      INFO(describe(d, t, true));
      CHECK(kernels::conv2d_resolve_algo(d, t, Conv2dAlgo::mma) == Conv2dAlgo::direct);
      const Inputs in = make_inputs(d, t, seed += 10, false);
      const Outputs cpu = run_on(Device::cpu(), nullptr, d, in.x, in.w, &in.b, in.dy0);
      const std::uint64_t launches = kernels::conv2d_mma_launches();
      const Outputs mma = run_with(Conv2dAlgo::mma, s, d, in, true);
      CHECK(kernels::conv2d_mma_launches() == launches);
      const Outputs direct = run_with(Conv2dAlgo::direct, s, d, in, true);
      CHECK(testing::rel_l2(mma.y.to_floats(), cpu.y.to_floats()) <= testing::rel_l2_tolerance(t));
      for (auto [a, c] : {std::pair{&mma.y, &direct.y}, {&mma.dy, &direct.dy}, {&mma.dx, &direct.dx},
                          {&mma.dw, &direct.dw}, {&mma.db, &direct.db}})
        CHECK(bytes_of(*a) == bytes_of(*c));
    }
}

TEST_CASE("conv2d CUDA with a caller scratch: the same bytes as the per-call one, every variant; too small refused") {
  Stream s(kGpu);
  const cudaStream_t cs = s;
  Conv2dDims d = dims(2, 7, 9, 16, 32, 3, 2);
  d.relu = true;
  const Inputs in = make_inputs(d, DType::bf16, 6000, false);
  const std::int64_t need = kernels::conv2d_scratch_elems(d);
  CHECK(need == std::int64_t(d.cout) * (9 * d.cin + 1));  // 2 x 4 x 5 = 40 pixels: one chunk
  for (Conv2dAlgo a : {Conv2dAlgo::direct, Conv2dAlgo::mma}) {
    INFO(kernels::conv2d_algo_name(a));
    AlgoScope scope(a);
    const Outputs ref = run_on(kGpu, &s, d, in.x, in.w, &in.b, in.dy0);
    Tensor x = in.x.to(kGpu, cs), w = in.w.to(kGpu, cs), y = ref.y.to(kGpu, cs), dy = in.dy0.to(kGpu, cs);
    Tensor dx = Tensor::empty(x.shape(), DType::bf16, kGpu, Layout::nhwc, cs);
    Tensor dw = Tensor::empty(w.shape(), DType::f32, kGpu, Layout::plain, cs);
    Tensor db = Tensor::empty({d.cout}, DType::f32, kGpu, Layout::plain, cs);
    Tensor scratch = Tensor::empty({need}, DType::f32, kGpu, Layout::plain, cs);
    for (Tensor* p : {&dx, &dw, &db, &scratch}) p->fill_bytes(0xff, cs);
    ops::conv2d_backward(x, w, dy, d.stride, true, dw, &y, &dx, &db, &scratch, cs);
    s.synchronize();
    CHECK(bytes_of(dx.to(Device::cpu())) == bytes_of(ref.dx));
    CHECK(bytes_of(dw.to(Device::cpu())) == bytes_of(ref.dw));
    CHECK(bytes_of(db.to(Device::cpu())) == bytes_of(ref.db));
    Tensor small = Tensor::empty({need - 1}, DType::f32, kGpu, Layout::plain, cs);
    CHECK_THROWS_WITH(ops::conv2d_backward(x, w, dy, d.stride, true, dw, &y, &dx, &db, &small, cs),
                      doctest::Contains("conv2d_scratch_elems"));
  }
}
