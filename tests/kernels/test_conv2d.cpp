// conv2d on the CPU (kernels/conv2d.hpp), every CPU kernel variant (the twin,
// avx2, avx512: engine/cpu_kernels.hpp) where the CPU has it: against a naive float64 loop written
// from the contract (every dtype; strides 1 and 2; odd H/W; k 1, 3, 5, 7; Cin 1;
// batch 1; a kernel larger than the image; bias and ReLU on and off), exact
// small-integer cases (zero tolerance, ReLU ties at 0 included), finite-
// difference gradients of the float64 forward, the in-place ReLU mask of dy,
// NaN propagation, thread-count independence (bytes), the optional dx/db, the
// dispatch's argument checks, and PyTorch (tests/oracle/conv2d.py) as an
// independent oracle.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "engine/parallel.hpp"
#include "engine/tensor.hpp"
#include "kernels/conv2d.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/tolerance.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using kernels::Conv2dDims;

namespace {

// ---- the float64 reference, from the contract -------------------------------

using Vec = std::vector<double>;

Vec to_doubles(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// pre[n, oh, ow, co] = b[co] + sum_{r,s,ci} x[n, oh*st + r - k/2, ow*st + s - k/2, ci] * w[co, r, s, ci]
Vec ref_pre(const Conv2dDims& d, const Vec& x, const Vec& w, const Vec* b) {
  const int k = d.k, pad = k / 2, st = d.stride, oh_n = d.oh(), ow_n = d.ow();
  Vec pre(std::size_t(d.n * oh_n * ow_n * d.cout), 0.0);
  for (std::int64_t n = 0; n < d.n; ++n)
    for (int oh = 0; oh < oh_n; ++oh)
      for (int ow = 0; ow < ow_n; ++ow)
        for (int co = 0; co < d.cout; ++co) {
          double acc = b ? (*b)[std::size_t(co)] : 0.0;
          for (int r = 0; r < k; ++r)
            for (int s = 0; s < k; ++s) {
              const int ih = oh * st + r - pad, iw = ow * st + s - pad;
              if (ih < 0 || ih >= d.h || iw < 0 || iw >= d.w) continue;
              for (int ci = 0; ci < d.cin; ++ci)
                acc += x[std::size_t(((n * d.h + ih) * d.w + iw) * d.cin + ci)] *
                       w[std::size_t(((std::int64_t(co) * k + r) * k + s) * d.cin + ci)];
            }
          pre[std::size_t(((n * oh_n + oh) * ow_n + ow) * d.cout + co)] = acc;
        }
  return pre;
}

Vec ref_act(const Conv2dDims& d, Vec pre) {
  if (d.relu)
    for (double& v : pre) v = v <= 0 ? 0.0 : v;  // NaN passes
  return pre;
}

struct RefGrads {
  Vec dx, dw, db;
};

// Gradients of sum(pre * g) (g: the already-masked output gradient).
RefGrads ref_backward(const Conv2dDims& d, const Vec& x, const Vec& w, const Vec& g) {
  const int k = d.k, pad = k / 2, st = d.stride, oh_n = d.oh(), ow_n = d.ow();
  RefGrads r{Vec(x.size(), 0.0), Vec(w.size(), 0.0), Vec(std::size_t(d.cout), 0.0)};
  for (std::int64_t n = 0; n < d.n; ++n)
    for (int oh = 0; oh < oh_n; ++oh)
      for (int ow = 0; ow < ow_n; ++ow)
        for (int co = 0; co < d.cout; ++co) {
          const double gv = g[std::size_t(((n * oh_n + oh) * ow_n + ow) * d.cout + co)];
          r.db[std::size_t(co)] += gv;
          for (int i = 0; i < k; ++i)
            for (int j = 0; j < k; ++j) {
              const int ih = oh * st + i - pad, iw = ow * st + j - pad;
              if (ih < 0 || ih >= d.h || iw < 0 || iw >= d.w) continue;
              for (int ci = 0; ci < d.cin; ++ci) {
                const std::size_t xi = std::size_t(((n * d.h + ih) * d.w + iw) * d.cin + ci);
                const std::size_t wi = std::size_t(((std::int64_t(co) * k + i) * k + j) * d.cin + ci);
                r.dw[wi] += gv * x[xi];
                r.dx[xi] += gv * w[wi];
              }
            }
        }
  return r;
}

// ---- running the op ---------------------------------------------------------

Conv2dDims dims(std::int64_t n, int h, int w, int cin, int cout, int k, int stride, bool relu = false) {
  Conv2dDims d;
  d.n = n;
  d.h = h;
  d.w = w;
  d.cin = cin;
  d.cout = cout;
  d.k = k;
  d.stride = stride;
  d.relu = relu;
  return d;
}

Shape y_shape(const Conv2dDims& d) { return {d.n, d.oh(), d.ow(), d.cout}; }

struct Case {
  Conv2dDims d;
  DType dtype = DType::f32;
  bool bias = true;
  Tensor x, w, b, dy0;  // dy0: the output gradient before masking
  Vec xd, wd, bd, dyd;  // the values the kernel sees (rounded to dtype)
};

Case make_case(const Conv2dDims& d, DType dt, bool bias, std::uint64_t seed, bool small_ints = false) {
  Case c;
  c.d = d;
  c.dtype = dt;
  c.bias = bias;
  const std::size_t nx = std::size_t(d.n) * d.h * d.w * d.cin, nw = std::size_t(d.cout) * d.k * d.k * d.cin;
  const std::size_t ny = std::size_t(shape_numel(y_shape(d)));
  const float ws = 1.f / std::sqrt(float(d.k * d.k * d.cin));
  auto xv = small_ints ? testing::random_small_ints(nx, seed, -2, 2) : testing::random_floats(nx, seed);
  auto wv = small_ints ? testing::random_small_ints(nw, seed + 1, -2, 2) : testing::random_floats(nw, seed + 1, -ws, ws);
  auto bv = small_ints ? testing::random_small_ints(std::size_t(d.cout), seed + 2, -2, 2)
                       : testing::random_floats(std::size_t(d.cout), seed + 2, -0.2f, 0.2f);
  auto gv = small_ints ? testing::random_small_ints(ny, seed + 3, -2, 2) : testing::random_floats(ny, seed + 3);
  c.x = Tensor::from_floats(xv, {d.n, d.h, d.w, d.cin}, dt, Layout::nhwc);
  c.w = Tensor::from_floats(wv, {d.cout, d.k, d.k, d.cin}, dt);
  c.b = Tensor::from_floats(bv, {d.cout}, dt);
  c.dy0 = Tensor::from_floats(gv, y_shape(d), dt, Layout::nhwc);
  c.xd = to_doubles(c.x.to_floats());
  c.wd = to_doubles(c.w.to_floats());
  c.bd = to_doubles(c.b.to_floats());
  c.dyd = to_doubles(c.dy0.to_floats());
  return c;
}

struct Out {
  Tensor y, dy, dx, dw, db;  // dy: after the backward (masked in place with relu)
};

// Forward then backward through ops::, every output NaN-poisoned first.
Out run(const Case& c, bool with_dx = true, bool with_db = true) {
  const Conv2dDims& d = c.d;
  Out o;
  o.y = Tensor::empty(y_shape(d), c.dtype, Device::cpu(), Layout::nhwc);
  o.dy = Tensor::empty(y_shape(d), c.dtype, Device::cpu(), Layout::nhwc);
  o.dx = Tensor::empty(c.x.shape(), c.dtype, Device::cpu(), Layout::nhwc);
  o.dw = Tensor::empty(c.w.shape(), DType::f32);
  o.db = Tensor::empty({d.cout}, DType::f32);
  for (Tensor* t : {&o.y, &o.dx, &o.dw, &o.db}) t->fill_bytes(0xff);
  o.dy.copy_from(c.dy0);
  ops::conv2d_forward(c.x, c.w, d.stride, d.relu, o.y, c.bias ? &c.b : nullptr);
  ops::conv2d_backward(c.x, c.w, o.dy, d.stride, d.relu, o.dw, &o.y, with_dx ? &o.dx : nullptr,
                       with_db ? &o.db : nullptr, nullptr);
  return o;
}

std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const std::uint8_t*>(t.raw());
  return {p, p + t.nbytes()};
}

// The masked gradient the contract asks for: dy * (y > 0) with relu, else dy.
Vec masked(const Case& c, const std::vector<float>& y) {
  Vec g = c.dyd;
  if (c.d.relu)
    for (std::size_t i = 0; i < g.size(); ++i)
      if (!(y[i] > 0.f)) g[i] = 0.0;
  return g;
}

std::string describe(const Case& c) {
  const auto& d = c.d;
  return std::string(dtype_name(c.dtype)) + " n " + std::to_string(d.n) + " h " + std::to_string(d.h) + " w " +
         std::to_string(d.w) + " cin " + std::to_string(d.cin) + " cout " + std::to_string(d.cout) + " k " +
         std::to_string(d.k) + " stride " + std::to_string(d.stride) + (c.bias ? " bias" : " no-bias") +
         (d.relu ? " relu" : " linear");
}

// The shape set: odd H/W, both strides, k 1/3/5/7, Cin 1, batch 1, a kernel
// larger than the image, channel counts that are not multiples of the twin's
// 8-lane and 4-channel blocks, and a 1x1 image.
const Conv2dDims kShapes[] = {
    dims(2, 7, 9, 3, 5, 3, 1),   dims(2, 7, 9, 3, 5, 3, 2),   dims(1, 9, 7, 1, 8, 7, 2),
    dims(3, 8, 10, 16, 12, 1, 2), dims(2, 6, 5, 4, 6, 1, 1),  dims(2, 11, 6, 5, 3, 5, 2),
    dims(1, 1, 1, 2, 3, 3, 2),   dims(2, 5, 13, 9, 17, 3, 2), dims(1, 3, 2, 1, 1, 7, 1),
    dims(1, 12, 10, 2, 4, 7, 1),
};

}  // namespace

TEST_CASE("conv2d CPU variants match a float64 loop: every dtype, stride 1/2, k 1-7, bias and ReLU on/off") {
  for (const auto variant : testing::cpu_kernel_variants()) {
    const testing::CpuKernelsScope scope(variant);
    INFO("CPU variant ", cpu_kernels_name(variant));
    std::uint64_t seed = 100;
    for (DType dt : {DType::f32, DType::bf16, DType::f16})
      for (const Conv2dDims& shape : kShapes)
        for (bool bias : {true, false})
          for (bool relu : {false, true}) {
            Conv2dDims d = shape;
            d.relu = relu;
            const Case c = make_case(d, dt, bias, seed += 10);
            INFO(describe(c));
            const Out o = run(c);
            const auto y = o.y.to_floats();
            const Vec ref_y = ref_act(d, ref_pre(d, c.xd, c.wd, bias ? &c.bd : nullptr));
            const double tol = testing::rel_l2_tolerance(dt);
            CHECK(testing::rel_l2(y, ref_y) <= tol);
            // dy overwritten by exactly dy * (y > 0) (masking is exact in T).
            const Vec g = masked(c, y);
            CHECK(testing::rel_l2(o.dy.to_floats(), g) == 0.0);
            const RefGrads rg = ref_backward(d, c.xd, c.wd, g);
            CHECK(testing::rel_l2(o.dx.to_floats(), rg.dx) <= tol);
            // dw, db are f32 in every dtype, from operands exact in f32: accumulation error only.
            CHECK(testing::rel_l2(o.dw.to_floats(), rg.dw) <= 1e-5);
            CHECK(testing::rel_l2(o.db.to_floats(), rg.db) <= 1e-5);
          }
  }
}

TEST_CASE("conv2d CPU variants match a float64 loop on resnet34se-light's layer shapes") {
  // The 7x7 stride-2 stem (Cin 1), 3x3 convs at stride 1 and 2, the 1x1
  // stride-2 projection, at 40 x 50 and smaller maps; channel counts that are
  // and are not multiples of the 16- and 32-lane tiles.
  // The last two have enough conv rows (n * OH >= 64) for several dw partials
  // (kernels/conv_dw_partials.hpp), with chunk boundaries inside an image.
  const Conv2dDims shapes[] = {dims(2, 40, 50, 1, 16, 7, 2), dims(2, 20, 25, 16, 16, 3, 1),
                               dims(2, 20, 25, 16, 32, 3, 2), dims(2, 20, 25, 16, 32, 1, 2),
                               dims(3, 10, 13, 32, 64, 3, 2), dims(2, 5, 7, 64, 64, 3, 1),
                               dims(2, 9, 11, 24, 40, 3, 1),  dims(2, 9, 11, 40, 24, 3, 2),
                               dims(7, 20, 25, 16, 32, 3, 1), dims(9, 19, 13, 16, 16, 3, 2)};
  std::uint64_t seed = 1700;
  for (const auto variant : testing::cpu_kernel_variants()) {
    const testing::CpuKernelsScope scope(variant);
    INFO("CPU variant ", cpu_kernels_name(variant));
    for (const Conv2dDims& shape : shapes)
      for (DType dt : {DType::f32, DType::bf16})
        for (bool relu : {false, true}) {
          Conv2dDims d = shape;
          d.relu = relu;
          const Case c = make_case(d, dt, true, seed += 10);
          INFO(describe(c));
          const Out o = run(c);
          const auto y = o.y.to_floats();
          const double tol = testing::rel_l2_tolerance(dt);
          CHECK(testing::rel_l2(y, ref_act(d, ref_pre(d, c.xd, c.wd, &c.bd))) <= tol);
          const RefGrads rg = ref_backward(d, c.xd, c.wd, masked(c, y));
          CHECK(testing::rel_l2(o.dx.to_floats(), rg.dx) <= tol);
          CHECK(testing::rel_l2(o.dw.to_floats(), rg.dw) <= 1e-5);
          CHECK(testing::rel_l2(o.db.to_floats(), rg.db) <= 1e-5);
        }
  }
}

TEST_CASE("conv2d exact small-integer cases (ReLU ties at 0 included) with zero tolerance") {
  for (const auto variant : testing::cpu_kernel_variants()) {
    const testing::CpuKernelsScope scope(variant);
    INFO("CPU variant ", cpu_kernels_name(variant));
    std::uint64_t seed = 900;
    for (DType dt : {DType::f32, DType::bf16, DType::f16})
      for (const Conv2dDims& shape : {dims(2, 7, 9, 3, 4, 3, 2), dims(1, 9, 7, 1, 6, 7, 2), dims(2, 6, 7, 3, 5, 1, 2),
                                      dims(2, 5, 6, 2, 3, 3, 1), dims(1, 6, 5, 2, 9, 5, 1)})
        for (bool relu : {false, true}) {
          Conv2dDims d = shape;
          d.relu = relu;
          const Case c = make_case(d, dt, true, seed += 10, true);
          INFO(describe(c));
          const Out o = run(c);
          const auto y = o.y.to_floats();
          const Vec ref_y = ref_act(d, ref_pre(d, c.xd, c.wd, &c.bd));
          CHECK(testing::rel_l2(y, ref_y) == 0.0);
          int zeros = 0;
          for (float v : y) zeros += v == 0.f;
          if (relu) CHECK(zeros > 0);  // the mask's tie (y == 0 blocks) is exercised
          const Vec g = masked(c, y);
          CHECK(testing::rel_l2(o.dy.to_floats(), g) == 0.0);
          const RefGrads rg = ref_backward(d, c.xd, c.wd, g);
          CHECK(testing::rel_l2(o.dx.to_floats(), rg.dx) == 0.0);
          CHECK(testing::rel_l2(o.dw.to_floats(), rg.dw) == 0.0);
          CHECK(testing::rel_l2(o.db.to_floats(), rg.db) == 0.0);
        }
  }
}

TEST_CASE("conv2d gradients match finite differences of the float64 forward") {
  std::uint64_t seed = 3000;
  for (const Conv2dDims& shape : {dims(2, 7, 9, 3, 4, 3, 2), dims(1, 9, 7, 1, 3, 7, 2), dims(2, 6, 5, 4, 3, 1, 2),
                                  dims(2, 6, 7, 2, 3, 3, 1)})
    for (bool relu : {false, true}) {
      Conv2dDims d = shape;
      d.relu = relu;
      const Case c = make_case(d, DType::f32, true, seed += 10);
      INFO(describe(c));
      const Out o = run(c);
      // L = sum(y * r) with r = dy0: dL/dy = r. L is piecewise linear in each
      // input, so the central difference is exact (to rounding) unless the
      // perturbation moves a pre-activation across 0 (a ReLU kink): skipped.
      const Vec base = ref_pre(d, c.xd, c.wd, &c.bd);
      Vec xs = c.xd, ws = c.wd, bs = c.bd;
      auto loss = [&](bool* same_kinks) {
        const Vec pre = ref_pre(d, xs, ws, &bs);
        *same_kinks = true;
        double l = 0;
        for (std::size_t i = 0; i < pre.size(); ++i) {
          if (d.relu && (pre[i] > 0) != (base[i] > 0)) *same_kinks = false;
          l += (d.relu && pre[i] <= 0 ? 0.0 : pre[i]) * c.dyd[i];
        }
        return l;
      };
      const double eps = 1e-3;
      int checked = 0, skipped = 0;
      auto probe = [&](Vec& v, std::size_t i, double analytic) {
        const double orig = v[i];
        bool s1 = false, s2 = false;
        v[i] = orig + eps;
        const double lp = loss(&s1);
        v[i] = orig - eps;
        const double lm = loss(&s2);
        v[i] = orig;
        if (!s1 || !s2) {
          ++skipped;
          return;
        }
        const double fd = (lp - lm) / (2 * eps);
        ++checked;
        CHECK(std::abs(fd - analytic) <= 1e-4 * (1.0 + std::abs(fd)));
      };
      const auto dx = o.dx.to_floats(), dw = o.dw.to_floats(), db = o.db.to_floats();
      std::mt19937_64 rng(seed);
      for (int t = 0; t < 30; ++t) {
        const std::size_t i = rng() % xs.size(), j = rng() % ws.size();
        probe(xs, i, dx[i]);
        probe(ws, j, dw[j]);
      }
      for (int co = 0; co < d.cout; ++co) probe(bs, std::size_t(co), db[std::size_t(co)]);
      MESSAGE("finite differences (", describe(c), "): ", checked, " checked, ", skipped, " skipped at kinks");
      CHECK(checked >= 45);
    }
}

TEST_CASE("conv2d propagates NaN like PyTorch") {
  for (const auto variant : testing::cpu_kernel_variants())
    for (bool relu : {false, true}) {
      const testing::CpuKernelsScope scope(variant);
      INFO("CPU variant ", cpu_kernels_name(variant));
      const Conv2dDims d = dims(1, 7, 7, 2, 3, 3, 2, relu);
      Case c = make_case(d, DType::f32, true, 77);
      auto xv = c.x.to_floats();
      xv[std::size_t(((0 * d.h + 2) * d.w + 3) * d.cin + 1)] = NAN;
      c.x = Tensor::from_floats(xv, c.x.shape(), DType::f32, Layout::nhwc);
      c.xd = to_doubles(xv);
      const Out o = run(c);
      const auto y = o.y.to_floats();
      const Vec ref = ref_act(d, ref_pre(d, c.xd, c.wd, &c.bd));
      int nans = 0, mismatch = 0;
      for (std::size_t i = 0; i < y.size(); ++i) {
        nans += std::isnan(y[i]);
        if (std::isnan(y[i]) != std::isnan(ref[i])) ++mismatch;
        else if (!std::isnan(y[i])) CHECK(std::abs(y[i] - ref[i]) <= 1e-5);
      }
      CHECK(nans > 0);  // ReLU passes NaN
      CHECK(mismatch == 0);
      // dw sees the NaN input wherever a gradient meets it.
      int dw_nans = 0;
      for (float v : o.dw.to_floats()) dw_nans += std::isnan(v);
      CHECK(dw_nans > 0);
    }
}

TEST_CASE("conv2d CPU results do not depend on the thread count") {
  const int threads = cpu_threads();
  for (const auto variant : testing::cpu_kernel_variants())
    for (const Conv2dDims& shape : {dims(5, 12, 11, 6, 13, 3, 2), dims(3, 15, 9, 1, 9, 7, 2), dims(4, 9, 10, 8, 10, 3, 1),
                                    dims(9, 16, 12, 16, 32, 3, 1)})
      for (DType dt : {DType::f32, DType::bf16}) {
        const testing::CpuKernelsScope scope(variant);
        Conv2dDims d = shape;
        d.relu = true;
        const Case c = make_case(d, dt, true, 555);
        INFO(describe(c), " CPU variant ", cpu_kernels_name(variant));
        std::vector<std::vector<std::uint8_t>> runs;
        for (int t : {1, 2, 3, 1}) {
          set_cpu_threads(t);
          const Out o = run(c);
          std::vector<std::uint8_t> all;
          for (const Tensor* p : {&o.y, &o.dy, &o.dx, &o.dw, &o.db}) {
            const auto b = bytes_of(*p);
            all.insert(all.end(), b.begin(), b.end());
          }
          runs.push_back(std::move(all));
        }
        set_cpu_threads(threads);
        for (std::size_t i = 1; i < runs.size(); ++i) CHECK(runs[i] == runs[0]);
      }
  set_cpu_threads(threads);
}

TEST_CASE("conv2d without dx and without db: dw unchanged, nothing else written") {
  const Conv2dDims d = dims(2, 8, 7, 1, 8, 7, 2, true);
  const Case c = make_case(d, DType::f32, false, 42);
  const Out a = run(c, true, true), b = run(c, false, false);
  CHECK(bytes_of(a.dw) == bytes_of(b.dw));
  CHECK(bytes_of(a.dy) == bytes_of(b.dy));
  for (float v : b.dx.to_floats()) REQUIRE(std::isnan(v));  // still the poison
  for (float v : b.db.to_floats()) REQUIRE(std::isnan(v));
  // Without relu y is not read: an undefined y is accepted.
  Conv2dDims dl = d;
  dl.relu = false;
  const Case cl = make_case(dl, DType::f32, true, 43);
  const Out ol = run(cl);
  Tensor dy = Tensor::empty(y_shape(dl), DType::f32, Device::cpu(), Layout::nhwc), dw = Tensor::empty(cl.w.shape(), DType::f32);
  dy.copy_from(cl.dy0);
  const Tensor no_y;
  ops::conv2d_backward(cl.x, cl.w, dy, dl.stride, false, dw, &no_y, nullptr, nullptr, nullptr);
  CHECK(bytes_of(dw) == bytes_of(ol.dw));
}

TEST_CASE("conv2d dispatch rejects bad arguments with the op's name") {
  const Conv2dDims d = dims(2, 8, 8, 3, 4, 3, 2);
  const Case c = make_case(d, DType::f32, true, 1);
  Tensor y = Tensor::empty(y_shape(d), DType::f32);
  auto has = [](const std::string& m, const char* what) {
    INFO(m);
    CHECK(m.find(what) != std::string::npos);
  };
  Tensor ybad = Tensor::empty({2, 4, 5, 4}, DType::f32);
  has(testing::error_of([&] { ops::conv2d_forward(c.x, c.w, 2, false, ybad, &c.b); }),
      "conv2d_forward: y must have shape [2, 4, 4, 4]");
  Tensor y1 = Tensor::empty({2, 8, 8, 4}, DType::f32);
  has(testing::error_of([&] { ops::conv2d_forward(c.x, c.w, 2, false, y1, &c.b); }), "conv2d_forward: y");
  has(testing::error_of([&] { ops::conv2d_forward(c.x, c.w, 3, false, y, &c.b); }),
      "conv2d_forward: stride must be 1 or 2, found 3");
  Tensor w_even = Tensor::empty({4, 2, 2, 3}, DType::f32);
  has(testing::error_of([&] { ops::conv2d_forward(c.x, w_even, 2, false, y, &c.b); }), "k odd");
  Tensor w_cin = Tensor::empty({4, 3, 3, 2}, DType::f32);
  has(testing::error_of([&] { ops::conv2d_forward(c.x, w_cin, 2, false, y, &c.b); }), "Cin (2) must match");
  Tensor wbf = Tensor::empty({4, 3, 3, 3}, DType::bf16);
  has(testing::error_of([&] { ops::conv2d_forward(c.x, wbf, 2, false, y, &c.b); }),
      "conv2d_forward: w (same dtype as x) must be f32");
  Tensor bbad = Tensor::empty({5}, DType::f32);
  has(testing::error_of([&] { ops::conv2d_forward(c.x, c.w, 2, false, y, &bbad); }), "conv2d_forward: b must have shape");
  Tensor x3 = Tensor::empty({8, 8, 3}, DType::f32);
  has(testing::error_of([&] { ops::conv2d_forward(x3, c.w, 2, false, y, &c.b); }), "x must be 4-D");
  Tensor xi = Tensor::empty({2, 8, 8, 3}, DType::i32);
  has(testing::error_of([&] { ops::conv2d_forward(xi, c.w, 2, false, y, &c.b); }), "x must be f32, bf16 or f16");

  Tensor dy = Tensor::empty(y_shape(d), DType::f32), dw = Tensor::empty(c.w.shape(), DType::f32);
  Tensor dx = Tensor::empty(c.x.shape(), DType::f32), db = Tensor::empty({4}, DType::f32);
  Tensor dw_bf = Tensor::empty(c.w.shape(), DType::bf16), db_bad = Tensor::empty({3}, DType::f32);
  Tensor dx_bad = Tensor::empty({2, 8, 7, 3}, DType::f32), dy_bad = Tensor::empty({2, 8, 8, 4}, DType::f32);
  has(testing::error_of([&] { ops::conv2d_backward(c.x, c.w, dy, 2, true, dw_bf, &y, &dx, &db, nullptr); }),
      "conv2d_backward: dw must be f32");
  has(testing::error_of([&] { ops::conv2d_backward(c.x, c.w, dy, 2, true, dw, &y, &dx, &db_bad, nullptr); }),
      "conv2d_backward: db must have shape [4]");
  has(testing::error_of([&] { ops::conv2d_backward(c.x, c.w, dy, 2, true, dw, &y, &dx_bad, &db, nullptr); }),
      "conv2d_backward: dx must have shape [2, 8, 8, 3]");
  has(testing::error_of([&] { ops::conv2d_backward(c.x, c.w, dy_bad, 2, true, dw, &y, &dx, &db, nullptr); }),
      "conv2d_backward: dy must have shape [2, 4, 4, 4]");
  has(testing::error_of([&] { ops::conv2d_backward(c.x, c.w, dy, 2, true, dw, &ybad, &dx, &db, nullptr); }),
      "conv2d_backward: y (the forward's output) must have shape");
  CHECK(testing::error_of([&] { ops::conv2d_backward(c.x, c.w, dy, 2, true, dw, &y, &dx, &db, nullptr); }) == "<no error>");
}

// ---- PyTorch oracle -----------------------------------------------------------

namespace {

void write_f32(const std::filesystem::path& p, const std::vector<float>& v) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  REQUIRE(bool(f));
}

Vec read_f64(const std::filesystem::path& p, std::size_t n) {
  Vec v(n);
  std::ifstream f(p, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(double)));
  REQUIRE_MESSAGE(std::size_t(f.gcount()) == n * sizeof(double), "oracle output ", p.string(), " is short");
  return v;
}

}  // namespace

TEST_CASE("conv2d CPU variants agree with PyTorch (float64) forward and backward") {
  for (const auto variant : testing::cpu_kernel_variants()) {
    const testing::CpuKernelsScope scope(variant);
    INFO("CPU variant ", cpu_kernels_name(variant));
    const auto root = std::filesystem::temp_directory_path() / ("mf_conv2d_oracle_" + std::to_string(getpid()));
    std::filesystem::create_directories(root);
    struct OracleCase {
      Case c;
      Out o;
      std::filesystem::path dir;
    };
    std::vector<OracleCase> cases;
    std::ofstream list(root / "cases.txt");
    std::uint64_t seed = 7000;
    const Conv2dDims shapes[] = {dims(2, 7, 9, 3, 5, 3, 1), dims(2, 7, 9, 3, 5, 3, 2), dims(1, 9, 7, 1, 8, 7, 2),
                                 dims(3, 8, 10, 16, 12, 1, 2), dims(2, 11, 6, 5, 3, 5, 2), dims(1, 6, 6, 4, 4, 1, 1)};
    int i = 0;
    for (DType dt : {DType::f32, DType::bf16, DType::f16})
      for (const Conv2dDims& shape : shapes) {
        Conv2dDims d = shape;
        d.relu = (i % 2) == 0;          // ReLU on and off
        const bool bias = (i % 3) != 2;  // bias on and off
        OracleCase oc{make_case(d, dt, bias, seed += 10), Out{}, root / ("case" + std::to_string(i++))};
        oc.o = run(oc.c);
        std::filesystem::create_directories(oc.dir);
        write_f32(oc.dir / "x.bin", oc.c.x.to_floats());
        write_f32(oc.dir / "w.bin", oc.c.w.to_floats());
        write_f32(oc.dir / "b.bin", oc.c.b.to_floats());
        write_f32(oc.dir / "dy.bin", oc.c.dy0.to_floats());
        list << oc.dir.string() << ' ' << d.n << ' ' << d.h << ' ' << d.w << ' ' << d.cin << ' ' << d.cout << ' '
             << d.k << ' ' << d.stride << ' ' << int(bias) << ' ' << int(d.relu) << '\n';
        cases.push_back(std::move(oc));
      }
    list.close();
    REQUIRE(testing::run_oracle("conv2d.py", (root / "cases.txt").string()) == 0);
    for (const auto& oc : cases) {
      INFO(describe(oc.c));
      const double tol = testing::rel_l2_tolerance(oc.c.dtype);
      CHECK(testing::rel_l2(oc.o.y.to_floats(), read_f64(oc.dir / "y.bin", std::size_t(oc.o.y.numel()))) <= tol);
      CHECK(testing::rel_l2(oc.o.dx.to_floats(), read_f64(oc.dir / "dx.bin", std::size_t(oc.o.dx.numel()))) <= tol);
      // With ReLU the oracle masks by its own y: a y within rounding of 0 could
      // route differently, but random real inputs make that vanishingly rare.
      CHECK(testing::rel_l2(oc.o.dw.to_floats(), read_f64(oc.dir / "dw.bin", std::size_t(oc.o.dw.numel()))) <= 1e-5);
      if (oc.c.bias)
        CHECK(testing::rel_l2(oc.o.db.to_floats(), read_f64(oc.dir / "db.bin", std::size_t(oc.o.db.numel()))) <= 1e-5);
    }
    std::filesystem::remove_all(root);
  }
}
