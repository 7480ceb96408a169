// conv_relu_pool CUDA variants (direct, tiled, mma, cin1) against the CPU twin:
// fresh random inputs (the seed is printed on failure), every output poisoned
// before the run (y, dx with NaN bytes 0xff; code with 0x77, which is not a
// valid code), odd shapes, batch 1, Cin 1/3/16/32, a large batch, exact
// small-integer cases compared bit for bit, and bit-identical repeat runs.
//
// Tolerances against the CPU twin: y and dx as the design guide's per-precision
// bounds (both sides round one f32 result to T); dw and db are long f32 sums
// computed in different orders on both sides: 1e-4 relative L2. Codes may
// differ only at near-ties, where the two f32 sums disagree in the last bits:
// at most 0.1% of them, and every code must be valid.
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/stream.hpp"
#include "engine/tensor.hpp"
#include "kernels/conv_algo_lab.hpp"
#include "kernels/conv_relu_pool.hpp"
#include "kernels/ops.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using kernels::ConvAlgo;
using kernels::ConvReluPoolDims;

namespace {

double tolerance(DType t) { return t == DType::bf16 ? 1e-2 : (t == DType::f16 ? 2e-3 : 1e-5); }

std::uint64_t fresh_seed() {
  static std::random_device rd;
  return (std::uint64_t(rd()) << 32) ^ rd();
}

std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  const Tensor h = t.is_cuda() ? t.to(Device::cpu()) : t;
  const auto* p = static_cast<const std::uint8_t*>(h.raw());
  return {p, p + h.nbytes()};
}

struct Inputs {
  ConvReluPoolDims d;
  DType dt;
  Tensor x, w, b, dy;  // CPU
};

Inputs make_inputs(const ConvReluPoolDims& d, DType dt, std::uint64_t seed, bool small_ints) {
  Inputs in{d, dt, {}, {}, {}, {}};
  const std::size_t nx = std::size_t(d.n) * d.h * d.w * d.cin, nw = std::size_t(d.cout) * d.k * d.k * d.cin;
  const Shape ys{d.n, d.ph(), d.pw(), d.cout};
  const float ws = 1.f / std::sqrt(float(d.k * d.k * d.cin));
  auto ints = [&](std::size_t n, std::uint64_t s) { return testing::random_small_ints(n, s, -1, 1); };
  in.x = Tensor::from_floats(small_ints ? ints(nx, seed) : testing::random_floats(nx, seed), {d.n, d.h, d.w, d.cin},
                             dt, Layout::nhwc);
  in.w = Tensor::from_floats(small_ints ? ints(nw, seed + 1) : testing::random_floats(nw, seed + 1, -ws, ws),
                             {d.cout, d.k, d.k, d.cin}, dt);
  in.b = Tensor::from_floats(small_ints ? ints(std::size_t(d.cout), seed + 2)
                                        : testing::random_floats(std::size_t(d.cout), seed + 2, -0.1f, 0.1f),
                             {d.cout}, dt);
  const std::size_t ny = std::size_t(shape_numel(ys));
  in.dy = Tensor::from_floats(small_ints ? ints(ny, seed + 3) : testing::random_floats(ny, seed + 3), ys, dt,
                              Layout::nhwc);
  return in;
}

struct Outputs {
  Tensor y, code, dx, dw, db;  // on the device they were computed on
};

// Forward, then backward with `route` (the codes to use; the run's own when undefined).
Outputs run(const Inputs& in, Device dev, cudaStream_t s, const Tensor* route = nullptr) {
  const auto& d = in.d;
  const Shape ys{d.n, d.ph(), d.pw(), d.cout};
  Outputs o;
  const Tensor x = in.x.to(dev, s), w = in.w.to(dev, s), b = in.b.to(dev, s), dy = in.dy.to(dev, s);
  o.y = Tensor::empty(ys, in.dt, dev, Layout::nhwc, s);
  o.code = Tensor::empty(ys, DType::u8, dev, Layout::plain, s);
  o.dx = Tensor::empty(x.shape(), in.dt, dev, Layout::nhwc, s);
  o.dw = Tensor::empty(w.shape(), DType::f32, dev, Layout::plain, s);
  o.db = Tensor::empty(b.shape(), DType::f32, dev, Layout::plain, s);
  o.y.fill_bytes(0xff, s);
  o.code.fill_bytes(0x77, s);
  o.dx.fill_bytes(0xff, s);
  o.dw.fill_bytes(0xff, s);
  o.db.fill_bytes(0xff, s);
  ops::conv_relu_pool_forward(x, w, b, d.pool, o.y, &o.code, s);
  const Tensor r = route ? route->to(dev, s) : o.code;
  ops::conv_relu_pool_backward(x, w, dy, r, d.pool, o.dw, o.db, &o.dx, s);
  if (dev.is_cuda()) MF_CUDA_CHECK(cudaStreamSynchronize(s));
  return o;
}

struct AlgoGuard {
  ConvAlgo saved = kernels::conv_relu_pool_algo();
  explicit AlgoGuard(ConvAlgo a) { kernels::set_conv_relu_pool_algo(a); }
  ~AlgoGuard() { kernels::set_conv_relu_pool_algo(saved); }
};

void compare_random(const ConvReluPoolDims& d, DType dt, ConvAlgo algo, Stream& s) {
  const std::uint64_t seed = fresh_seed();
  INFO("algo ", std::string(kernels::conv_algo_name(algo)), " (runs ",
       std::string(kernels::conv_algo_name(kernels::conv_relu_pool_resolve_algo(d, dt, algo))), ") dtype ", dtype_name(dt),
       " n ", d.n, " h ", d.h, " w ", d.w, " cin ", d.cin, " cout ", d.cout, " k ", d.k, " p ", d.pool,
       " seed ", seed);
  const Inputs in = make_inputs(d, dt, seed, false);
  AlgoGuard guard(algo);
  const Outputs g = run(in, Device::cuda(0), s);
  const Tensor gcode = g.code.to(Device::cpu());
  const Outputs c = run(in, Device::cpu(), nullptr, &gcode);  // same routing for the backward
  CHECK(testing::rel_l2(g.y.to_floats(), c.y.to_floats()) <= tolerance(dt));
  const auto gc = bytes_of(gcode), cc = bytes_of(c.code);
  const int valid_max = d.pool * d.pool - 1;
  std::size_t invalid = 0, differ = 0;
  for (std::size_t i = 0; i < gc.size(); ++i) {
    invalid += gc[i] != kernels::kNoGrad && gc[i] > valid_max;
    differ += gc[i] != cc[i];
  }
  CHECK(invalid == 0);
  CHECK(differ <= gc.size() / 1000);
  CHECK(testing::rel_l2(g.dx.to_floats(), c.dx.to_floats()) <= tolerance(dt));
  CHECK(testing::rel_l2(g.dw.to_floats(), c.dw.to_floats()) <= 1e-4);
  CHECK(testing::rel_l2(g.db.to_floats(), c.db.to_floats()) <= 1e-4);
}

const ConvAlgo kAlgos[] = {ConvAlgo::direct,   ConvAlgo::tiled,    ConvAlgo::mma,
                           ConvAlgo::cin1,     ConvAlgo::resident, ConvAlgo::automatic};
const DType kTypes[] = {DType::f32, DType::bf16, DType::f16};

}  // namespace

TEST_CASE("every CUDA variant matches the CPU twin on fresh random inputs and odd shapes") {
  Stream s(Device::cuda(0), "conv-test");
  const ConvReluPoolDims shapes[] = {
      {1, 7, 9, 1, 5, 3, 2},      // batch 1, odd H/W, Cin 1
      {2, 9, 7, 3, 8, 3, 2},      // Cin 3
      {3, 17, 19, 16, 16, 3, 2},  // mma-eligible, odd sizes, partial tiles
      {2, 10, 6, 32, 48, 3, 1},   // pool 1, Cout not a multiple of the 64 tile
      {2, 12, 12, 16, 32, 1, 2},  // k 1
      {2, 9, 11, 4, 6, 5, 2},     // k 5
      {1, 8, 8, 2, 3, 3, 3},      // pool 3 (direct only)
      {4, 64, 64, 1, 32, 3, 2},   // LeakCNN layer 1
      {4, 32, 32, 32, 64, 3, 2},  // LeakCNN layer 2
      {4, 16, 16, 64, 128, 3, 2}, // LeakCNN layer 3
      {1, 37, 70, 1, 64, 3, 2},   // cin1: batch 1, odd H, partial tiles in both directions
      {3, 13, 11, 1, 16, 3, 1},   // cin1: pool 1, odd H/W
      {2, 20, 9, 1, 256, 3, 2},   // cin1: Cout 256, odd W
  };
  for (ConvAlgo a : kAlgos)
    for (DType dt : kTypes)
      for (const auto& d : shapes) compare_random(d, dt, a, s);
}

TEST_CASE("CUDA variants on a large batch (many dw/db chunks)") {
  Stream s(Device::cuda(0), "conv-test");
  using testing::emu_scaled;  // the emulated build runs 1/32 of the batch
  const ConvReluPoolDims shapes[] = {{emu_scaled(512, 32), 64, 64, 1, 32, 3, 2},
                                     {emu_scaled(256, 32), 32, 32, 32, 64, 3, 2},
                                     {emu_scaled(256, 32), 16, 16, 64, 128, 3, 2}};
  for (ConvAlgo a : {ConvAlgo::direct, ConvAlgo::resident, ConvAlgo::automatic})
    for (const auto& d : shapes) compare_random(d, DType::bf16, a, s);
  compare_random(shapes[0], DType::f32, ConvAlgo::cin1, s);  // Cin = 1 at batch 512: 1024 dw chunks
  compare_random(shapes[1], DType::f32, ConvAlgo::automatic, s);
  compare_random(shapes[2], DType::f16, ConvAlgo::automatic, s);
}

TEST_CASE("exact small-integer cases: every variant equals the CPU twin bit for bit") {
  // Operands in {-1, 0, 1}: products and f32 sums are exact integers, so both
  // sides hold the same f32 value and round it the same way; the routing
  // (ties: first in row-major order; <= 0: blocked) must match exactly.
  Stream s(Device::cuda(0), "conv-test");
  const ConvReluPoolDims shapes[] = {{2, 10, 12, 16, 32, 3, 2}, {3, 9, 7, 32, 16, 3, 2}, {1, 8, 8, 16, 16, 3, 1},
                                     {2, 11, 9, 1, 16, 3, 2},   {2, 6, 6, 3, 5, 5, 2},
                                     {1, 19, 67, 1, 32, 3, 2},  {2, 9, 9, 1, 64, 3, 1}};
  for (ConvAlgo a : kAlgos) {
    for (DType dt : kTypes) {
      for (const auto& d : shapes) {
        const std::uint64_t seed = fresh_seed();
        INFO("algo ", std::string(kernels::conv_algo_name(a)), " dtype ", dtype_name(dt), " n ", d.n, " h ", d.h, " w ", d.w,
             " cin ", d.cin, " cout ", d.cout, " k ", d.k, " p ", d.pool, " seed ", seed);
        const Inputs in = make_inputs(d, dt, seed, true);
        AlgoGuard guard(a);
        const Outputs g = run(in, Device::cuda(0), s);
        const Outputs c = run(in, Device::cpu(), nullptr);
        CHECK(bytes_of(g.y) == bytes_of(c.y));
        CHECK(bytes_of(g.code) == bytes_of(c.code));
        CHECK(bytes_of(g.dx) == bytes_of(c.dx));
        CHECK(bytes_of(g.dw) == bytes_of(c.dw));
        CHECK(bytes_of(g.db) == bytes_of(c.db));
      }
    }
  }
}

TEST_CASE("CUDA results are bit-identical run after run") {
  Stream s(Device::cuda(0), "conv-test");
  const ConvReluPoolDims shapes[] = {{testing::emu_scaled(64, 16), 32, 32, 32, 64, 3, 2},
                                     {testing::emu_scaled(128, 32), 64, 64, 1, 32, 3, 2}};
  for (ConvAlgo a : kAlgos) {
    for (DType dt : kTypes) {
      for (const auto& d : shapes) {
        INFO("algo ", std::string(kernels::conv_algo_name(a)), " dtype ", dtype_name(dt), " cin ", d.cin);
        AlgoGuard guard(a);
        const Inputs in = make_inputs(d, dt, fresh_seed(), false);
        const Outputs r1 = run(in, Device::cuda(0), s), r2 = run(in, Device::cuda(0), s);
        CHECK(bytes_of(r1.y) == bytes_of(r2.y));
        CHECK(bytes_of(r1.code) == bytes_of(r2.code));
        CHECK(bytes_of(r1.dx) == bytes_of(r2.dx));
        CHECK(bytes_of(r1.dw) == bytes_of(r2.dw));
        CHECK(bytes_of(r1.db) == bytes_of(r2.db));
      }
    }
  }
}

TEST_CASE("the CUDA backward without dx (the first layer's) gives the same dw and db") {
  // Same kernels with and without dx: the same bits. resident (auto's first
  // choice for bf16/f16) is the exception for Cin = 1: without dx its
  // tensor-core dw runs, with dx the cin1 fallback does both, so there dw/db
  // are checked against the CPU twin instead. dw and db are read back with no
  // stream: Tensor::to waits for the device (the op ran on a non-blocking one).
  Stream s(Device::cuda(0), "conv-test");
  const ConvReluPoolDims d{testing::emu_scaled(8, 4), 64, 64, 1, 32, 3, 2};
  for (ConvAlgo a : kAlgos) {
    for (DType dt : kTypes) {
      INFO("algo ", std::string(kernels::conv_algo_name(a)), " dtype ", dtype_name(dt));
      AlgoGuard guard(a);
      const Inputs in = make_inputs(d, dt, fresh_seed(), false);
      const Outputs full = run(in, Device::cuda(0), s);
      const Tensor x = in.x.to(Device::cuda(0), s), w = in.w.to(Device::cuda(0), s), dy = in.dy.to(Device::cuda(0), s);
      Tensor dw = Tensor::empty(w.shape(), DType::f32, Device::cuda(0), Layout::plain, s);
      Tensor db = Tensor::empty({d.cout}, DType::f32, Device::cuda(0), Layout::plain, s);
      dw.fill_bytes(0xff, s);
      db.fill_bytes(0xff, s);
      ops::conv_relu_pool_backward(x, w, dy, full.code, d.pool, dw, db, nullptr, s);
      if (kernels::conv_relu_pool_resolve_algo(d, dt, a) != ConvAlgo::resident) {
        CHECK(bytes_of(dw) == bytes_of(full.dw));
        CHECK(bytes_of(db) == bytes_of(full.db));
      } else {
        const Tensor gcode = full.code.to(Device::cpu());
        const Outputs c = run(in, Device::cpu(), nullptr, &gcode);
        CHECK(testing::rel_l2(dw.to_floats(), c.dw.to_floats()) <= 1e-4);
        CHECK(testing::rel_l2(db.to_floats(), c.db.to_floats()) <= 1e-4);
      }
    }
  }
}

TEST_CASE("a layer with no pooled output (H or W below the pool): every variant writes zero dw, db and dx") {
  // resident's Cin = 1 dw once divided by a zero tile width or height here.
  Stream s(Device::cuda(0), "conv-test");
  const ConvReluPoolDims shapes[] = {{2, 1, 8, 1, 16, 3, 2}, {2, 8, 1, 1, 16, 3, 2}, {2, 1, 8, 16, 32, 3, 2}};
  for (ConvAlgo a : kAlgos)
    for (DType dt : kTypes)
      for (const auto& d : shapes) {
        INFO("algo ", std::string(kernels::conv_algo_name(a)), " dtype ", dtype_name(dt), " h ", d.h, " w ", d.w,
             " cin ", d.cin);
        AlgoGuard guard(a);
        const Inputs in = make_inputs(d, dt, fresh_seed(), false);
        const Outputs full = run(in, Device::cuda(0), s);  // with dx
        const Tensor x = in.x.to(Device::cuda(0), s), w = in.w.to(Device::cuda(0), s),
                     dy = in.dy.to(Device::cuda(0), s);
        Tensor dw = Tensor::empty(w.shape(), DType::f32, Device::cuda(0), Layout::plain, s);
        Tensor db = Tensor::empty({d.cout}, DType::f32, Device::cuda(0), Layout::plain, s);
        dw.fill_bytes(0xff, s);
        db.fill_bytes(0xff, s);
        ops::conv_relu_pool_backward(x, w, dy, full.code, d.pool, dw, db, nullptr, s);  // without dx
        MF_CUDA_CHECK(cudaStreamSynchronize(s));
        const Tensor* outs[] = {&dw, &db, &full.dw, &full.db, &full.dx};
        for (const Tensor* t : outs) {
          const auto v = t->to_floats();
          CHECK(std::count(v.begin(), v.end(), 0.f) == std::ptrdiff_t(v.size()));
        }
      }
}
