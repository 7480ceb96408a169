// The pooling and elementwise ops' CPU twins (kernels/pooling.hpp): max pool,
// global average pool and the squeeze-excitation channel gate, against
// float64 loops written from the contract (every dtype, odd H/W with floor,
// batch 1, 1x1 spatial), exact small-integer and hand-made cases (ties, NaN,
// -inf, the floor's dropped rows), finite-difference checks of every backward
// output, large logits, thread-count independence, the dispatch's argument
// checks, and PyTorch (tests/oracle/pooling.py) computing the same forward and
// backward in float64 from the same inputs. accumulate (once add_inplace,
// tested here) has test_accumulate.cpp.
// Outputs are NaN-poisoned before every run, so every element must be written.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/parallel.hpp"
#include "engine/tensor.hpp"
#include "kernels/ops.hpp"
#include "kernels/pooling.hpp"
#include "tests/kernels/tensor_bits.hpp"
#include "tests/kernels/tolerance.hpp"
#include "tests/support/oracle_files.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {

constexpr DType kFloatTypes[] = {DType::f32, DType::bf16, DType::f16};
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Dims {
  std::int64_t n;
  int h, w, c;
  std::size_t numel() const { return std::size_t(n) * h * w * c; }
  Shape shape() const { return {n, h, w, c}; }
  std::size_t at(std::int64_t in, int ih, int iw, int ic) const {
    return std::size_t(((in * h + ih) * w + iw) * c + ic);
  }
};

Tensor nhwc(const std::vector<float>& v, const Dims& d, DType t) {
  return Tensor::from_floats(v, d.shape(), t, Layout::nhwc);
}
Tensor copy_of(const Tensor& t) {
  Tensor r = Tensor::empty(t.shape(), t.dtype());
  r.copy_from(t);
  return r;
}
std::vector<double> doubles(const Tensor& t) {
  const auto f = t.to_floats();
  return {f.begin(), f.end()};
}
// Bit-level equality of floats, NaN equal to NaN.
bool same_values(const std::vector<float>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::isnan(a[i]) != std::isnan(b[i]) || (!std::isnan(a[i]) && double(a[i]) != b[i])) return false;
  return true;
}
double sigmoid64(double g) { return 1.0 / (1.0 + std::exp(-g)); }

// ---- float64 references, written from kernels/pooling.hpp's contracts ----

struct MaxRef {
  std::vector<double> y;
  std::vector<int> code;
};
MaxRef ref_max_pool(const std::vector<double>& x, const Dims& d, int p) {
  MaxRef r;
  for (std::int64_t n = 0; n < d.n; ++n)
    for (int oh = 0; oh < d.h / p; ++oh)
      for (int ow = 0; ow < d.w / p; ++ow)
        for (int c = 0; c < d.c; ++c) {
          double best = 0;
          int pos = -1;
          for (int a = 0; a < p; ++a)
            for (int b = 0; b < p; ++b) {
              const double v = x[d.at(n, oh * p + a, ow * p + b, c)];
              if (pos < 0 || v > best || std::isnan(v)) best = v, pos = a * p + b;
            }
          r.y.push_back(best);
          r.code.push_back(pos);
        }
  return r;
}
// Scatters each window's dy to its winner.
std::vector<double> ref_max_pool_bwd(const std::vector<double>& dy, const std::vector<int>& code, const Dims& d,
                                     int p) {
  std::vector<double> dx(d.numel(), 0.0);
  std::size_t o = 0;
  for (std::int64_t n = 0; n < d.n; ++n)
    for (int oh = 0; oh < d.h / p; ++oh)
      for (int ow = 0; ow < d.w / p; ++ow)
        for (int c = 0; c < d.c; ++c, ++o) dx[d.at(n, oh * p + code[o] / p, ow * p + code[o] % p, c)] = dy[o];
  return dx;
}
std::vector<double> ref_gap(const std::vector<double>& x, const Dims& d) {
  std::vector<double> y(std::size_t(d.n) * d.c, 0.0);
  for (std::int64_t n = 0; n < d.n; ++n)
    for (int h = 0; h < d.h; ++h)
      for (int w = 0; w < d.w; ++w)
        for (int c = 0; c < d.c; ++c) y[std::size_t(n * d.c + c)] += x[d.at(n, h, w, c)];
  for (double& v : y) v /= double(d.h) * d.w;
  return y;
}
std::vector<double> ref_gap_bwd(const std::vector<double>& dy, const Dims& d) {
  std::vector<double> dx(d.numel());
  for (std::size_t i = 0; i < dx.size(); ++i) dx[i] = dy[(i / (std::size_t(d.h) * d.w * d.c)) * d.c + i % d.c] / (double(d.h) * d.w);
  return dx;
}
std::vector<double> ref_gate(const std::vector<double>& x, const std::vector<double>& g, const std::vector<double>* res,
                             bool relu, const Dims& d) {
  std::vector<double> y(d.numel());
  for (std::size_t i = 0; i < y.size(); ++i) {
    const std::size_t nc = (i / (std::size_t(d.h) * d.w * d.c)) * d.c + i % d.c;
    double v = x[i] * sigmoid64(g[nc]) + (res ? (*res)[i] : 0.0);
    y[i] = relu ? (v > 0 || std::isnan(v) ? v : 0.0) : v;
  }
  return y;
}
struct GateGrads {
  std::vector<double> dy, dx, dg;  // dy after the ReLU mask (= the residual's gradient)
};
// y: the twin's forward output (the mask is y > 0 of that tensor).
GateGrads ref_gate_bwd(const std::vector<double>& x, const std::vector<double>& g, const std::vector<double>& y,
                       const std::vector<double>& dy, bool relu, const Dims& d) {
  GateGrads r{dy, std::vector<double>(d.numel()), std::vector<double>(g.size(), 0.0)};
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t nc = (i / (std::size_t(d.h) * d.w * d.c)) * d.c + i % d.c;
    if (relu && !(y[i] > 0)) r.dy[i] = 0;
    const double s = sigmoid64(g[nc]);
    r.dx[i] = r.dy[i] * s;
    r.dg[nc] += r.dy[i] * x[i] * s * (1 - s);
  }
  return r;
}

// ---- running the twins ----

struct MaxOut {
  Tensor y, code, dx;
};
MaxOut run_max_pool(const Tensor& x, int p, const Tensor& dy) {
  const Shape ys{x.size(0), x.size(1) / p, x.size(2) / p, x.size(3)};
  MaxOut o{testing::poisoned(ys, x.dtype()), testing::poisoned(ys, DType::u8), testing::poisoned(x.shape(), x.dtype())};
  ops::max_pool_forward(x, p, o.y, &o.code);
  ops::max_pool_backward(dy, o.code, p, o.dx);
  return o;
}

struct GateOut {
  Tensor y, dy, dx, dg;
};
GateOut run_gate(const Tensor& x, const Tensor& g, const Tensor* res, bool relu, const Tensor& dy) {
  GateOut o{testing::poisoned(x.shape(), x.dtype()), copy_of(dy), testing::poisoned(x.shape(), x.dtype()), testing::poisoned(g.shape(), g.dtype())};
  ops::channel_gate_forward(x, g, relu, o.y, res);
  ops::channel_gate_backward(x, g, o.dy, relu, o.dx, o.dg, &o.y);
  return o;
}

// Random inputs of one shape, rounded to dtype when made into tensors.
std::vector<float> randoms(std::size_t n, std::uint64_t seed, float lo = -1.f, float hi = 1.f) {
  return testing::random_floats(n, seed, lo, hi);
}

const Dims kShapes[] = {
    {1, 5, 7, 3},     // batch 1, odd H and W (pool 2 drops a row and a column)
    {2, 8, 8, 16},
    {3, 9, 6, 5},     // pool 3 fits H and W; pool 2 drops a row
    {1, 1, 1, 4},     // 1x1 spatial
    {2, 4, 5, 1},     // one channel
    {2, 13, 11, 37},  // a channel count over one CUDA tile of 32
};

}  // namespace

TEST_CASE("max_pool forward/backward: CPU twin vs a float64 loop, every dtype, pool 1..4, odd H/W, batch 1, 1x1") {
  std::uint64_t seed = 100;
  for (const Dims& d : kShapes)
    for (int p : {1, 2, 3, 4}) {
      if (d.h < p || d.w < p) continue;
      const Dims yd{d.n, d.h / p, d.w / p, d.c};
      for (DType t : kFloatTypes) {
        INFO("n ", d.n, " h ", d.h, " w ", d.w, " c ", d.c, " pool ", p, " ", dtype_name(t));
        const Tensor x = nhwc(randoms(d.numel(), seed++), d, t);
        const Tensor dy = nhwc(randoms(yd.numel(), seed++), yd, t);
        const MaxOut o = run_max_pool(x, p, dy);
        const MaxRef ref = ref_max_pool(doubles(x), d, p);
        // The max and the routed gradient are copies of inputs: exact.
        CHECK(same_values(o.y.to_floats(), ref.y));
        const auto code = testing::bytes_of(o.code);
        CHECK(std::vector<int>(code.begin(), code.end()) == ref.code);
        CHECK(same_values(o.dx.to_floats(), ref_max_pool_bwd(doubles(dy), ref.code, d, p)));
        // Without code (no backward follows) the same y.
        Tensor y2 = testing::poisoned(yd.shape(), t);
        ops::max_pool_forward(x, p, y2, nullptr);
        CHECK(testing::bytes_of(y2) == testing::bytes_of(o.y));
      }
    }
}

TEST_CASE("max_pool: ties go to the first in row-major order, NaN wins (a later NaN over an earlier), -inf, dropped rows") {
  // H 3, W 6, pool 2: windows at columns 0-1, 2-3, 4-5 of rows 0-1; row 2 is dropped by the floor.
  const Dims d{1, 3, 6, 1};
  const std::vector<float> x = {1, 3, kNaN, 5, 2, kNaN,        //
                                3, 2, 7, 1, 1, kNaN,           //
                                100, kNaN, 100, 100, 100, 100};
  for (DType t : kFloatTypes) {
    INFO(dtype_name(t));
    const Tensor dy = Tensor::from_floats(std::vector<float>{10, 20, 30}, {1, 1, 3, 1}, t);
    const MaxOut o = run_max_pool(nhwc(x, d, t), 2, dy);
    const auto y = o.y.to_floats();
    const auto code = testing::bytes_of(o.code);
    CHECK(y[0] == 3.f);
    CHECK(code[0] == 1);  // 3 at positions 1 and 2: the first
    CHECK(std::isnan(y[1]));
    CHECK(code[1] == 0);  // NaN first, then 5 and 7 do not beat it
    CHECK(std::isnan(y[2]));
    CHECK(code[2] == 3);  // NaN at positions 1 and 3: the later
    const std::vector<float> want_dx = {0, 10, 20, 0, 0, 0,  //
                                        0, 0, 0, 0, 0, 30,   //
                                        0, 0, 0, 0, 0, 0};
    CHECK(o.dx.to_floats() == want_dx);
  }
  // All -inf, and all equal: position 0.
  for (float v : {-kInf, 2.f}) {
    const Dims e{1, 2, 2, 1};
    const MaxOut o = run_max_pool(nhwc({v, v, v, v}, e, DType::f32), 2,
                                  Tensor::from_floats(std::vector<float>{1}, {1, 1, 1, 1}));
    CHECK(o.y.to_floats()[0] == v);
    CHECK(testing::bytes_of(o.code)[0] == 0);
    CHECK(o.dx.to_floats() == std::vector<float>{1, 0, 0, 0});
  }
}

TEST_CASE("max_pool backward: finite differences of sum(y * dy) in f32") {
  const Dims d{2, 5, 7, 3};
  const int p = 2;
  const Dims yd{d.n, d.h / p, d.w / p, d.c};
  // Distinct values 0.01 apart (no winner changes under a 1e-3 step).
  std::vector<float> xv(d.numel());
  std::mt19937_64 rng(5);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = 0.01f * float(i);
  std::shuffle(xv.begin(), xv.end(), rng);
  const std::vector<float> dyv = randoms(yd.numel(), 6);
  const Tensor dy = nhwc(dyv, yd, DType::f32);
  const MaxOut o = run_max_pool(nhwc(xv, d, DType::f32), p, dy);
  const auto dx = o.dx.to_floats();
  auto loss = [&](const std::vector<float>& xs) {
    Tensor y = testing::poisoned(yd.shape(), DType::f32);
    ops::max_pool_forward(nhwc(xs, d, DType::f32), p, y, nullptr);
    const auto yv = y.to_floats();
    double l = 0;
    for (std::size_t i = 0; i < yv.size(); ++i) l += double(yv[i]) * dyv[i];
    return l;
  };
  const float eps = 1e-3f;
  int bad = 0;
  for (std::size_t i = 0; i < xv.size(); ++i) {
    auto xp = xv, xm = xv;
    xp[i] += eps;
    xm[i] -= eps;
    const double fd = (loss(xp) - loss(xm)) / (double(xp[i]) - double(xm[i]));
    if (std::abs(fd - dx[i]) > 1e-3 + 1e-3 * std::abs(dx[i])) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE("global_avg_pool forward/backward: CPU twin vs a float64 loop, every dtype, and the documented lane order") {
  std::uint64_t seed = 200;
  std::vector<Dims> shapes(std::begin(kShapes), std::end(kShapes));
  shapes.push_back({2, 64, 64, 40});  // H*W = 4096, the largest per-sample plane of the stack
  for (const Dims& d : shapes)
    for (DType t : kFloatTypes) {
      INFO("n ", d.n, " h ", d.h, " w ", d.w, " c ", d.c, " ", dtype_name(t));
      const Dims yd{d.n, 1, 1, d.c};
      const Tensor x = nhwc(randoms(d.numel(), seed++), d, t);
      const Tensor dy = Tensor::from_floats(randoms(yd.numel(), seed++), {d.n, d.c}, t);
      Tensor y = testing::poisoned({d.n, d.c}, t), dx = testing::poisoned(d.shape(), t);
      ops::global_avg_pool_forward(x, y);
      ops::global_avg_pool_backward(dy, dx);
      const double tol = testing::rel_l2_tolerance(t);
      CHECK(testing::rel_l2(y.to_floats(), ref_gap(doubles(x), d)) <= tol);
      CHECK(testing::rel_l2(dx.to_floats(), ref_gap_bwd(doubles(dy), d)) <= tol);
      if (t == DType::f32) {  // exactly pooling.hpp's order: lane i % 8, lanes added 0..7, then / (H*W)
        const auto xf = x.to_floats(), yf = y.to_floats();
        const std::int64_t hw = std::int64_t(d.h) * d.w;
        int differ = 0;
        for (std::int64_t n = 0; n < d.n; ++n)
          for (int c = 0; c < d.c; ++c) {
            float lanes[kernels::kPoolLanes] = {};
            for (std::int64_t i = 0; i < hw; ++i) lanes[i % kernels::kPoolLanes] += xf[std::size_t((n * hw + i) * d.c + c)];
            float s = lanes[0];
            for (int l = 1; l < kernels::kPoolLanes; ++l) s += lanes[l];
            const float mean = s / float(hw);
            differ += std::memcmp(&yf[std::size_t(n * d.c + c)], &mean, sizeof mean) != 0;
          }
        CHECK(differ == 0);
      }
    }
}

TEST_CASE("global_avg_pool: small integers are exact in every dtype; NaN propagates") {
  const Dims d{3, 2, 4, 5};  // H*W = 8: sums of integers in [-3, 3] divided by 8 are exact in bf16
  for (DType t : kFloatTypes) {
    INFO(dtype_name(t));
    const Tensor x = nhwc(testing::random_small_ints(d.numel(), 9), d, t);
    const Tensor dy = Tensor::from_floats(testing::random_small_ints(std::size_t(d.n * d.c), 10), {d.n, d.c}, t);
    Tensor y = testing::poisoned({d.n, d.c}, t), dx = testing::poisoned(d.shape(), t);
    ops::global_avg_pool_forward(x, y);
    ops::global_avg_pool_backward(dy, dx);
    CHECK(same_values(y.to_floats(), ref_gap(doubles(x), d)));
    CHECK(same_values(dx.to_floats(), ref_gap_bwd(doubles(dy), d)));
  }
  auto xv = testing::random_floats(d.numel(), 11);
  xv[d.at(1, 1, 2, 3)] = kNaN;
  Tensor y = testing::poisoned({d.n, d.c}, DType::f32);
  ops::global_avg_pool_forward(nhwc(xv, d, DType::f32), y);
  const auto yv = y.to_floats();
  for (std::size_t i = 0; i < yv.size(); ++i) CHECK(std::isnan(yv[i]) == (i == std::size_t(1 * d.c + 3)));
}

TEST_CASE("global_avg_pool backward: finite differences of sum(y * dy) in f32") {
  const Dims d{2, 3, 5, 4};
  const auto xv = randoms(d.numel(), 12);
  const auto dyv = randoms(std::size_t(d.n * d.c), 13);
  Tensor dx = testing::poisoned(d.shape(), DType::f32);
  ops::global_avg_pool_backward(Tensor::from_floats(dyv, {d.n, d.c}), dx);
  const auto dxv = dx.to_floats();
  auto loss = [&](const std::vector<float>& xs) {
    Tensor y = testing::poisoned({d.n, d.c}, DType::f32);
    ops::global_avg_pool_forward(nhwc(xs, d, DType::f32), y);
    const auto yv = y.to_floats();
    double l = 0;
    for (std::size_t i = 0; i < yv.size(); ++i) l += double(yv[i]) * dyv[i];
    return l;
  };
  int bad = 0;
  for (std::size_t i = 0; i < xv.size(); ++i) {
    auto xp = xv, xm = xv;
    xp[i] += 1e-2f;
    xm[i] -= 1e-2f;
    const double fd = (loss(xp) - loss(xm)) / (double(xp[i]) - double(xm[i]));
    if (std::abs(fd - dxv[i]) > 1e-4 + 1e-3 * std::abs(dxv[i])) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE("channel_gate forward/backward: CPU twin vs a float64 loop, every dtype, residual and relu on/off") {
  std::uint64_t seed = 300;
  std::vector<Dims> shapes(std::begin(kShapes), std::end(kShapes));
  shapes.push_back({2, 64, 64, 16});  // H*W = 4096
  for (const Dims& d : shapes)
    for (DType t : kFloatTypes)
      for (bool residual : {false, true})
        for (bool relu : {false, true}) {
          INFO("n ", d.n, " h ", d.h, " w ", d.w, " c ", d.c, " ", dtype_name(t), " residual ", residual, " relu ", relu);
          const Tensor x = nhwc(randoms(d.numel(), seed++), d, t);
          const Tensor g = Tensor::from_floats(randoms(std::size_t(d.n * d.c), seed++, -4.f, 4.f), {d.n, d.c}, t);
          const Tensor res = nhwc(randoms(d.numel(), seed++), d, t);
          const Tensor dy = nhwc(randoms(d.numel(), seed++), d, t);
          const GateOut o = run_gate(x, g, residual ? &res : nullptr, relu, dy);
          const auto resv = doubles(res);
          const auto yref = ref_gate(doubles(x), doubles(g), residual ? &resv : nullptr, relu, d);
          const GateGrads gr = ref_gate_bwd(doubles(x), doubles(g), doubles(o.y), doubles(dy), relu, d);
          const double tol = testing::rel_l2_tolerance(t);
          CHECK(testing::rel_l2(o.y.to_floats(), yref) <= tol);
          CHECK(same_values(o.dy.to_floats(), gr.dy));  // the mask is exact
          CHECK(testing::rel_l2(o.dx.to_floats(), gr.dx) <= tol);
          CHECK(testing::rel_l2(o.dg.to_floats(), gr.dg) <= tol);
        }
}

TEST_CASE("channel_gate backward without relu does not read y: an undefined y gives the same bits") {
  const Dims d{2, 3, 4, 5};
  for (DType t : kFloatTypes) {
    INFO(dtype_name(t));
    const Tensor x = nhwc(randoms(d.numel(), 61), d, t);
    const Tensor g = Tensor::from_floats(randoms(std::size_t(d.n * d.c), 62, -3.f, 3.f), {d.n, d.c}, t);
    const Tensor dy0 = nhwc(randoms(d.numel(), 63), d, t);
    const GateOut o = run_gate(x, g, nullptr, false, dy0);
    Tensor dy = copy_of(dy0), dx = testing::poisoned(d.shape(), t), dg = testing::poisoned({d.n, d.c}, t);
    ops::channel_gate_backward(x, g, dy, false, dx, dg, nullptr);
    CHECK(testing::bytes_of(dy) == testing::bytes_of(dy0));  // no mask without relu
    CHECK(testing::bytes_of(dx) == testing::bytes_of(o.dx));
    CHECK(testing::bytes_of(dg) == testing::bytes_of(o.dg));
  }
}

TEST_CASE("channel_gate: large logits stay finite (stable sigmoid); NaN propagates through the gate and the ReLU") {
  const Dims d{1, 2, 1, 6};
  const std::vector<float> gv = {1000.f, -1000.f, 88.f, -88.f, 0.f, kNaN};
  const std::vector<float> xv = {1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2};
  for (DType t : kFloatTypes)
    for (bool relu : {false, true}) {
      INFO(dtype_name(t), " relu ", relu);
      const GateOut o = run_gate(nhwc(xv, d, t), Tensor::from_floats(gv, {1, 6}, t), nullptr, relu,
                                 nhwc(std::vector<float>(12, 1.f), d, t));
      const auto y = o.y.to_floats(), dg = o.dg.to_floats();
      for (int k = 0; k < 2; ++k) {
        CHECK(y[std::size_t(6 * k + 0)] == xv[std::size_t(6 * k)]);  // sigmoid(1000) = 1
        CHECK(y[std::size_t(6 * k + 1)] == 0.f);                      // sigmoid(-1000) = 0, no exp overflow
        CHECK(std::isfinite(y[std::size_t(6 * k + 2)]));
        CHECK(std::isfinite(y[std::size_t(6 * k + 3)]));
        CHECK(y[std::size_t(6 * k + 4)] == 0.5f * xv[std::size_t(6 * k)]);
        CHECK(std::isnan(y[std::size_t(6 * k + 5)]));
      }
      for (int c = 0; c < 5; ++c) CHECK(std::isfinite(dg[std::size_t(c)]));
      CHECK(dg[0] == 0.f);
      CHECK(dg[1] == 0.f);
      CHECK(dg[4] == 0.75f);  // (1 + 2) * 0.25
      CHECK(std::isnan(dg[5]));
    }
  // NaN in x survives the ReLU (PyTorch's relu keeps NaN).
  Tensor y = testing::poisoned({1, 1, 1, 2}, DType::f32);
  ops::channel_gate_forward(Tensor::from_floats(std::vector<float>{kNaN, -1.f}, {1, 1, 1, 2}),
                            Tensor::from_floats(std::vector<float>{0.f, 0.f}, {1, 2}), true, y, nullptr);
  CHECK(std::isnan(y.to_floats()[0]));
  CHECK(y.to_floats()[1] == 0.f);
}

TEST_CASE("channel_gate backward: finite differences in f32 for x, g and the residual, relu and residual on/off") {
  const Dims d{2, 3, 4, 5};
  for (bool residual : {false, true})
    for (bool relu : {false, true}) {
      INFO("residual ", residual, " relu ", relu);
      // |x| in [0.5, 1], g in [-2, 2]: |x * s| >= 0.05; the residual is moved
      // away from the ReLU's kink, so a 1e-3 step never crosses it.
      auto xv = randoms(d.numel(), 21, 0.5f, 1.f);
      const auto sign = randoms(d.numel(), 22);
      for (std::size_t i = 0; i < xv.size(); ++i) xv[i] *= sign[i] < 0 ? -1.f : 1.f;
      auto gv = randoms(std::size_t(d.n * d.c), 23, -2.f, 2.f);
      std::vector<float> rv(d.numel(), 0.f);
      if (residual) {
        rv = randoms(d.numel(), 24);
        for (std::size_t i = 0; i < rv.size(); ++i) {
          const double v = xv[i] * sigmoid64(gv[(i / (std::size_t(d.h) * d.w * d.c)) * d.c + i % d.c]) + rv[i];
          if (std::abs(v) < 0.1) rv[i] += v >= 0 ? 0.2f : -0.2f;
        }
      }
      const auto wv = randoms(d.numel(), 25);  // the loss is sum(y * w): dy = w
      auto loss = [&](const std::vector<float>& xs, const std::vector<float>& gs, const std::vector<float>& rs) {
        Tensor y = testing::poisoned(d.shape(), DType::f32);
        const Tensor rt = nhwc(rs, d, DType::f32);
        ops::channel_gate_forward(nhwc(xs, d, DType::f32), Tensor::from_floats(gs, {d.n, d.c}), relu,
                                  y, residual ? &rt : nullptr);
        const auto yv = y.to_floats();
        double l = 0;
        for (std::size_t i = 0; i < yv.size(); ++i) l += double(yv[i]) * wv[i];
        return l;
      };
      const Tensor rt = nhwc(rv, d, DType::f32);
      const GateOut o = run_gate(nhwc(xv, d, DType::f32), Tensor::from_floats(gv, {d.n, d.c}), residual ? &rt : nullptr,
                                 relu, nhwc(wv, d, DType::f32));
      const auto dx = o.dx.to_floats(), dg = o.dg.to_floats(), dres = o.dy.to_floats();
      const float eps = 1e-3f;
      auto fd_of = [&](std::vector<float> v, std::size_t i, int which) {
        auto vp = v, vm = v;
        vp[i] += eps;
        vm[i] -= eps;
        const double h = double(vp[i]) - double(vm[i]);
        if (which == 0) return (loss(vp, gv, rv) - loss(vm, gv, rv)) / h;
        if (which == 1) return (loss(xv, vp, rv) - loss(xv, vm, rv)) / h;
        return (loss(xv, gv, vp) - loss(xv, gv, vm)) / h;
      };
      auto close = [](double fd, float an) { return std::abs(fd - an) <= 2e-3 + 1e-2 * std::abs(an); };
      int bad = 0;
      for (std::size_t i = 0; i < xv.size(); ++i) bad += !close(fd_of(xv, i, 0), dx[i]);
      for (std::size_t i = 0; i < gv.size(); ++i) bad += !close(fd_of(gv, i, 1), dg[i]);
      if (residual)
        for (std::size_t i = 0; i < rv.size(); ++i) bad += !close(fd_of(rv, i, 2), dres[i]);
      CHECK(bad == 0);
      // Not vacuous: the gate's gradient is far from zero somewhere.
      double dg_norm = 0;
      for (float v : dg) dg_norm += double(v) * v;
      CHECK(dg_norm > 1e-2);
    }
}

TEST_CASE("pooling ops: the CPU twins give the same bits with 1 and 2 threads") {
  const Dims d{5, 16, 16, 24};
  const int threads = cpu_threads();
  for (DType t : kFloatTypes) {
    INFO(dtype_name(t));
    const Tensor x = nhwc(randoms(d.numel(), 41), d, t);
    const Tensor res = nhwc(randoms(d.numel(), 42), d, t);
    const Tensor dyf = nhwc(randoms(d.numel(), 43), d, t);
    const Tensor dyp = nhwc(randoms(d.numel() / 4, 44), {d.n, d.h / 2, d.w / 2, d.c}, t);
    const Tensor dyn = Tensor::from_floats(randoms(std::size_t(d.n * d.c), 45), {d.n, d.c}, t);
    const Tensor g = Tensor::from_floats(randoms(std::size_t(d.n * d.c), 46, -3.f, 3.f), {d.n, d.c}, t);
    std::vector<std::vector<std::uint8_t>> runs[2];
    for (int k = 0; k < 2; ++k) {
      set_cpu_threads(k + 1);
      const MaxOut m = run_max_pool(x, 2, dyp);
      Tensor gy = testing::poisoned({d.n, d.c}, t), gdx = testing::poisoned(d.shape(), t);
      ops::global_avg_pool_forward(x, gy);
      ops::global_avg_pool_backward(dyn, gdx);
      const GateOut o = run_gate(x, g, &res, true, dyf);
      const std::initializer_list<const Tensor*> outs{&m.y, &m.code, &m.dx, &gy, &gdx, &o.y, &o.dy, &o.dx, &o.dg};
      for (const Tensor* r : outs) runs[k].push_back(testing::bytes_of(*r));
    }
    set_cpu_threads(threads);
    REQUIRE(runs[0].size() == runs[1].size());
    for (std::size_t i = 0; i < runs[0].size(); ++i) CHECK_MESSAGE(runs[0][i] == runs[1][i], "output ", i);
  }
}

TEST_CASE("pooling ops: errors name what was expected and found") {
  const Dims d{2, 5, 7, 3};
  const Tensor x = nhwc(randoms(d.numel(), 51), d, DType::f32);
  Tensor y = Tensor::empty({2, 2, 3, 3}, DType::f32), code = Tensor::empty({2, 2, 3, 3}, DType::u8);
  auto err = testing::error_of;
  CHECK(err([&] { ops::max_pool_forward(x, 0, y, &code); }).find("pool must be in [1, 15]") != std::string::npos);
  CHECK(err([&] { ops::max_pool_forward(x, 16, y, &code); }).find("found 16") != std::string::npos);
  CHECK(err([&] { ops::max_pool_forward(x, 6, y, &code); }).find("H and W must be >= pool 6") != std::string::npos);
  CHECK(err([&] { ops::max_pool_forward(x, 3, y, &code); }) ==
        "max_pool_forward: y must have shape [2, 1, 2, 3], got [2, 2, 3, 3]");
  CHECK(err([&] { ops::max_pool_forward(x, 2, y, &code); }) == "<no error>");
  Tensor code32 = Tensor::empty({2, 2, 3, 3}, DType::i32);
  CHECK(err([&] { ops::max_pool_forward(x, 2, y, &code32); }) == "max_pool_forward: code must be u8, got i32");
  Tensor ybf = Tensor::empty({2, 2, 3, 3}, DType::bf16);
  CHECK(err([&] { ops::max_pool_forward(x, 2, ybf, &code); }).find("dtype of x") != std::string::npos);
  const Tensor x3 = Tensor::empty({2, 5, 7}, DType::f32);
  CHECK(err([&] { ops::max_pool_forward(x3, 2, y, &code); }).find("x must be [N, H, W, C], found f32[2, 5, 7]") !=
        std::string::npos);
  const Tensor xi = Tensor::empty(d.shape(), DType::i32);
  CHECK(err([&] { ops::max_pool_forward(xi, 2, y, &code); }).find("must be f32, bf16 or f16") != std::string::npos);
  Tensor dx = Tensor::empty(d.shape(), DType::f32);
  CHECK(err([&] { ops::max_pool_backward(x, code, 2, dx); }).find("dy ([N, H/pool, W/pool, C] of dx) must have shape [2, 2, 3, 3]") != std::string::npos);
  Tensor gy = Tensor::empty({2, 4}, DType::f32);
  CHECK(err([&] { ops::global_avg_pool_forward(x, gy); }) == "global_avg_pool_forward: y must have shape [2, 3], got [2, 4]");
  CHECK(err([&] { ops::global_avg_pool_backward(gy, dx); }).find("dy ([N, C] of dx)") != std::string::npos);
  const Tensor g = Tensor::empty({2, 3}, DType::f32), gbad = Tensor::empty({3, 2}, DType::f32);
  Tensor yg = Tensor::empty(d.shape(), DType::f32);
  CHECK(err([&] { ops::channel_gate_forward(x, gbad, false, yg, nullptr); }).find("g ([N, C] of x)") !=
        std::string::npos);
  const Tensor res16 = Tensor::empty(d.shape(), DType::f16);
  CHECK(err([&] { ops::channel_gate_forward(x, g, false, yg, &res16); }).find("residual must have the dtype of x") !=
        std::string::npos);
  Tensor dg16 = Tensor::empty({2, 3}, DType::f16), dyg = Tensor::empty(d.shape(), DType::f32);
  CHECK(err([&] { ops::channel_gate_backward(x, g, dyg, false, dx, dg16, &yg); }).find("dg must have the dtype of g") !=
        std::string::npos);
}

// ---- PyTorch oracle ----

namespace {

struct OracleCase {
  std::string kind;
  Dims d;
  int pool = 1;
  bool residual = false, relu = false;
  DType dtype = DType::f32;
  std::filesystem::path dir;
  std::vector<Tensor> out;  // maxpool: y, code, dx; gap: y, dx; gate: y, dx, dg, dy (the residual's gradient)
};

// rel_l2 where NaN must sit at the same places in both.
double rel_l2_nan_aware(const std::vector<float>& a, std::vector<double> b) {
  std::vector<float> a2(a);
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::isnan(a[i]) && std::isnan(b[i])) a2[i] = 0.f, b[i] = 0.0;
  return testing::rel_l2(a2, b);
}

}  // namespace

TEST_CASE("pooling CPU twins agree with PyTorch (float64): max_pool2d, mean((2,3)), x*sigmoid(g)+residual, relu") {
  const auto root = std::filesystem::temp_directory_path() / ("mf_pooling_oracle_" + std::to_string(getpid()));
  std::filesystem::create_directories(root);
  std::vector<OracleCase> cases;
  std::ofstream list(root / "cases.txt");
  std::uint64_t seed = 9000;
  auto add = [&](OracleCase c, const std::vector<float>& xv) {
    c.dir = root / ("case" + std::to_string(cases.size()));
    std::filesystem::create_directories(c.dir);
    const Dims& d = c.d;
    const Tensor x = nhwc(xv, d, c.dtype);
    testing::write_bin(c.dir / "x.bin", x.to_floats());
    if (c.kind == "maxpool") {
      const Dims yd{d.n, d.h / c.pool, d.w / c.pool, d.c};
      const Tensor dy = nhwc(randoms(yd.numel(), seed++), yd, c.dtype);
      testing::write_bin(c.dir / "dy.bin", dy.to_floats());
      MaxOut o = run_max_pool(x, c.pool, dy);
      c.out = {o.y, o.code, o.dx};
    } else if (c.kind == "gap") {
      const Tensor dy = Tensor::from_floats(randoms(std::size_t(d.n * d.c), seed++), {d.n, d.c}, c.dtype);
      testing::write_bin(c.dir / "dy.bin", dy.to_floats());
      Tensor y = testing::poisoned({d.n, d.c}, c.dtype), dx = testing::poisoned(d.shape(), c.dtype);
      ops::global_avg_pool_forward(x, y);
      ops::global_avg_pool_backward(dy, dx);
      c.out = {y, dx};
    } else {
      const Tensor g = Tensor::from_floats(randoms(std::size_t(d.n * d.c), seed++, -4.f, 4.f), {d.n, d.c}, c.dtype);
      const Tensor res = nhwc(randoms(d.numel(), seed++), d, c.dtype);
      const Tensor dy = nhwc(randoms(d.numel(), seed++), d, c.dtype);
      testing::write_bin(c.dir / "g.bin", g.to_floats());
      testing::write_bin(c.dir / "res.bin", res.to_floats());
      testing::write_bin(c.dir / "dy.bin", dy.to_floats());
      GateOut o = run_gate(x, g, c.residual ? &res : nullptr, c.relu, dy);
      c.out = {o.y, o.dx, o.dg, o.dy};
    }
    list << c.dir.string() << ' ' << c.kind << ' ' << d.n << ' ' << d.h << ' ' << d.w << ' ' << d.c << ' ' << c.pool
         << ' ' << int(c.residual) << ' ' << int(c.relu) << '\n';
    cases.push_back(std::move(c));
  };
  for (DType t : kFloatTypes) {
    for (auto [d, p] : {std::pair<Dims, int>{{1, 5, 7, 3}, 2}, {{2, 8, 8, 16}, 2}, {{2, 9, 6, 5}, 3}, {{1, 1, 1, 4}, 1}})
      add(OracleCase{"maxpool", d, p, false, false, t, {}, {}}, randoms(d.numel(), seed++));
    // Ties everywhere (integers in [-2, 2]) and NaN, alone and two in one window.
    const Dims td{2, 6, 6, 4};
    auto tv = testing::random_small_ints(td.numel(), seed++, -2, 2);
    tv[td.at(0, 0, 0, 0)] = kNaN;
    tv[td.at(1, 2, 3, 1)] = kNaN;
    tv[td.at(1, 3, 2, 1)] = kNaN;
    add(OracleCase{"maxpool", td, 2, false, false, t, {}, {}}, tv);
    for (const Dims& d : {Dims{1, 1, 1, 16}, Dims{2, 5, 7, 3}, Dims{2, 12, 10, 20}})
      add(OracleCase{"gap", d, 1, false, false, t, {}, {}}, randoms(d.numel(), seed++));
    for (const Dims& d : {Dims{1, 1, 1, 16}, Dims{2, 5, 7, 3}, Dims{2, 6, 5, 20}})
      for (bool residual : {false, true})
        for (bool relu : {false, true})
          add(OracleCase{"gate", d, 1, residual, relu, t, {}, {}}, randoms(d.numel(), seed++));
  }
  list.close();
  REQUIRE(testing::run_oracle("pooling.py", (root / "cases.txt").string()) == 0);
  for (const auto& c : cases) {
    const Dims& d = c.d;
    INFO(c.kind, " ", dtype_name(c.dtype), " n ", d.n, " h ", d.h, " w ", d.w, " c ", d.c, " pool ", c.pool,
         " residual ", c.residual, " relu ", c.relu);
    const double tol = testing::rel_l2_tolerance(c.dtype);
    const auto n_out = std::size_t(c.out[0].numel());
    CHECK(rel_l2_nan_aware(c.out[0].to_floats(), testing::read_bin<double>(c.dir / "y.bin", n_out)) <= tol);
    if (c.kind == "maxpool") {
      CHECK(testing::bytes_of(c.out[1]) == testing::read_bin<std::uint8_t>(c.dir / "code.bin", n_out));
      CHECK(rel_l2_nan_aware(c.out[2].to_floats(), testing::read_bin<double>(c.dir / "dx.bin", d.numel())) <= tol);
    } else {
      CHECK(testing::rel_l2(c.out[1].to_floats(), testing::read_bin<double>(c.dir / "dx.bin", d.numel())) <= tol);
    }
    if (c.kind == "gate") {
      CHECK(testing::rel_l2(c.out[2].to_floats(), testing::read_bin<double>(c.dir / "dg.bin", std::size_t(d.n * d.c))) <= tol);
      if (c.residual)
        CHECK(testing::rel_l2(c.out[3].to_floats(), testing::read_bin<double>(c.dir / "dres.bin", d.numel())) <= tol);
    }
  }
  std::filesystem::remove_all(root);
}
