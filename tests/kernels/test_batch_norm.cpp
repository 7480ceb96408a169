// batch_norm CPU twin (kernels/batch_norm.hpp): against a naive float64 loop
// written from the contract (every dtype, residual and ReLU on and off, odd
// shapes, batch 1, M = 2), exact small-integer cases, finite differences of
// the forward for every backward output, data with a large mean (log-mel
// values around -40 dB), bits independent of the thread count, the errors,
// and PyTorch (tests/oracle/batch_norm.py: F.batch_norm with running buffers,
// autograd, eval mode) as an independent oracle.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "engine/parallel.hpp"
#include "engine/tensor.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/tensor_bits.hpp"
#include "tests/kernels/tolerance.hpp"
#include "tests/support/oracle_files.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {

std::int64_t rows_of(const Shape& s) { return shape_numel(s) / s.back(); }

// The contract in float64: statistics, running update, forward, backward.
struct Ref {
  std::vector<double> mean, invstd, rm, rv, y, dy, dx, dgamma, dbeta;
};

Ref ref_train(const std::vector<float>& x, std::int64_t M, std::int64_t C, const std::vector<float>& g,
              const std::vector<float>& b, const std::vector<float>* res, bool relu, double eps, double mom,
              const std::vector<float>& rm0, const std::vector<float>& rv0) {
  Ref r;
  r.mean.assign(std::size_t(C), 0);
  r.invstd.assign(std::size_t(C), 0);
  r.rm.assign(std::size_t(C), 0);
  r.rv.assign(std::size_t(C), 0);
  r.y.assign(std::size_t(M * C), 0);
  for (std::int64_t c = 0; c < C; ++c) {
    double s = 0, q = 0;
    for (std::int64_t i = 0; i < M; ++i) s += x[std::size_t(i * C + c)];
    const double mu = s / double(M);
    for (std::int64_t i = 0; i < M; ++i) q += (x[std::size_t(i * C + c)] - mu) * (x[std::size_t(i * C + c)] - mu);
    const double var = q / double(M);
    r.mean[std::size_t(c)] = mu;
    r.invstd[std::size_t(c)] = 1 / std::sqrt(var + eps);
    r.rm[std::size_t(c)] = (1 - mom) * rm0[std::size_t(c)] + mom * mu;
    r.rv[std::size_t(c)] = (1 - mom) * rv0[std::size_t(c)] + mom * q / double(M - 1);
    for (std::int64_t i = 0; i < M; ++i) {
      const std::size_t k = std::size_t(i * C + c);
      double v = double(g[std::size_t(c)]) * (x[k] - mu) * r.invstd[std::size_t(c)] + b[std::size_t(c)];
      if (res) v += (*res)[k];
      r.y[k] = relu ? std::max(v, 0.0) : v;
    }
  }
  return r;
}

// Backward from the reference statistics; the ReLU mask comes from `ymask`
// (the twin's stored y, so a y rounded to 0 in bf16 masks both alike).
void ref_backward(Ref& r, const std::vector<float>& x, std::int64_t M, std::int64_t C, const std::vector<float>& g,
                  const std::vector<float>& dy, const std::vector<float>* ymask) {
  r.dy.assign(dy.begin(), dy.end());
  if (ymask)
    for (std::size_t k = 0; k < r.dy.size(); ++k)
      if (!((*ymask)[k] > 0.f)) r.dy[k] = 0;
  r.dx.assign(std::size_t(M * C), 0);
  r.dgamma.assign(std::size_t(C), 0);
  r.dbeta.assign(std::size_t(C), 0);
  for (std::int64_t c = 0; c < C; ++c) {
    const double mu = r.mean[std::size_t(c)], is = r.invstd[std::size_t(c)];
    double sb = 0, sg = 0;
    for (std::int64_t i = 0; i < M; ++i) {
      const std::size_t k = std::size_t(i * C + c);
      sb += r.dy[k];
      sg += r.dy[k] * (x[k] - mu) * is;
    }
    r.dbeta[std::size_t(c)] = sb;
    r.dgamma[std::size_t(c)] = sg;
    for (std::int64_t i = 0; i < M; ++i) {
      const std::size_t k = std::size_t(i * C + c);
      r.dx[k] = g[std::size_t(c)] * is * (r.dy[k] - sb / double(M) - (x[k] - mu) * is * sg / double(M));
    }
  }
}

// One training forward + backward of the twin (or the GPU: tests/kernels/
// test_batch_norm_gpu.cpp has its own), inputs given as floats.
struct Run {
  Tensor x, gamma, beta, res, rm, rv, sm, si, y, dy, dx, dg, db;
};

Run make_run(const Shape& shape, DType t, std::uint64_t seed, bool with_res, float xmean = 0.f, float xsd = 1.f) {
  const std::int64_t C = shape.back(), n = shape_numel(shape);
  Run r;
  r.x = Tensor::from_floats(testing::random_normal_floats(std::size_t(n), seed, xmean, xsd), shape, t,
                            shape.size() == 4 ? Layout::nhwc : Layout::plain);
  r.gamma = Tensor::from_floats(testing::random_floats(std::size_t(C), seed + 1, 0.5f, 1.5f), {C}, t);
  r.beta = Tensor::from_floats(testing::random_floats(std::size_t(C), seed + 2, -0.5f, 0.5f), {C}, t);
  if (with_res) r.res = Tensor::from_floats(testing::random_floats(std::size_t(n), seed + 3), shape, t);
  r.rm = Tensor::from_floats(testing::random_floats(std::size_t(C), seed + 4, -0.2f, 0.2f), {C});
  r.rv = Tensor::from_floats(testing::random_floats(std::size_t(C), seed + 5, 0.5f, 2.f), {C});
  r.sm = Tensor::empty({C}, DType::f32);
  r.si = Tensor::empty({C}, DType::f32);
  r.y = Tensor::empty(shape, t);
  r.dy = Tensor::from_floats(testing::random_floats(std::size_t(n), seed + 6), shape, t);
  r.dx = Tensor::empty(shape, t);
  r.dg = Tensor::empty({C}, DType::f32);
  r.db = Tensor::empty({C}, DType::f32);
  return r;
}

void run_train(Run& r, bool relu, float eps = 1e-5f, float mom = 0.1f) {
  ops::batch_norm_train_forward(r.x, r.gamma, r.beta, r.rm, r.rv, eps, mom, relu, r.sm, r.si,
                                r.y, r.res.defined() ? &r.res : nullptr, nullptr);
  ops::batch_norm_backward(r.x, r.gamma, r.sm, r.si, r.dy, relu, r.dx, r.dg, r.db, &r.y, nullptr);
}

// dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)) cancels (to
// ~0 when M = 2): its error is measured against the size of the cancelling
// terms, ||gamma * invstd * dy||, when that is the larger.
double dx_error(const Tensor& dx, const std::vector<double>& want, const Tensor& gamma, const Tensor& invstd,
                const Tensor& dy_masked) {
  const auto a = dx.to_floats(), g = gamma.to_floats(), is = invstd.to_floats(), dy = dy_masked.to_floats();
  const std::size_t C = g.size();
  double num = 0, den = 0, scale = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    if (std::isnan(a[k])) return INFINITY;
    num += (a[k] - want[k]) * (a[k] - want[k]);
    den += want[k] * want[k];
    const double t = double(g[k % C]) * is[k % C] * dy[k];
    scale += t * t;
  }
  return std::sqrt(num / std::max({den, scale, 1e-300}));
}

// The mean's error in units of the data's spread (a relative error of the
// mean itself is ill-conditioned when the mean is ~0).
double mean_error(const Tensor& mean, const Ref& ref) {
  const auto m = mean.to_floats();
  double e = 0;
  for (std::size_t c = 0; c < m.size(); ++c) {
    if (std::isnan(m[c])) return INFINITY;
    const double t = (m[c] - ref.mean[c]) * ref.invstd[c];
    e += t * t;
  }
  return std::sqrt(e / double(m.size()));
}

const Shape kShapes[] = {{2, 5, 7, 16}, {1, 3, 5, 7}, {2, 1, 1, 3}, {37, 5}, {3, 9, 11, 33}, {4, 50, 100, 5}};

}  // namespace

TEST_CASE("batch_norm train forward + backward: twin vs float64 contract, every dtype, residual and relu") {
  std::uint64_t seed = 100;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (const Shape& shape : kShapes)
      for (bool with_res : {false, true})
        for (bool relu : {false, true}) {
          INFO(dtype_name(t), " ", shape_str(shape), " residual ", with_res, " relu ", relu);
          Run r = make_run(shape, t, seed += 10, with_res);
          const std::int64_t M = rows_of(shape), C = shape.back();
          const auto x = r.x.to_floats(), g = r.gamma.to_floats(), b = r.beta.to_floats(), dy0 = r.dy.to_floats();
          const auto rm0 = r.rm.to_floats(), rv0 = r.rv.to_floats();
          const auto resv = with_res ? r.res.to_floats() : std::vector<float>{};
          run_train(r, relu);
          Ref ref = ref_train(x, M, C, g, b, with_res ? &resv : nullptr, relu, 1e-5, 0.1, rm0, rv0);
          const auto yv = r.y.to_floats();
          ref_backward(ref, x, M, C, g, dy0, relu ? &yv : nullptr);
          const double tol = testing::rel_l2_tolerance(t);
          CHECK(testing::rel_l2(yv, ref.y) <= tol);
          CHECK(mean_error(r.sm, ref) <= 1e-6);
          CHECK(testing::rel_l2(r.si.to_floats(), ref.invstd) <= 1e-5);
          CHECK(testing::rel_l2(r.rm.to_floats(), ref.rm) <= 1e-5);
          CHECK(testing::rel_l2(r.rv.to_floats(), ref.rv) <= 1e-5);
          CHECK(testing::rel_l2(r.dy.to_floats(), ref.dy) == 0.0);  // masking is exact
          CHECK(dx_error(r.dx, ref.dx, r.gamma, r.si, r.dy) <= tol);
          CHECK(testing::rel_l2(r.dg.to_floats(), ref.dgamma) <= 1e-5);
          CHECK(testing::rel_l2(r.db.to_floats(), ref.dbeta) <= 1e-5);
        }
}

TEST_CASE("batch_norm eval forward: twin vs float64 contract, every dtype; batch 1 spatial 1x1 is fine in eval") {
  std::uint64_t seed = 900;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (const Shape& shape : {Shape{1, 1, 1, 8}, Shape{2, 5, 7, 16}, Shape{1, 3, 5, 7}, Shape{37, 5}})
      for (bool with_res : {false, true})
        for (bool relu : {false, true}) {
          INFO(dtype_name(t), " ", shape_str(shape), " residual ", with_res, " relu ", relu);
          Run r = make_run(shape, t, seed += 10, with_res);
          const std::int64_t M = rows_of(shape), C = shape.back();
          const auto x = r.x.to_floats(), g = r.gamma.to_floats(), b = r.beta.to_floats();
          const auto rm = r.rm.to_floats(), rv = r.rv.to_floats();
          const auto resv = with_res ? r.res.to_floats() : std::vector<float>{};
          const float eps = 1e-3f;
          ops::batch_norm_eval_forward(r.x, r.gamma, r.beta, r.rm, r.rv, eps, relu, r.y, with_res ? &r.res : nullptr);
          std::vector<double> want(std::size_t(M * C));
          for (std::int64_t i = 0; i < M; ++i)
            for (std::int64_t c = 0; c < C; ++c) {
              const std::size_t k = std::size_t(i * C + c);
              double v = double(g[std::size_t(c)]) * (x[k] - rm[std::size_t(c)]) /
                             std::sqrt(double(rv[std::size_t(c)]) + double(eps)) + b[std::size_t(c)];
              if (with_res) v += resv[k];
              want[k] = relu ? std::max(v, 0.0) : v;
            }
          CHECK(testing::rel_l2(r.y.to_floats(), want) <= testing::rel_l2_tolerance(t));
          CHECK(r.rm.to_floats() == rm);  // eval leaves the running statistics alone
          CHECK(r.rv.to_floats() == rv);
        }
}

TEST_CASE("batch_norm exact small-integer case (M = 2): statistics, running update, relu mask, dx = 0") {
  // Channel 0 {1, 3}: mean 2, var 1; channel 1 {-6, -2}: mean -4, var 4
  // (invstd 0.5). eps 0, momentum 0.5 from rm 0, rv 1: rm {1, -2}, the
  // unbiased variances {2, 8} give rv {1.5, 4.5}. With M = 2, y does not
  // depend on x (xhat = -1, +1), so dx = 0 exactly.
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (bool relu : {false, true}) {
      INFO(dtype_name(t), " relu ", relu);
      const Tensor x = Tensor::from_floats(std::vector<float>{1, -6, 3, -2}, {2, 1, 1, 2}, t, Layout::nhwc);
      const Tensor g = Tensor::from_floats(std::vector<float>{2, 1}, {2}, t);
      const Tensor b = Tensor::from_floats(std::vector<float>{0.5f, -1}, {2}, t);
      Tensor rm = Tensor::from_floats(std::vector<float>{0, 0}, {2});
      Tensor rv = Tensor::from_floats(std::vector<float>{1, 1}, {2});
      Tensor sm = Tensor::empty({2}, DType::f32), si = Tensor::empty({2}, DType::f32);
      Tensor y = Tensor::empty({2, 1, 1, 2}, t), dx = Tensor::empty({2, 1, 1, 2}, t);
      Tensor dy = Tensor::from_floats(std::vector<float>{1, 2, 4, 3}, {2, 1, 1, 2}, t);
      Tensor dg = Tensor::empty({2}, DType::f32), db = Tensor::empty({2}, DType::f32);
      ops::batch_norm_train_forward(x, g, b, rm, rv, 0.f, 0.5f, relu, sm, si, y, nullptr, nullptr);
      CHECK(sm.to_floats() == std::vector<float>{2, -4});
      CHECK(si.to_floats() == std::vector<float>{1, 0.5f});
      CHECK(rm.to_floats() == std::vector<float>{1, -2});
      CHECK(rv.to_floats() == std::vector<float>{1.5f, 4.5f});
      // y: channel 0 {-1.5, 2.5}, channel 1 {-2, 0}.
      CHECK(y.to_floats() == (relu ? std::vector<float>{0, 0, 2.5f, 0} : std::vector<float>{-1.5f, -2, 2.5f, 0}));
      ops::batch_norm_backward(x, g, sm, si, dy, relu, dx, dg, db, &y, nullptr);
      CHECK(dx.to_floats() == std::vector<float>{0, 0, 0, 0});
      if (relu) {
        CHECK(dy.to_floats() == std::vector<float>{0, 0, 4, 0});
        CHECK(db.to_floats() == std::vector<float>{4, 0});
        CHECK(dg.to_floats() == std::vector<float>{4, 0});
      } else {
        CHECK(db.to_floats() == std::vector<float>{5, 5});
        CHECK(dg.to_floats() == std::vector<float>{3, 1});  // sum dy * xhat: -1 + 4, -2 + 3
      }
    }
}

TEST_CASE("batch_norm backward: finite differences of the f32 forward for dx, dgamma, dbeta, d(residual)") {
  // L = sum(w * y); dy = w. Central differences of the twin's forward in f32
  // (h = 1e-2 on O(1) data); a coordinate whose perturbation moves some y
  // across the ReLU's kink is skipped (its derivative is not defined there).
  const Shape shape{2, 3, 1, 3};
  const std::int64_t C = shape.back();
  for (bool with_res : {false, true})
    for (bool relu : {false, true}) {
      INFO("residual ", with_res, " relu ", relu);
      Run r = make_run(shape, DType::f32, 4242 + 7 * with_res + relu, with_res);
      const auto w = r.dy.to_floats();
      auto forward = [&](const Tensor& x, const Tensor& g, const Tensor& b, const Tensor& res, std::vector<float>* y_out) {
        Tensor rm = Tensor::zeros({C}, DType::f32), rv = Tensor::zeros({C}, DType::f32);
        Tensor sm = Tensor::empty({C}, DType::f32), si = Tensor::empty({C}, DType::f32), y = Tensor::empty(shape, DType::f32);
        ops::batch_norm_train_forward(x, g, b, rm, rv, 1e-5f, 0.1f, relu, sm, si, y, with_res ? &res : nullptr,
                                      nullptr);
        const auto yv = y.to_floats();
        if (y_out) *y_out = yv;
        double l = 0;
        for (std::size_t k = 0; k < yv.size(); ++k) l += double(w[k]) * yv[k];
        return l;
      };
      run_train(r, relu);
      std::vector<float> y0;
      forward(r.x, r.gamma, r.beta, r.res, &y0);
      // Numerical gradient of L with respect to every element of `p`.
      int skipped = 0, checked = 0;
      auto numeric = [&](Tensor& p) {
        std::vector<double> out(std::size_t(p.numel()), 0);
        float* v = p.data<float>();
        for (std::int64_t i = 0; i < p.numel(); ++i) {
          const float keep = v[i], h = 1e-2f;
          std::vector<float> yp, ym;
          v[i] = keep + h;
          const double lp = forward(r.x, r.gamma, r.beta, r.res, &yp);
          v[i] = keep - h;
          const double lm = forward(r.x, r.gamma, r.beta, r.res, &ym);
          v[i] = keep;
          bool kink = false;
          for (std::size_t k = 0; k < yp.size() && relu; ++k) kink |= (yp[k] > 0.f) != (ym[k] > 0.f) || (yp[k] > 0.f) != (y0[k] > 0.f);
          out[std::size_t(i)] = kink ? NAN : (lp - lm) / (2.0 * h);
          (kink ? skipped : checked) += 1;
        }
        return out;
      };
      auto compare = [&](const std::vector<float>& analytic, const std::vector<double>& num, const char* what) {
        std::vector<double> a, b;
        for (std::size_t k = 0; k < num.size(); ++k)
          if (!std::isnan(num[k])) {
            a.push_back(analytic[k]);
            b.push_back(num[k]);
          }
        INFO(what);
        CHECK(testing::rel_l2(a, b) <= 2e-3);
      };
      compare(r.dx.to_floats(), numeric(r.x), "dx");
      compare(r.dg.to_floats(), numeric(r.gamma), "dgamma");
      compare(r.db.to_floats(), numeric(r.beta), "dbeta");
      if (with_res) compare(r.dy.to_floats(), numeric(r.res), "d(residual) = the masked dy");
      CHECK(checked > 3 * skipped);
    }
}

TEST_CASE("batch_norm statistics with a large mean: log-mel-like -40 dB +- 5, and mean 1000 +- 1") {
  for (auto [mu, sd] : {std::pair<float, float>{-40.f, 5.f}, {1000.f, 1.f}})
    for (const Shape& shape : {Shape{8, 64, 40, 16}, Shape{3, 7, 5, 4}}) {
      INFO("mean ", mu, " sd ", sd, " ", shape_str(shape));
      Run r = make_run(shape, DType::f32, 31337, false, mu, sd);
      const std::int64_t M = rows_of(shape), C = shape.back();
      const auto x = r.x.to_floats(), dy0 = r.dy.to_floats();
      const auto rm0 = r.rm.to_floats(), rv0 = r.rv.to_floats();
      run_train(r, false);
      Ref ref = ref_train(x, M, C, r.gamma.to_floats(), r.beta.to_floats(), nullptr, false, 1e-5, 0.1, rm0, rv0);
      ref_backward(ref, x, M, C, r.gamma.to_floats(), dy0, nullptr);
      // invstd to ~1e-6 relative although mean^2 / var is 64 (and 10^6): no
      // E[x^2] - E[x]^2 cancellation, and the shift keeps Chan's delta terms
      // exact enough. y, dx and dgamma go through xhat = (x - save_mean) *
      // invstd with save_mean in f32: ulp(1000) / 2 / std = 3e-5 bounds them
      // at 1000 +- 1; at -40 +- 5 (the log-mel case) they meet f32's 1e-5.
      const double tol = mu > 100.f ? 1e-4 : 1e-5;
      CHECK(testing::rel_l2(r.si.to_floats(), ref.invstd) <= 2e-6);
      CHECK(testing::rel_l2(r.sm.to_floats(), ref.mean) <= 1e-6);
      CHECK(testing::rel_l2(r.rv.to_floats(), ref.rv) <= 2e-6);
      CHECK(testing::rel_l2(r.y.to_floats(), ref.y) <= tol);
      CHECK(dx_error(r.dx, ref.dx, r.gamma, r.si, r.dy) <= tol);
      CHECK(testing::rel_l2(r.dg.to_floats(), ref.dgamma) <= tol);
    }
}

TEST_CASE("batch_norm CPU twin: the same bits for 1 and 2 threads (several row groups), and in place (y = x, y = residual)") {
  const Shape shape{8, 50, 60, 12};  // M = 24000: row groups of 128 rows
  for (DType t : {DType::f32, DType::bf16})
    for (bool relu : {false, true}) {
      Run a = make_run(shape, t, 77, true, -40.f, 5.f), b = make_run(shape, t, 77, true, -40.f, 5.f);
      set_cpu_threads(1);
      run_train(a, relu);
      set_cpu_threads(2);
      run_train(b, relu);
      set_cpu_threads(0);
      CHECK(testing::same_bytes(a.y, b.y));
      CHECK(testing::same_bytes(a.sm, b.sm));
      CHECK(testing::same_bytes(a.si, b.si));
      CHECK(testing::same_bytes(a.rm, b.rm));
      CHECK(testing::same_bytes(a.rv, b.rv));
      CHECK(testing::same_bytes(a.dy, b.dy));
      CHECK(testing::same_bytes(a.dx, b.dx));
      CHECK(testing::same_bytes(a.dg, b.dg));
      CHECK(testing::same_bytes(a.db, b.db));
      // In place: y = x and dx = dy give the same bits.
      Run c = make_run(shape, t, 77, true, -40.f, 5.f);
      ops::batch_norm_train_forward(c.x, c.gamma, c.beta, c.rm, c.rv, 1e-5f, 0.1f, relu, c.sm, c.si, c.x, &c.res,
                                    nullptr);
      CHECK(testing::same_bytes(c.x, a.y));
      ops::batch_norm_backward(make_run(shape, t, 77, true, -40.f, 5.f).x, c.gamma, c.sm, c.si, c.dy, relu, c.dy, c.dg,
                               c.db, &c.x, nullptr);
      CHECK(testing::same_bytes(c.dy, a.dx));
      CHECK(testing::same_bytes(c.dg, a.dg));
      // In place on the residual: y = residual gives the same bits too.
      Run e = make_run(shape, t, 77, true, -40.f, 5.f);
      ops::batch_norm_train_forward(e.x, e.gamma, e.beta, e.rm, e.rv, 1e-5f, 0.1f, relu, e.sm, e.si, e.res, &e.res,
                                    nullptr);
      CHECK(testing::same_bytes(e.res, a.y));
    }
}

TEST_CASE("batch_norm errors name what was expected and found") {
  Run r = make_run({1, 1, 1, 4}, DType::f32, 5, false);
  auto train = [&](Run& q) {
    ops::batch_norm_train_forward(q.x, q.gamma, q.beta, q.rm, q.rv, 1e-5f, 0.1f, false, q.sm, q.si, q.y, nullptr,
                                  nullptr);
  };
  CHECK(testing::error_of([&] { train(r); }).find("more than 1 value per channel when training (M = N*H*W = 1") !=
        std::string::npos);
  CHECK(testing::error_of([&] { ops::batch_norm_backward(r.x, r.gamma, r.sm, r.si, r.dy, false, r.dx, r.dg, r.db, &r.y,
                                                         nullptr); })
            .find("more than 1 value per channel") != std::string::npos);
  Run q = make_run({2, 3, 3, 4}, DType::f32, 6, false);
  q.gamma = Tensor::zeros({5}, DType::f32);
  CHECK(testing::error_of([&] { train(q); }).find("gamma") != std::string::npos);
  q = make_run({2, 3, 3, 4}, DType::bf16, 6, false);
  q.rm = Tensor::zeros({4}, DType::bf16);
  CHECK(testing::error_of([&] { train(q); }).find("running_mean (f32 [C])") != std::string::npos);
  q = make_run({2, 3, 3, 4}, DType::f32, 6, false);
  q.y = Tensor::empty({2, 3, 3, 4}, DType::f16);
  CHECK(testing::error_of([&] { train(q); }).find("y must have x's dtype f32") != std::string::npos);
  Tensor bad_res = Tensor::zeros({2, 3, 4, 4}, DType::f32);
  CHECK(testing::error_of([&] {
          ops::batch_norm_train_forward(q.x, q.gamma, q.beta, q.rm, q.rv, 1e-5f, 0.1f, false, q.sm, q.si, q.x, &bad_res,
                                        nullptr);
        }).find("residual must have x's shape") != std::string::npos);
  CHECK(testing::error_of([&] {
          ops::batch_norm_train_forward(q.x, q.gamma, q.beta, q.rm, q.rv, 1e-5f, 1.5f, false, q.sm, q.si, q.x, nullptr,
                                        nullptr);
        }).find("momentum must be in [0, 1]") != std::string::npos);
  Tensor flat = Tensor::zeros({4}, DType::f32);
  CHECK(testing::error_of([&] {
          ops::batch_norm_eval_forward(flat, q.gamma, q.beta, q.rm, q.rv, 1e-5f, false, flat, nullptr);
        }).find("at least 2 dimensions") != std::string::npos);
}

namespace {

struct OracleCase {
  Shape shape;
  DType dtype;
  bool res, relu;
  std::filesystem::path dir;
  Run run;
  Tensor y_eval;
};

}  // namespace

TEST_CASE("batch_norm CPU twin agrees with PyTorch (float64): train forward, running buffers, autograd, eval") {
  const auto root = std::filesystem::temp_directory_path() / ("mf_bn_oracle_" + std::to_string(getpid()));
  std::filesystem::create_directories(root);
  std::vector<OracleCase> cases;
  std::ofstream list(root / "cases.txt");
  std::uint64_t seed = 5000;
  const float eps = 1e-5f, mom = 0.1f;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (const Shape& shape : {Shape{2, 5, 7, 16}, Shape{1, 3, 4, 5}, Shape{2, 1, 1, 3}, Shape{4, 9, 8, 32}})
      for (int combo = 0; combo < 4; ++combo) {
        OracleCase c;
        c.shape = shape;
        c.dtype = t;
        c.res = combo & 1;
        c.relu = combo & 2;
        c.dir = root / ("case" + std::to_string(cases.size()));
        std::filesystem::create_directories(c.dir);
        const bool big_mean = shape[3] == 32;  // log-mel-like data
        c.run = make_run(shape, t, seed += 10, c.res, big_mean ? -40.f : 0.f, big_mean ? 5.f : 1.f);
        Run& r = c.run;
        testing::write_bin(c.dir / "x.bin", r.x.to_floats());
        testing::write_bin(c.dir / "gamma.bin", r.gamma.to_floats());
        testing::write_bin(c.dir / "beta.bin", r.beta.to_floats());
        testing::write_bin(c.dir / "rm.bin", r.rm.to_floats());
        testing::write_bin(c.dir / "rv.bin", r.rv.to_floats());
        testing::write_bin(c.dir / "dy.bin", r.dy.to_floats());
        if (c.res) testing::write_bin(c.dir / "res.bin", r.res.to_floats());
        run_train(r, c.relu, eps, mom);
        c.y_eval = Tensor::empty(shape, t);
        ops::batch_norm_eval_forward(r.x, r.gamma, r.beta, r.rm, r.rv, eps, c.relu, c.y_eval, c.res ? &r.res : nullptr);
        list << c.dir.string() << ' ' << shape[0] << ' ' << shape[1] << ' ' << shape[2] << ' ' << shape[3] << ' '
             << int(c.res) << ' ' << int(c.relu) << ' ' << eps << ' ' << mom << '\n';
        cases.push_back(std::move(c));
      }
  list.close();
  REQUIRE(testing::run_oracle("batch_norm.py", (root / "cases.txt").string()) == 0);
  for (const auto& c : cases) {
    INFO(dtype_name(c.dtype), " ", shape_str(c.shape), " residual ", c.res, " relu ", c.relu);
    const std::size_t n = std::size_t(shape_numel(c.shape)), C = std::size_t(c.shape[3]);
    const double tol = testing::rel_l2_tolerance(c.dtype);
    const Run& r = c.run;
    CHECK(testing::rel_l2(r.y.to_floats(), testing::read_f64(c.dir / "y.bin", n)) <= tol);
    CHECK(testing::rel_l2(r.sm.to_floats(), testing::read_f64(c.dir / "mean.bin", C)) <= 1e-5);
    CHECK(testing::rel_l2(r.si.to_floats(), testing::read_f64(c.dir / "invstd.bin", C)) <= 1e-5);
    CHECK(testing::rel_l2(r.rm.to_floats(), testing::read_f64(c.dir / "rm_out.bin", C)) <= 1e-5);
    CHECK(testing::rel_l2(r.rv.to_floats(), testing::read_f64(c.dir / "rv_out.bin", C)) <= 1e-5);
    CHECK(dx_error(r.dx, testing::read_f64(c.dir / "dx.bin", n), r.gamma, r.si, r.dy) <= tol);
    CHECK(testing::rel_l2(r.dg.to_floats(), testing::read_f64(c.dir / "dgamma.bin", C)) <= 1e-5);
    CHECK(testing::rel_l2(r.db.to_floats(), testing::read_f64(c.dir / "dbeta.bin", C)) <= 1e-5);
    if (c.res) CHECK(testing::rel_l2(r.dy.to_floats(), testing::read_f64(c.dir / "dres.bin", n)) <= 1e-6);
    CHECK(testing::rel_l2(c.y_eval.to_floats(), testing::read_f64(c.dir / "y_eval.bin", n)) <= tol);
  }
  std::filesystem::remove_all(root);
}
