// conv_relu_pool on the CPU, each variant this CPU runs (the twin, and avx512
// where the CPU has it): against a naive float64 loop (random shapes incl.
// batch 1, odd H/W, Cin 1 and 3, k 1/3/5, pool 1/2/3, and LeakCNN's layer
// shapes), exact small-integer cases (ties included, zero tolerance),
// finite-difference gradients, NaN propagation, thread-count independence,
// and the dispatch's argument checks.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/parallel.hpp"
#include "engine/tensor.hpp"
#include "kernels/conv_relu_pool.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/conv_reference.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using kernels::ConvReluPoolDims;

namespace {

double tolerance(DType t) {
  switch (t) {
    case DType::bf16: return 1e-2;
    case DType::f16: return 2e-3;
    default: return 1e-5;
  }
}

struct Case {
  ConvReluPoolDims d;
  DType dtype;
  Tensor x, w, b;
  std::vector<float> xf, wf, bf;  // the values the kernel sees (rounded to dtype)
};

Case make_case(const ConvReluPoolDims& d, DType dt, std::uint64_t seed, bool small_ints = false) {
  Case c;
  c.d = d;
  c.dtype = dt;
  const std::size_t nx = std::size_t(d.n) * d.h * d.w * d.cin, nw = std::size_t(d.cout) * d.k * d.k * d.cin;
  const float ws = 1.f / std::sqrt(float(d.k * d.k * d.cin));
  auto xv = small_ints ? testing::random_small_ints(nx, seed, -2, 2) : testing::random_floats(nx, seed);
  auto wv = small_ints ? testing::random_small_ints(nw, seed + 1, -2, 2) : testing::random_floats(nw, seed + 1, -ws, ws);
  auto bv = small_ints ? testing::random_small_ints(std::size_t(d.cout), seed + 2, -2, 2)
                       : testing::random_floats(std::size_t(d.cout), seed + 2, -0.1f, 0.1f);
  c.x = Tensor::from_floats(xv, {d.n, d.h, d.w, d.cin}, dt, Layout::nhwc);
  c.w = Tensor::from_floats(wv, {d.cout, d.k, d.k, d.cin}, dt);
  c.b = Tensor::from_floats(bv, {d.cout}, dt);
  c.xf = c.x.to_floats();
  c.wf = c.w.to_floats();
  c.bf = c.b.to_floats();
  return c;
}

std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const std::uint8_t*>(t.raw());
  return {p, p + t.nbytes()};
}

// Codes may differ from the float64 reference only at near-ties (two window
// values, or the winner and 0, closer than f32 accumulation error).
int unexplained_code_mismatches(const ConvReluPoolDims& d, const testing::ConvRef& ref,
                                const std::vector<std::uint8_t>& code) {
  const int p = d.pool, ph_n = d.ph(), pw_n = d.pw();
  int bad = 0;
  for (std::int64_t n = 0; n < d.n; ++n)
    for (int ph = 0; ph < ph_n; ++ph)
      for (int pw = 0; pw < pw_n; ++pw)
        for (int co = 0; co < d.cout; ++co) {
          const std::size_t o = ((n * ph_n + ph) * pw_n + pw) * d.cout + co;
          if (code[o] == ref.code[o]) continue;
          auto pre_at = [&](std::uint8_t c) {
            if (c == kernels::kNoGrad) return 0.0;
            return ref.pre[((n * d.h + ph * p + c / p) * d.w + pw * p + c % p) * d.cout + co];
          };
          if (std::abs(pre_at(code[o]) - pre_at(ref.code[o])) > 1e-4) ++bad;
        }
  return bad;
}

struct Grads {
  Tensor dx, dw, db;
};

Grads run_backward(const Case& c, const Tensor& dy, const Tensor& code, bool with_dx = true) {
  Grads g;
  g.dx = Tensor::empty(c.x.shape(), c.dtype, Device::cpu(), Layout::nhwc);
  g.dw = Tensor::empty(c.w.shape(), DType::f32);
  g.db = Tensor::empty(c.b.shape(), DType::f32);
  g.dx.fill_bytes(0xff);
  g.dw.fill_bytes(0xff);
  g.db.fill_bytes(0xff);
  ops::conv_relu_pool_backward(c.x, c.w, dy, code, c.d.pool, g.dw, g.db, with_dx ? &g.dx : nullptr);
  return g;
}

void check_against_reference(const ConvReluPoolDims& d, DType dt, std::uint64_t seed) {
  CAPTURE(d.n);
  CAPTURE(d.h);
  CAPTURE(d.w);
  CAPTURE(d.cin);
  CAPTURE(d.cout);
  CAPTURE(d.k);
  CAPTURE(d.pool);
  INFO("dtype ", dtype_name(dt), " seed ", seed);
  const Case c = make_case(d, dt, seed);
  const Shape ys{d.n, d.ph(), d.pw(), d.cout};
  Tensor y = Tensor::empty(ys, dt, Device::cpu(), Layout::nhwc);
  Tensor code = Tensor::empty(ys, DType::u8);
  y.fill_bytes(0xff);
  code.fill_bytes(0x77);
  ops::conv_relu_pool_forward(c.x, c.w, c.b, d.pool, y, &code);
  const auto ref = testing::conv_ref_forward(d, c.xf, c.wf, c.bf);
  CHECK(testing::rel_l2(y.to_floats(), ref.y) <= tolerance(dt));
  const auto codes = bytes_of(code);
  CHECK(unexplained_code_mismatches(d, ref, codes) == 0);

  const auto dyv = testing::random_floats(std::size_t(y.numel()), seed + 7);
  const Tensor dy = Tensor::from_floats(dyv, ys, dt, Layout::nhwc);
  const Grads g = run_backward(c, dy, code);
  const auto gref = testing::conv_ref_backward(d, c.xf, c.wf, dy.to_floats(), codes);
  // dw, db are f32 whatever T is: only accumulation error, with operands exact in f32.
  CHECK(testing::rel_l2(g.dx.to_floats(), gref.dx) <= tolerance(dt));
  CHECK(testing::rel_l2(g.dw.to_floats(), gref.dw) <= 1e-5);
  CHECK(testing::rel_l2(g.db.to_floats(), gref.db) <= 1e-5);
}

}  // namespace

TEST_CASE("conv_relu_pool CPU variants match a float64 loop over random shapes") {
  for (const auto variant : testing::cpu_kernel_variants()) {
    const testing::CpuKernelsScope scope(variant);
    INFO("CPU variant ", cpu_kernels_name(variant));
    std::mt19937_64 rng(2024);
    const ConvReluPoolDims fixed[] = {
        {1, 7, 9, 1, 5, 3, 2},   {2, 8, 8, 3, 8, 3, 2},  {1, 5, 5, 3, 4, 5, 2},   {3, 9, 7, 2, 9, 1, 2},
        {2, 6, 10, 4, 16, 3, 1}, {1, 1, 1, 1, 3, 3, 1},  {1, 3, 4, 3, 2, 3, 2},   {2, 11, 13, 1, 32, 3, 2},
        {1, 7, 7, 5, 3, 5, 3},   {4, 16, 16, 1, 32, 3, 2}, {2, 8, 8, 32, 24, 3, 2},
        {1, 1, 3, 2, 3, 3, 2},   // H < p: no output; dx, dw, db are zeros
    };
    std::uint64_t seed = 100;
    for (DType dt : {DType::f32, DType::bf16, DType::f16})
      for (const auto& d : fixed) check_against_reference(d, dt, seed++);
    // Fresh random shapes.
    std::uniform_int_distribution<int> hw(1, 12), ch(1, 12), ks(0, 2), pl(1, 2), nb(1, 3);
    for (int i = 0; i < 12; ++i) {
      ConvReluPoolDims d;
      d.n = nb(rng);
      d.h = hw(rng);
      d.w = hw(rng);
      d.cin = (i % 3 == 0) ? 1 : (i % 3 == 1 ? 3 : ch(rng));
      d.cout = ch(rng);
      d.k = 1 + 2 * ks(rng);
      d.pool = pl(rng);
      check_against_reference(d, i % 2 ? DType::f32 : DType::bf16, seed++);
    }
  }
}

TEST_CASE("conv_relu_pool CPU variants match a float64 loop on LeakCNN-64's layer shapes") {
  // Cin 1 -> 32 at 64 x 64, 32 -> 64 at 32 x 32, 64 -> 128 at 16 x 16 (batch 2),
  // and a Cout that is not a multiple of 16 or 32.
  const ConvReluPoolDims shapes[] = {
      {2, 64, 64, 1, 32, 3, 2}, {2, 32, 32, 32, 64, 3, 2}, {2, 16, 16, 64, 128, 3, 2}, {3, 12, 20, 24, 48, 3, 2}};
  std::uint64_t seed = 5000;
  for (const auto variant : testing::cpu_kernel_variants()) {
    const testing::CpuKernelsScope scope(variant);
    INFO("CPU variant ", cpu_kernels_name(variant));
    for (const auto& d : shapes) check_against_reference(d, DType::f32, seed++);
    check_against_reference(shapes[1], DType::bf16, seed++);
  }
}

TEST_CASE("conv_relu_pool exact small-integer cases (ties, zeros) with zero tolerance") {
  const ConvReluPoolDims shapes[] = {{2, 7, 9, 1, 4, 3, 2}, {1, 8, 6, 3, 5, 3, 2}, {2, 5, 5, 1, 4, 5, 2},
                                     {1, 6, 7, 3, 4, 3, 1}, {3, 4, 4, 2, 3, 1, 2}};
  for (const auto variant : testing::cpu_kernel_variants()) {
    const testing::CpuKernelsScope scope(variant);
    std::uint64_t seed = 900;
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      for (const auto& d : shapes) {
        INFO("variant ", cpu_kernels_name(variant), " dtype ", dtype_name(dt), " n ", d.n, " h ", d.h, " w ", d.w, " cin ", d.cin, " k ", d.k, " p ", d.pool);
        const Case c = make_case(d, dt, seed++, /*small_ints=*/true);
        const Shape ys{d.n, d.ph(), d.pw(), d.cout};
        Tensor y = Tensor::empty(ys, dt, Device::cpu(), Layout::nhwc);
        Tensor code = Tensor::empty(ys, DType::u8);
        ops::conv_relu_pool_forward(c.x, c.w, c.b, d.pool, y, &code);
        const auto ref = testing::conv_ref_forward(d, c.xf, c.wf, c.bf);
        const auto yv = y.to_floats();
        const auto codes = bytes_of(code);
        int ybad = 0, cbad = 0;
        for (std::size_t i = 0; i < yv.size(); ++i) {
          ybad += double(yv[i]) != ref.y[i];
          cbad += codes[i] != ref.code[i];
        }
        CHECK(ybad == 0);
        CHECK(cbad == 0);  // ties go to the first element in row-major order, <= 0 is kNoGrad
        const Tensor dy = Tensor::from_floats(testing::random_small_ints(yv.size(), seed++, -2, 2), ys, dt);
        const Grads g = run_backward(c, dy, code);
        const auto gref = testing::conv_ref_backward(d, c.xf, c.wf, dy.to_floats(), ref.code);
        CHECK(testing::rel_l2(g.dx.to_floats(), gref.dx) == 0.0);
        CHECK(testing::rel_l2(g.dw.to_floats(), gref.dw) == 0.0);
        CHECK(testing::rel_l2(g.db.to_floats(), gref.db) == 0.0);
      }
    }
  }
}

TEST_CASE("conv_relu_pool gradients match finite differences of the float64 forward") {
  const ConvReluPoolDims shapes[] = {{2, 6, 7, 3, 4, 3, 2}, {1, 5, 5, 1, 3, 5, 1}, {2, 5, 6, 2, 5, 3, 2}};
  std::uint64_t seed = 3000;
  for (const auto& d : shapes) {
    const Case c = make_case(d, DType::f32, seed++);
    const Shape ys{d.n, d.ph(), d.pw(), d.cout};
    Tensor y = Tensor::empty(ys, DType::f32), code = Tensor::empty(ys, DType::u8);
    ops::conv_relu_pool_forward(c.x, c.w, c.b, d.pool, y, &code);
    const auto rv = testing::random_floats(std::size_t(y.numel()), seed++);
    const Tensor dy = Tensor::from_floats(rv, ys);  // L = sum(y * r): dL/dy = r
    const Grads g = run_backward(c, dy, code);
    const auto base = testing::conv_ref_forward(d, c.xf, c.wf, c.bf);
    auto loss = [&](const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                    bool* same_route) {
      const auto r = testing::conv_ref_forward(d, x, w, b);
      *same_route = r.code == base.code;
      double l = 0;
      for (std::size_t i = 0; i < r.y.size(); ++i) l += r.y[i] * rv[i];
      return l;
    };
    // The loss is piecewise linear: a central difference is exact (up to
    // rounding) wherever the routing does not change, so points whose
    // perturbation flips a code (a kink or a tie) are skipped.
    const float eps = 1e-3f;
    int checked = 0, skipped = 0;
    std::mt19937_64 rng(seed++);
    std::vector<float> xs = c.xf, ws = c.wf, bs = c.bf;
    auto probe = [&](std::vector<float>& v, std::size_t i, double analytic) {
      const float orig = v[i];
      bool s1 = false, s2 = false;
      v[i] = orig + eps;
      const double lp = loss(xs, ws, bs, &s1);
      v[i] = orig - eps;
      const double lm = loss(xs, ws, bs, &s2);
      v[i] = orig;
      if (!s1 || !s2) {
        ++skipped;
        return;
      }
      const double fd = (lp - lm) / (2.0 * double(eps));
      ++checked;
      CHECK(std::abs(fd - analytic) <= 1e-4 * (1.0 + std::abs(fd)));
    };
    const auto dx = g.dx.to_floats(), dw = g.dw.to_floats(), db = g.db.to_floats();
    for (int t = 0; t < 25; ++t) {
      const std::size_t i = rng() % xs.size(), j = rng() % ws.size();
      probe(xs, i, dx[i]);
      probe(ws, j, dw[j]);
    }
    for (int co = 0; co < d.cout; ++co) probe(bs, std::size_t(co), db[co]);
    MESSAGE("finite differences: ", checked, " checked, ", skipped, " skipped at kinks");
    CHECK(checked >= 40);
  }
}

TEST_CASE("conv_relu_pool propagates NaN like PyTorch") {
  for (const auto variant : testing::cpu_kernel_variants()) {
    const testing::CpuKernelsScope scope(variant);
    INFO("CPU variant ", cpu_kernels_name(variant));
    const ConvReluPoolDims d{1, 6, 6, 2, 3, 3, 2};
    Case c = make_case(d, DType::f32, 77);
    c.xf[((0 * d.h + 2) * d.w + 3) * d.cin + 1] = NAN;
    c.x = Tensor::from_floats(c.xf, c.x.shape(), DType::f32, Layout::nhwc);
    const Shape ys{d.n, d.ph(), d.pw(), d.cout};
    Tensor y = Tensor::empty(ys, DType::f32), code = Tensor::empty(ys, DType::u8);
    ops::conv_relu_pool_forward(c.x, c.w, c.b, d.pool, y, &code);
    const auto ref = testing::conv_ref_forward(d, c.xf, c.wf, c.bf);
    const auto yv = y.to_floats();
    int nan_mismatch = 0, nans = 0;
    for (std::size_t i = 0; i < yv.size(); ++i) {
      nans += std::isnan(yv[i]);
      if (std::isnan(yv[i]) != std::isnan(ref.y[i])) ++nan_mismatch;
      else if (!std::isnan(yv[i])) CHECK(std::abs(yv[i] - ref.y[i]) <= 1e-5);
    }
    CHECK(nans > 0);
    CHECK(nan_mismatch == 0);
  }
}

TEST_CASE("conv_relu_pool CPU results do not depend on the thread count") {
  // The second shape has 360 conv rows in 11 dw chunks: groups of rows inside
  // a chunk, and chunks that start inside an image.
  const ConvReluPoolDims shapes[] = {{5, 12, 10, 3, 12, 3, 2}, {30, 12, 16, 16, 32, 3, 2}};
  for (const auto variant : testing::cpu_kernel_variants()) {
    for (const auto& d : shapes) {
      const testing::CpuKernelsScope scope(variant);
      INFO("CPU variant ", cpu_kernels_name(variant), " n ", d.n);
      const Case c = make_case(d, DType::bf16, 555);
      const Shape ys{d.n, d.ph(), d.pw(), d.cout};
      const Tensor dy = Tensor::from_floats(testing::random_floats(std::size_t(shape_numel(ys)), 556), ys, DType::bf16);
      std::vector<std::vector<std::uint8_t>> runs;
      const int threads = cpu_threads();
      for (int t : {1, 2, 3, 1}) {
        set_cpu_threads(t);
        Tensor y = Tensor::empty(ys, DType::bf16), code = Tensor::empty(ys, DType::u8);
        ops::conv_relu_pool_forward(c.x, c.w, c.b, d.pool, y, &code);
        const Grads g = run_backward(c, dy, code);
        std::vector<std::uint8_t> all = bytes_of(y);
        for (const Tensor* t2 : {static_cast<const Tensor*>(&code), &g.dx, &g.dw, &g.db}) {
          const auto b2 = bytes_of(*t2);
          all.insert(all.end(), b2.begin(), b2.end());
        }
        runs.push_back(std::move(all));
      }
      set_cpu_threads(threads);
      for (std::size_t i = 1; i < runs.size(); ++i) CHECK(runs[i] == runs[0]);
    }
  }
}

TEST_CASE("conv_relu_pool without dx and without code") {
  const ConvReluPoolDims d{2, 8, 8, 1, 8, 3, 2};
  const Case c = make_case(d, DType::f32, 42);
  const Shape ys{d.n, d.ph(), d.pw(), d.cout};
  Tensor y = Tensor::empty(ys, DType::f32), y2 = Tensor::empty(ys, DType::f32), code = Tensor::empty(ys, DType::u8);
  ops::conv_relu_pool_forward(c.x, c.w, c.b, d.pool, y, &code);
  ops::conv_relu_pool_forward(c.x, c.w, c.b, d.pool, y2, nullptr);
  CHECK(bytes_of(y) == bytes_of(y2));
  const Tensor dy = Tensor::from_floats(testing::random_floats(std::size_t(y.numel()), 43), ys);
  const Grads a = run_backward(c, dy, code, true), b = run_backward(c, dy, code, false);
  CHECK(bytes_of(a.dw) == bytes_of(b.dw));
  CHECK(bytes_of(a.db) == bytes_of(b.db));
}

TEST_CASE("conv_relu_pool dispatch rejects bad arguments with the op's name") {
  const ConvReluPoolDims d{2, 8, 8, 3, 4, 3, 2};
  const Case c = make_case(d, DType::f32, 1);
  Tensor y = Tensor::empty({2, 4, 4, 4}, DType::f32), code = Tensor::empty({2, 4, 4, 4}, DType::u8);
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Tensor ybad = Tensor::empty({2, 4, 5, 4}, DType::f32);
  auto m = message([&] { ops::conv_relu_pool_forward(c.x, c.w, c.b, 2, ybad, &code); });
  CHECK(m.find("conv_relu_pool_forward: y must have shape [2, 4, 4, 4]") != std::string::npos);
  Tensor w_even = Tensor::empty({4, 2, 2, 3}, DType::f32);
  m = message([&] { ops::conv_relu_pool_forward(c.x, w_even, c.b, 2, y, &code); });
  CHECK(m.find("k odd") != std::string::npos);
  Tensor w_cin = Tensor::empty({4, 3, 3, 2}, DType::f32);
  m = message([&] { ops::conv_relu_pool_forward(c.x, w_cin, c.b, 2, y, &code); });
  CHECK(m.find("Cin") != std::string::npos);
  Tensor wbf = Tensor::empty({4, 3, 3, 3}, DType::bf16);
  m = message([&] { ops::conv_relu_pool_forward(c.x, wbf, c.b, 2, y, &code); });
  CHECK(m.find("conv_relu_pool_forward: w (same dtype as x) must be f32, got bf16") != std::string::npos);
  m = message([&] { ops::conv_relu_pool_forward(c.x, c.w, c.b, 0, y, &code); });
  CHECK(m.find("pool") != std::string::npos);
  Tensor dw = Tensor::empty(c.w.shape(), DType::bf16), db = Tensor::empty({4}, DType::f32);
  m = message([&] { ops::conv_relu_pool_backward(c.x, c.w, y, code, 2, dw, db, nullptr); });
  CHECK(m.find("conv_relu_pool_backward: dw must be f32, got bf16") != std::string::npos);
  Tensor code_bad = Tensor::empty({2, 4, 4, 4}, DType::f32), dw32 = Tensor::empty(c.w.shape(), DType::f32);
  m = message([&] { ops::conv_relu_pool_backward(c.x, c.w, y, code_bad, 2, dw32, db, nullptr); });
  CHECK(m.find("code must be u8") != std::string::npos);
}
