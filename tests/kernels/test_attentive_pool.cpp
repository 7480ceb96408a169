// attentive_pool (kernels/attentive_pool.hpp), CPU twin: the forward and the
// saved values against a float64 loop written from the contract, every
// backward output (dx, dw, db, dv) against central finite differences of that
// float64 loop (stats on and off, the variance clamp active, W = 1, batch 1),
// exact small-integer cases, thread-count independence, the inference forward
// (no saved buffer), error messages, and PyTorch (tests/oracle/attentive_pool.py:
// voxceleb_trainer's SAP/ASP written with torch autograd in float64).
// The CUDA kernels against this twin: test_attentive_pool_gpu.cpp.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/parallel.hpp"
#include "kernels/attentive_pool.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/tensor_bits.hpp"
#include "tests/kernels/tolerance.hpp"
#include "tests/support/oracle_files.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using kernels::AttentivePoolDims;

namespace {

using Vec = std::vector<double>;

// Operands as the op sees them (already rounded to the working dtype).
struct Inputs {
  Vec x, w, b, v, dy;
};

struct RefOut {
  Vec y, xm, alpha;
};

// The contract in float64, two-pass softmax.
RefOut reference(const AttentivePoolDims& d, const Inputs& in) {
  const std::int64_t N = d.n;
  const int H = d.h, W = d.w, C = d.c, A = d.a, OC = d.out_c();
  RefOut r;
  r.y.assign(std::size_t(N * OC), 0.0);
  r.xm.assign(std::size_t(N * W * C), 0.0);
  r.alpha.assign(std::size_t(N * W), 0.0);
  for (std::int64_t n = 0; n < N; ++n) {
    Vec e(static_cast<std::size_t>(W));
    for (int t = 0; t < W; ++t) {
      double* xm = &r.xm[std::size_t((n * W + t) * C)];
      for (int c = 0; c < C; ++c) {
        double s = 0;
        for (int h = 0; h < H; ++h) s += in.x[std::size_t(((n * H + h) * W + t) * C + c)];
        xm[c] = s / H;
      }
      double et = 0;
      for (int a = 0; a < A; ++a) {
        double z = in.b[std::size_t(a)];
        for (int c = 0; c < C; ++c) z += in.w[std::size_t(a * C + c)] * xm[c];
        et += in.v[std::size_t(a)] * std::tanh(z);
      }
      e[std::size_t(t)] = et;
    }
    double m = e[0], s = 0;
    for (double et : e) m = std::max(m, et);
    for (double et : e) s += std::exp(et - m);
    for (int t = 0; t < W; ++t) r.alpha[std::size_t(n * W + t)] = std::exp(e[std::size_t(t)] - m) / s;
    for (int c = 0; c < C; ++c) {
      double mu = 0, q = 0;
      for (int t = 0; t < W; ++t) {
        const double al = r.alpha[std::size_t(n * W + t)], xv = r.xm[std::size_t((n * W + t) * C + c)];
        mu += al * xv;
        q += al * xv * xv;
      }
      r.y[std::size_t(n * OC + c)] = mu;
      if (d.stats) r.y[std::size_t(n * OC + C + c)] = std::sqrt(std::max(q - mu * mu, 1e-5));
    }
  }
  return r;
}

double probe(const AttentivePoolDims& d, const Inputs& in) {
  const auto y = reference(d, in).y;
  double s = 0;
  for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * in.dy[i];
  return s;
}

// Central differences of probe() with respect to every element of in.*field.
Vec finite_diff(const AttentivePoolDims& d, Inputs in, Vec Inputs::*field) {
  Vec& p = in.*field;
  Vec g(p.size());
  const double eps = 1e-6;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double keep = p[i];
    p[i] = keep + eps;
    const double lp = probe(d, in);
    p[i] = keep - eps;
    const double lm = probe(d, in);
    p[i] = keep;
    g[i] = (lp - lm) / (2 * eps);
  }
  return g;
}

Vec rounded(const std::vector<float>& v, DType t) {
  const auto r = Tensor::from_floats(v, {std::int64_t(v.size())}, t).to_floats();
  return Vec(r.begin(), r.end());
}
std::vector<float> floats(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

// Random operands rounded to t; w scaled by 1/sqrt(C) so tanh is not saturated.
Inputs make_inputs(const AttentivePoolDims& d, DType t, std::uint64_t seed) {
  const float ws = 1.f / std::sqrt(float(d.c));
  Inputs in;
  in.x = rounded(testing::random_floats(std::size_t(d.n * d.h * d.w * d.c), seed), t);
  in.w = rounded(testing::random_floats(std::size_t(d.a * d.c), seed + 1, -2 * ws, 2 * ws), t);
  in.b = rounded(testing::random_floats(std::size_t(d.a), seed + 2, -0.5f, 0.5f), t);
  in.v = rounded(testing::random_floats(std::size_t(d.a), seed + 3, -1.5f, 1.5f), t);
  in.dy = rounded(testing::random_floats(std::size_t(d.n * d.out_c()), seed + 4), t);
  return in;
}

struct TwinOut {
  Tensor y, saved, dx, dw, db, dv;
};

TwinOut run_twin(const AttentivePoolDims& d, DType t, const Inputs& in, bool backward = true) {
  const Tensor x = Tensor::from_floats(floats(in.x), {d.n, d.h, d.w, d.c}, t, Layout::nhwc);
  const Tensor w = Tensor::from_floats(floats(in.w), {d.a, d.c}, t);
  const Tensor b = Tensor::from_floats(floats(in.b), {d.a}, t);
  const Tensor v = Tensor::from_floats(floats(in.v), {d.a}, t);
  const Tensor dy = Tensor::from_floats(floats(in.dy), {d.n, d.out_c()}, t);
  TwinOut o;
  o.y = Tensor::empty({d.n, d.out_c()}, t);
  o.saved = Tensor::empty({kernels::attentive_pool_saved_elems(d.n, d.w, d.c, d.a, d.stats)}, DType::f32);
  o.dx = Tensor::empty(x.shape(), t, Device::cpu(), Layout::nhwc);
  o.dw = Tensor::empty({d.a, d.c}, DType::f32);
  o.db = Tensor::empty({d.a}, DType::f32);
  o.dv = Tensor::empty({d.a}, DType::f32);
  for (Tensor* p : {&o.y, &o.saved, &o.dx, &o.dw, &o.db, &o.dv}) p->fill_bytes(0xff);  // NaN: all must be written
  ops::attentive_pool_forward(x, w, b, v, d.stats, o.y, &o.saved);
  if (backward) ops::attentive_pool_backward(x, w, b, v, o.saved, dy, d.stats, o.dx, o.dw, o.db, o.dv);
  return o;
}

const AttentivePoolDims kShapes[] = {
    {2, 3, 5, 6, 4, false},  // small, generic
    {1, 2, 7, 5, 3, false},  // batch 1, odd sizes
    {3, 1, 1, 4, 2, false},  // W = 1 (alpha = 1; with stats the clamp is active)
    {2, 4, 9, 3, 7, false},  // A > C
};

// The parameter gradients are f32 in every precision, from f32 arithmetic on
// the rounded operands: only f32 summation and tanh/exp rounding remain.
constexpr double kParamTol = 1e-5;

}  // namespace

TEST_CASE("attentive_pool forward and saved values match a float64 loop, every dtype, stats on and off") {
  std::uint64_t seed = 100;
  for (AttentivePoolDims d : kShapes)
    for (bool stats : {false, true})
      for (DType t : {DType::f32, DType::bf16, DType::f16}) {
        d.stats = stats;
        INFO("dtype ", dtype_name(t), " N ", d.n, " H ", d.h, " W ", d.w, " C ", d.c, " A ", d.a, " stats ", stats);
        const Inputs in = make_inputs(d, t, seed += 10);
        const RefOut ref = reference(d, in);
        const TwinOut o = run_twin(d, t, in, false);
        CHECK(testing::rel_l2(o.y.to_floats(), ref.y) <= testing::rel_l2_tolerance(t));
        const auto s = o.saved.to_floats();
        const auto L = kernels::attentive_pool_saved_layout(d.n, d.w, d.c, d.a, d.stats);
        const std::vector<float> xm(s.begin() + L.xm, s.begin() + L.xm + d.n * d.w * d.c);
        const std::vector<float> alpha(s.begin() + L.alpha, s.begin() + L.alpha + d.n * d.w);
        CHECK(testing::rel_l2(xm, ref.xm) <= 1e-6);
        CHECK(testing::rel_l2(alpha, ref.alpha) <= 1e-5);
      }
}

TEST_CASE("attentive_pool backward matches finite differences of the float64 loop (dx, dw, db, dv)") {
  std::uint64_t seed = 500;
  for (AttentivePoolDims d : kShapes)
    for (bool stats : {false, true})
      for (DType t : {DType::f32, DType::bf16, DType::f16}) {
        d.stats = stats;
        INFO("dtype ", dtype_name(t), " N ", d.n, " H ", d.h, " W ", d.w, " C ", d.c, " A ", d.a, " stats ", stats);
        const Inputs in = make_inputs(d, t, seed += 10);
        const TwinOut o = run_twin(d, t, in);
        CHECK(testing::rel_l2(o.dx.to_floats(), finite_diff(d, in, &Inputs::x)) <= testing::rel_l2_tolerance(t));
        CHECK(testing::rel_l2(o.dw.to_floats(), finite_diff(d, in, &Inputs::w)) <= kParamTol);
        CHECK(testing::rel_l2(o.db.to_floats(), finite_diff(d, in, &Inputs::b)) <= kParamTol);
        CHECK(testing::rel_l2(o.dv.to_floats(), finite_diff(d, in, &Inputs::v)) <= kParamTol);
      }
}

TEST_CASE("attentive_pool backward with features of a large mean (x ~ 20 +- 1): the centred dL/dalpha keeps dw, db, dv accurate") {
  AttentivePoolDims d{2, 2, 9, 8, 5, false};
  for (bool stats : {false, true}) {
    d.stats = stats;
    Inputs in = make_inputs(d, DType::f32, 800 + std::uint64_t(stats));
    for (double& x : in.x) x = double(float(x + 20.0));
    for (int a = 0; a < d.a; ++a) {  // b cancels w . 20: tanh unsaturated, h varying over t
      double s = 0;
      for (int c = 0; c < d.c; ++c) s += in.w[std::size_t(a * d.c + c)];
      in.b[std::size_t(a)] = double(float(in.b[std::size_t(a)] - 20.0 * s));
    }
    const TwinOut o = run_twin(d, DType::f32, in);
    INFO("stats ", stats);
    CHECK(testing::rel_l2(o.dx.to_floats(), finite_diff(d, in, &Inputs::x)) <= 1e-5);
    CHECK(testing::rel_l2(o.dw.to_floats(), finite_diff(d, in, &Inputs::w)) <= kParamTol);
    CHECK(testing::rel_l2(o.db.to_floats(), finite_diff(d, in, &Inputs::b)) <= kParamTol);
    CHECK(testing::rel_l2(o.dv.to_floats(), finite_diff(d, in, &Inputs::v)) <= kParamTol);
  }
}

TEST_CASE("attentive_pool with the variance clamp active (x constant over time): sigma = sqrt(1e-5), no gradient through it") {
  AttentivePoolDims d{3, 2, 6, 5, 4, true};
  for (DType t : {DType::f32, DType::bf16}) {
    Inputs in = make_inputs(d, t, 900);
    // x[n, h, t, c] = x[n, h, 0, c]: every frame the same, so var = 0 (clamped).
    for (std::int64_t n = 0; n < d.n; ++n)
      for (int h = 0; h < d.h; ++h)
        for (int f = 1; f < d.w; ++f)
          for (int c = 0; c < d.c; ++c)
            in.x[std::size_t(((n * d.h + h) * d.w + f) * d.c + c)] = in.x[std::size_t(((n * d.h + h) * d.w) * d.c + c)];
    const TwinOut o = run_twin(d, t, in);
    const auto y = o.y.to_floats();
    const float floor_sigma = Tensor::from_floats(std::vector<float>{std::sqrt(1e-5f)}, {1}, t).to_floats()[0];
    for (std::int64_t n = 0; n < d.n; ++n)
      for (int c = 0; c < d.c; ++c) CHECK(y[std::size_t(n * 2 * d.c + d.c + c)] == floor_sigma);
    CHECK(testing::rel_l2(o.dx.to_floats(), finite_diff(d, in, &Inputs::x)) <= testing::rel_l2_tolerance(t));
    // With every frame the same, mu = xm whatever alpha is: the attention
    // parameters get no gradient (up to f32 rounding of sum(alpha) = 1).
    for (auto [got, want] : {std::pair{o.dw.to_floats(), finite_diff(d, in, &Inputs::w)},
                             {o.db.to_floats(), finite_diff(d, in, &Inputs::b)},
                             {o.dv.to_floats(), finite_diff(d, in, &Inputs::v)}})
      for (std::size_t i = 0; i < got.size(); ++i) {
        CHECK(std::abs(want[i]) <= 1e-8);
        CHECK(std::abs(double(got[i]) - want[i]) <= 1e-5);
      }
    // sigma's gradient is blocked: zeroing dL/dsigma changes nothing, bit for bit.
    Inputs in0 = in;
    for (std::int64_t n = 0; n < d.n; ++n)
      for (int c = 0; c < d.c; ++c) in0.dy[std::size_t(n * 2 * d.c + d.c + c)] = 0;
    const TwinOut o0 = run_twin(d, t, in0);
    CHECK(testing::same_bytes(o.dx, o0.dx));
    CHECK(testing::same_bytes(o.dw, o0.dw));
    CHECK(testing::same_bytes(o.dv, o0.dv));
  }
}

TEST_CASE("attentive_pool exact small-integer case: v = 0 gives uniform alpha, exact mu, sigma, dx; dw = db = 0") {
  // W = 4 frames, H = 2: xm = (x0 + x1) / 2, alpha = 1/4, all exact in every dtype.
  const AttentivePoolDims base{2, 2, 4, 3, 5, false};
  for (bool stats : {false, true})
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      AttentivePoolDims d = base;
      d.stats = stats;
      Inputs in = make_inputs(d, t, 1300);
      const auto xi = testing::random_small_ints(in.x.size(), 1301);
      const auto di = testing::random_small_ints(in.dy.size(), 1302);
      in.x.assign(xi.begin(), xi.end());
      in.dy.assign(di.begin(), di.end());
      in.v.assign(in.v.size(), 0.0);
      const TwinOut o = run_twin(d, t, in);
      const auto y = o.y.to_floats(), dx = o.dx.to_floats();
      const RefOut ref = reference(d, in);
      const int OC = d.out_c();
      for (std::int64_t n = 0; n < d.n; ++n)
        for (int c = 0; c < d.c; ++c) {
          const double mu = ref.y[std::size_t(n * OC + c)];  // a multiple of 1/8: exact
          CHECK(y[std::size_t(n * OC + c)] == Tensor::from_floats(std::vector<float>{float(mu)}, {1}, t).to_floats()[0]);
          if (stats) {
            double q = 0;
            for (int f = 0; f < d.w; ++f) q += ref.xm[std::size_t((n * d.w + f) * d.c + c)] * ref.xm[std::size_t((n * d.w + f) * d.c + c)] / 4;
            const float var = float(q - mu * mu);  // multiples of 1/64 below 16: exact in f32
            const float sg = std::sqrt(std::max(var, 1e-5f));
            CHECK(y[std::size_t(n * OC + d.c + c)] == Tensor::from_floats(std::vector<float>{sg}, {1}, t).to_floats()[0]);
          }
        }
      if (!stats)  // dx = dy * alpha / H = dy / 8
        for (std::int64_t n = 0; n < d.n; ++n)
          for (int h = 0; h < d.h; ++h)
            for (int f = 0; f < d.w; ++f)
              for (int c = 0; c < d.c; ++c)
                CHECK(dx[std::size_t(((n * d.h + h) * d.w + f) * d.c + c)] == float(in.dy[std::size_t(n * OC + c)] / 8));
      for (float g : o.dw.to_floats()) CHECK(g == 0.f);
      for (float g : o.db.to_floats()) CHECK(g == 0.f);
      CHECK(testing::rel_l2(o.dv.to_floats(), finite_diff(d, in, &Inputs::v)) <= kParamTol);
    }
}

TEST_CASE("attentive_pool CPU twin: the same bits on 1 and 2 threads; inference forward (no saved) gives the same y") {
  const AttentivePoolDims d{7, 3, 11, 20, 9, true};
  for (DType t : {DType::f32, DType::bf16}) {
    const Inputs in = make_inputs(d, t, 1700);
    set_cpu_threads(1);
    const TwinOut one = run_twin(d, t, in);
    set_cpu_threads(2);
    const TwinOut two = run_twin(d, t, in);
    set_cpu_threads(0);
    for (auto [a, b] : {std::pair{&one.y, &two.y}, {&one.saved, &two.saved}, {&one.dx, &two.dx},
                        {&one.dw, &two.dw}, {&one.db, &two.db}, {&one.dv, &two.dv}})
      CHECK(testing::same_bytes(*a, *b));
    const Tensor x = Tensor::from_floats(floats(in.x), {d.n, d.h, d.w, d.c}, t, Layout::nhwc);
    const Tensor w = Tensor::from_floats(floats(in.w), {d.a, d.c}, t);
    const Tensor b = Tensor::from_floats(floats(in.b), {d.a}, t), v = Tensor::from_floats(floats(in.v), {d.a}, t);
    Tensor y = Tensor::empty({d.n, 2 * d.c}, t);
    y.fill_bytes(0xff);
    ops::attentive_pool_forward(x, w, b, v, true, y, nullptr);
    CHECK(testing::same_bytes(y, one.y));
  }
}

TEST_CASE("attentive_pool propagates NaN and accepts v as PyTorch's [A, 1]") {
  AttentivePoolDims d{2, 2, 3, 4, 3, true};
  Inputs in = make_inputs(d, DType::f32, 1900);
  in.x[0] = NAN;  // sample 0 only
  const TwinOut o = run_twin(d, DType::f32, in);
  const auto y = o.y.to_floats();
  for (int c = 0; c < 2 * d.c; ++c) {
    CHECK(std::isnan(y[std::size_t(c)]));
    CHECK(!std::isnan(y[std::size_t(2 * d.c + c)]));
  }
  const Tensor x = Tensor::from_floats(floats(make_inputs(d, DType::f32, 1901).x), {2, 2, 3, 4}, DType::f32);
  const Tensor w = Tensor::from_floats(floats(in.w), {3, 4}), b = Tensor::from_floats(floats(in.b), {3});
  const Tensor v = Tensor::from_floats(floats(in.v), {3, 1}), v1 = Tensor::from_floats(floats(in.v), {3});
  Tensor y1 = Tensor::empty({2, 8}, DType::f32), y2 = Tensor::empty({2, 8}, DType::f32);
  ops::attentive_pool_forward(x, w, b, v, true, y1, nullptr);
  ops::attentive_pool_forward(x, w, b, v1, true, y2, nullptr);
  CHECK(testing::same_bytes(y1, y2));
}

TEST_CASE("attentive_pool rejects bad shapes, dtypes and a short saved buffer, naming what was expected") {
  const Tensor x = Tensor::zeros({2, 3, 5, 4}, DType::f32), w = Tensor::zeros({6, 4}, DType::f32);
  const Tensor b = Tensor::zeros({6}, DType::f32), v = Tensor::zeros({6}, DType::f32);
  const std::int64_t need = kernels::attentive_pool_saved_elems(2, 5, 4, 6, true);
  Tensor y = Tensor::zeros({2, 8}, DType::f32), saved = Tensor::zeros({need}, DType::f32);
  Tensor dy = Tensor::zeros({2, 8}, DType::f32), dx = Tensor::zeros({2, 3, 5, 4}, DType::f32);
  Tensor dw = Tensor::zeros({6, 4}, DType::f32), db = Tensor::zeros({6}, DType::f32), dv = Tensor::zeros({6}, DType::f32);
  using testing::error_of;
  CHECK(error_of([&] { ops::attentive_pool_forward(x, w, b, v, true, y, &saved); }) == "<no error>");
  CHECK(error_of([&] { ops::attentive_pool_backward(x, w, b, v, saved, dy, true, dx, dw, db, dv); }) == "<no error>");
  Tensor x3 = Tensor::zeros({2, 5, 4}, DType::f32);
  CHECK(error_of([&] { ops::attentive_pool_forward(x3, w, b, v, true, y, &saved); }).find("x must be [N, H, W, C]") !=
        std::string::npos);
  const Tensor w_bad = Tensor::zeros({6, 5}, DType::f32);
  CHECK(error_of([&] { ops::attentive_pool_forward(x, w_bad, b, v, true, y, &saved); }).find("attentive_pool_forward") !=
        std::string::npos);
  const Tensor v_bad = Tensor::zeros({5}, DType::f32);
  CHECK(error_of([&] { ops::attentive_pool_forward(x, w, b, v_bad, true, y, &saved); }).find("v") != std::string::npos);
  const Tensor w_f16 = Tensor::zeros({6, 4}, DType::f16);
  CHECK(error_of([&] { ops::attentive_pool_forward(x, w_f16, b, v, true, y, &saved); }).find("dtype of x") !=
        std::string::npos);
  Tensor y_mu = Tensor::zeros({2, 4}, DType::f32);
  CHECK(error_of([&] { ops::attentive_pool_forward(x, w, b, v, true, y_mu, &saved); }).find("[N, 2C] with stats") !=
        std::string::npos);
  CHECK(error_of([&] { ops::attentive_pool_forward(x, w, b, v, false, y_mu, &saved); }) == "<no error>");
  Tensor short_saved = Tensor::zeros({need - 1}, DType::f32);
  CHECK(error_of([&] { ops::attentive_pool_forward(x, w, b, v, true, y, &short_saved); }).find("attentive_pool_saved_elems") !=
        std::string::npos);
  Tensor dw_bf16 = Tensor::zeros({6, 4}, DType::bf16);
  CHECK(error_of([&] { ops::attentive_pool_backward(x, w, b, v, saved, dy, true, dx, dw_bf16, db, dv); })
            .find("dw, db and dv") != std::string::npos);
  Tensor dx_bad = Tensor::zeros({2, 3, 5, 5}, DType::f32);
  CHECK(error_of([&] { ops::attentive_pool_backward(x, w, b, v, saved, dy, true, dx_bad, dw, db, dv); })
            .find("dx") != std::string::npos);
  const Tensor x_i32 = Tensor::zeros({2, 3, 5, 4}, DType::i32);
  CHECK(error_of([&] { ops::attentive_pool_forward(x_i32, w, b, v, true, y, &saved); }).find("f32, bf16 or f16") !=
        std::string::npos);
}

// ---- PyTorch oracle ----

namespace {

struct OracleCase {
  AttentivePoolDims d;
  DType dtype;
  std::filesystem::path dir;
  TwinOut out;
};

}  // namespace

TEST_CASE("attentive_pool CPU twin agrees with PyTorch (float64 autograd) forward and backward") {
  const auto root = std::filesystem::temp_directory_path() / ("mf_attentive_pool_oracle_" + std::to_string(getpid()));
  std::filesystem::create_directories(root);
  const AttentivePoolDims shapes[] = {
      {3, 5, 13, 16, 12, false}, {1, 3, 7, 9, 5, false}, {2, 2, 1, 6, 4, false}, {4, 5, 25, 32, 32, false}};
  std::vector<OracleCase> cases;
  std::ofstream list(root / "cases.txt");
  std::uint64_t seed = 3000;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (AttentivePoolDims d : shapes)
      for (bool stats : {false, true}) {
        d.stats = stats;
        OracleCase c{d, t, root / ("case" + std::to_string(cases.size())), {}};
        std::filesystem::create_directories(c.dir);
        const Inputs in = make_inputs(d, t, seed += 10);
        c.out = run_twin(d, t, in);
        testing::write_bin(c.dir / "x.bin", floats(in.x));
        testing::write_bin(c.dir / "w.bin", floats(in.w));
        testing::write_bin(c.dir / "b.bin", floats(in.b));
        testing::write_bin(c.dir / "v.bin", floats(in.v));
        testing::write_bin(c.dir / "dy.bin", floats(in.dy));
        list << c.dir.string() << ' ' << d.n << ' ' << d.h << ' ' << d.w << ' ' << d.c << ' ' << d.a << ' '
             << int(stats) << '\n';
        cases.push_back(std::move(c));
      }
  list.close();
  REQUIRE(testing::run_oracle("attentive_pool.py", (root / "cases.txt").string()) == 0);
  for (const auto& c : cases) {
    const auto& d = c.d;
    INFO("dtype ", dtype_name(c.dtype), " N ", d.n, " H ", d.h, " W ", d.w, " C ", d.c, " A ", d.a, " stats ", d.stats);
    const double tol = testing::rel_l2_tolerance(c.dtype);
    CHECK(testing::rel_l2(c.out.y.to_floats(), testing::read_f64(c.dir / "y.bin", std::size_t(c.out.y.numel()))) <= tol);
    CHECK(testing::rel_l2(c.out.dx.to_floats(), testing::read_f64(c.dir / "dx.bin", std::size_t(c.out.dx.numel()))) <= tol);
    CHECK(testing::rel_l2(c.out.dw.to_floats(), testing::read_f64(c.dir / "dw.bin", std::size_t(c.out.dw.numel()))) <= kParamTol);
    CHECK(testing::rel_l2(c.out.db.to_floats(), testing::read_f64(c.dir / "db.bin", std::size_t(c.out.db.numel()))) <= kParamTol);
    CHECK(testing::rel_l2(c.out.dv.to_floats(), testing::read_f64(c.dir / "dv.bin", std::size_t(c.out.dv.numel()))) <= kParamTol);
  }
  std::filesystem::remove_all(root);
}
