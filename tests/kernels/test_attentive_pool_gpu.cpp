// attentive_pool (kernels/attentive_pool.cu) against its CPU twin, forward
// and backward, every precision, stats on and off, odd shapes, batch 1, W = 1,
// C and A above the block size, and enough rows (N*W) for several dw row
// groups. Device outputs and the saved buffer are NaN-poisoned first, so every
// element must be written; each case runs twice for bit-identical results, and
// the inference forward (no saved buffer) must give the training forward's y
// bit for bit. Runs only where a GPU (or the CUDA emulator) is usable; else
// exits 77 (skipped).
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "engine/stream.hpp"
#include "kernels/attentive_pool.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/tensor_bits.hpp"
#include "tests/kernels/tolerance.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using kernels::AttentivePoolDims;

namespace {

const Device kGpu = Device::cuda(0);

struct Outputs {
  Tensor y, y_infer, dx, dw, db, dv;
};

struct Operands {
  Tensor x, w, b, v, dy;
};

Operands make_operands(const AttentivePoolDims& d, DType t, std::uint64_t seed) {
  const float ws = 2.f / std::sqrt(float(d.c));
  Operands o;
  o.x = Tensor::from_floats(testing::random_floats(std::size_t(d.n * d.h * d.w * d.c), seed), {d.n, d.h, d.w, d.c}, t,
                            Layout::nhwc);
  o.w = Tensor::from_floats(testing::random_floats(std::size_t(d.a * d.c), seed + 1, -ws, ws), {d.a, d.c}, t);
  o.b = Tensor::from_floats(testing::random_floats(std::size_t(d.a), seed + 2, -0.5f, 0.5f), {d.a}, t);
  o.v = Tensor::from_floats(testing::random_floats(std::size_t(d.a), seed + 3, -1.5f, 1.5f), {d.a}, t);
  o.dy = Tensor::from_floats(testing::random_floats(std::size_t(d.n * d.out_c()), seed + 4), {d.n, d.out_c()}, t);
  return o;
}

// Forward (with and without saved) and backward on `dev`; results copied to the CPU.
Outputs run(const AttentivePoolDims& d, DType t, const Operands& in, Device dev, Stream* s) {
  cudaStream_t st = s ? s->handle() : nullptr;
  auto on = [&](const Tensor& h) { return dev.is_cuda() ? h.to(dev, st) : h; };
  auto fresh = [&](const Shape& shape, DType dt) {
    Tensor r = Tensor::empty(shape, dt, dev, Layout::plain, st);
    r.fill_bytes(0xff, st);  // NaN in every float type
    return r;
  };
  const Tensor x = on(in.x), w = on(in.w), b = on(in.b), v = on(in.v), dy = on(in.dy);
  Tensor y = fresh({d.n, d.out_c()}, t), y2 = fresh({d.n, d.out_c()}, t), dx = fresh(x.shape(), t);
  Tensor saved = fresh({kernels::attentive_pool_saved_elems(d.n, d.w, d.c, d.a, d.stats)}, DType::f32);
  Tensor dw = fresh({d.a, d.c}, DType::f32), db = fresh({d.a}, DType::f32), dv = fresh({d.a}, DType::f32);
  ops::attentive_pool_forward(x, w, b, v, d.stats, y, &saved, st);
  ops::attentive_pool_forward(x, w, b, v, d.stats, y2, nullptr, st);
  ops::attentive_pool_backward(x, w, b, v, saved, dy, d.stats, dx, dw, db, dv, st);
  if (s) s->synchronize();
  auto host = [&](const Tensor& g) { return g.to(Device::cpu(), st); };
  Outputs o{host(y), host(y2), host(dx), host(dw), host(db), host(dv)};
  if (s) s->synchronize();
  return o;
}

}  // namespace

TEST_CASE("attentive_pool CUDA vs CPU twin: every precision, stats on/off, odd shapes, batch 1, W = 1, many row groups") {
  Stream s(kGpu);
  const AttentivePoolDims shapes[] = {
      {1, 1, 1, 1, 1, false},     // everything 1
      {1, 3, 7, 33, 17, false},   // batch 1, odd
      {5, 2, 1, 8, 6, false},     // W = 1
      {3, 5, 13, 300, 40, false}, // C above the block size
      {4, 2, 9, 24, 290, false},  // A above the block size
      {40, 2, 31, 40, 36, false}, // 1240 rows: 5 dw row groups, partial tiles
  };
  std::uint64_t seed = 40;
  for (AttentivePoolDims d : shapes)
    for (bool stats : {false, true})
      for (DType t : {DType::f32, DType::bf16, DType::f16}) {
        d.stats = stats;
        INFO("dtype ", dtype_name(t), " N ", d.n, " H ", d.h, " W ", d.w, " C ", d.c, " A ", d.a, " stats ", stats);
        const Operands in = make_operands(d, t, seed += 10);
        const Outputs ref = run(d, t, in, Device::cpu(), nullptr);
        const Outputs g1 = run(d, t, in, kGpu, &s);
        const Outputs g2 = run(d, t, in, kGpu, &s);
        const double tol = testing::rel_l2_tolerance(t);
        CHECK(testing::rel_l2(g1.y.to_floats(), ref.y.to_floats()) <= tol);
        CHECK(testing::rel_l2(g1.dx.to_floats(), ref.dx.to_floats()) <= tol);
        CHECK(testing::rel_l2(g1.dw.to_floats(), ref.dw.to_floats()) <= 1e-5);
        CHECK(testing::rel_l2(g1.db.to_floats(), ref.db.to_floats()) <= 1e-5);
        CHECK(testing::rel_l2(g1.dv.to_floats(), ref.dv.to_floats()) <= 1e-5);
        CHECK(testing::same_bytes(g1.y, g1.y_infer));
        CHECK(testing::same_bytes(g1.y, g2.y));
        CHECK(testing::same_bytes(g1.dx, g2.dx));
        CHECK(testing::same_bytes(g1.dw, g2.dw));
        CHECK(testing::same_bytes(g1.db, g2.db));
        CHECK(testing::same_bytes(g1.dv, g2.dv));
      }
}

TEST_CASE("attentive_pool CUDA: the variance clamp (x constant over time) and NaN propagation") {
  Stream s(kGpu);
  AttentivePoolDims d{3, 2, 6, 5, 4, true};
  Operands in = make_operands(d, DType::f32, 900);
  auto xs = in.x.to_floats();
  for (std::int64_t n = 0; n < d.n; ++n)
    for (int h = 0; h < d.h; ++h)
      for (int f = 1; f < d.w; ++f)
        for (int c = 0; c < d.c; ++c)
          xs[std::size_t(((n * d.h + h) * d.w + f) * d.c + c)] = xs[std::size_t(((n * d.h + h) * d.w) * d.c + c)];
  xs[std::size_t(d.h * d.w * d.c)] = NAN;  // sample 1 only
  in.x = Tensor::from_floats(xs, in.x.shape(), DType::f32, Layout::nhwc);
  const Outputs g = run(d, DType::f32, in, kGpu, &s);
  const auto y = g.y.to_floats();
  for (std::int64_t n = 0; n < d.n; ++n)
    for (int c = 0; c < 2 * d.c; ++c) {
      const float yv = y[std::size_t(n * 2 * d.c + c)];
      if (n == 1)
        CHECK(std::isnan(yv));
      else if (c >= d.c)
        CHECK(yv == std::sqrt(1e-5f));
      else
        CHECK(!std::isnan(yv));
    }
}

TEST_CASE("attentive_pool CUDA with N = 0: parameter gradients are zero, nothing else is touched") {
  Stream s(kGpu);
  const AttentivePoolDims d{0, 2, 3, 4, 5, true};
  const Operands in = make_operands(d, DType::f32, 77);
  const Outputs g = run(d, DType::f32, in, kGpu, &s);
  for (const Tensor* p : {&g.dw, &g.db, &g.dv})
    for (float v : p->to_floats()) CHECK(v == 0.f);
}
