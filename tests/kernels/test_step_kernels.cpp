// CPU twins of the training-step kernels: dense against a float64 loop and
// finite differences; the fused loss against a float64 evaluation of PyTorch's
// formulas and finite differences; AdamW's skip, clipping, decay exclusions,
// schedule and loss scaling; dropout's mask.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/adamw.hpp"
#include "kernels/dropout.hpp"
#include "kernels/ops.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {

std::vector<double> dense_ref(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                              std::int64_t M, std::int64_t K, std::int64_t N, bool relu) {
  std::vector<double> y(std::size_t(M) * N);
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      double s = b[std::size_t(n)];
      for (std::int64_t k = 0; k < K; ++k) s += double(x[std::size_t(m * K + k)]) * w[std::size_t(n * K + k)];
      y[std::size_t(m * N + n)] = relu && s < 0 ? 0 : s;
    }
  return y;
}

// loss(x) = sum(y * r) for fixed random r: d loss / d y = r.
double dense_probe(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                   const std::vector<float>& r, std::int64_t M, std::int64_t K, std::int64_t N, bool relu) {
  const auto y = dense_ref(x, w, b, M, K, N, relu);
  double s = 0;
  for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * r[i];
  return s;
}

}  // namespace

TEST_CASE("dense forward matches a float64 loop (fp32 1e-5, bf16/fp16 operands)") {
  for (auto [M, K, N] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 1, 1}, {7, 33, 5}, {70, 300, 257}}) {
    const auto x = testing::random_floats(std::size_t(M * K), 1);
    const auto w = testing::random_floats(std::size_t(N * K), 2);
    const auto b = testing::random_floats(std::size_t(N), 3);
    for (bool relu : {false, true})
      for (DType t : {DType::f32, DType::bf16, DType::f16}) {
        // Reference on the operands as rounded to t.
        const Tensor xt = Tensor::from_floats(x, {M, K}, t), wt = Tensor::from_floats(w, {N, K}, t),
                     bt = Tensor::from_floats(b, {N}, t);
        const auto ref = dense_ref(xt.to_floats(), wt.to_floats(), bt.to_floats(), M, K, N, relu);
        Tensor y = Tensor::empty({M, N}, t);
        y.fill_bytes(0xff);
        ops::dense_forward(xt, wt, bt, relu, y);
        const double tol = t == DType::f32 ? 1e-5 : t == DType::bf16 ? 1e-2 : 2e-3;
        CHECK(testing::rel_l2(y.to_floats(), ref) <= tol);
      }
  }
}

TEST_CASE("dense forward with small integers is exact in every precision") {
  const std::int64_t M = 9, K = 40, N = 6;
  const auto x = testing::random_small_ints(std::size_t(M * K), 4), w = testing::random_small_ints(std::size_t(N * K), 5),
             b = testing::random_small_ints(std::size_t(N), 6);
  const auto ref = dense_ref(x, w, b, M, K, N, true);
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    Tensor y = Tensor::empty({M, N}, t);
    ops::dense_forward(Tensor::from_floats(x, {M, K}, t), Tensor::from_floats(w, {N, K}, t),
                       Tensor::from_floats(b, {N}, t), true, y);
    CHECK(testing::rel_l2(y.to_floats(), ref) == 0.0);
  }
}

TEST_CASE("dense backward: float64 reference and finite differences (fp32)") {
  const std::int64_t M = 5, K = 11, N = 7;
  for (bool relu : {false, true}) {
    const auto x = testing::random_floats(std::size_t(M * K), 10), w = testing::random_floats(std::size_t(N * K), 11),
               b = testing::random_floats(std::size_t(N), 12), r = testing::random_floats(std::size_t(M * N), 13);
    Tensor xt = Tensor::from_floats(x, {M, K}), wt = Tensor::from_floats(w, {N, K}), bt = Tensor::from_floats(b, {N});
    Tensor y = Tensor::empty({M, N}, DType::f32);
    ops::dense_forward(xt, wt, bt, relu, y);
    Tensor dy = Tensor::from_floats(r, {M, N});
    Tensor dx = Tensor::empty({M, K}, DType::f32), dw = Tensor::empty({N, K}, DType::f32), db = Tensor::empty({N}, DType::f32);
    for (Tensor* t : {&dx, &dw, &db}) t->fill_bytes(0xff);
    ops::dense_backward(xt, wt, y, dy, relu, &dx, dw, db);
    // Finite differences in double on the probe loss.
    const double h = 1e-3;
    auto xs = x, ws = w, bs = b;
    auto fd = [&](std::vector<float>* v, std::size_t i) {
      const float o = (*v)[i];
      (*v)[i] = o + float(h);
      const double p = dense_probe(xs, ws, bs, r, M, K, N, relu);
      (*v)[i] = o - float(h);
      const double q = dense_probe(xs, ws, bs, r, M, K, N, relu);
      (*v)[i] = o;
      return (p - q) / (2 * h);
    };
    std::vector<double> gx, gw, gb;
    for (std::size_t i = 0; i < xs.size(); ++i) gx.push_back(fd(&xs, i));
    for (std::size_t i = 0; i < ws.size(); ++i) gw.push_back(fd(&ws, i));
    for (std::size_t i = 0; i < bs.size(); ++i) gb.push_back(fd(&bs, i));
    // The probe is piecewise linear: central differences are exact up to
    // rounding unless a pre-activation crosses 0 within h (not with these seeds).
    CHECK(testing::rel_l2(dx.to_floats(), gx) < 1e-4);
    CHECK(testing::rel_l2(dw.to_floats(), gw) < 1e-4);
    CHECK(testing::rel_l2(db.to_floats(), gb) < 1e-4);
  }
}

TEST_CASE("dense validates shapes and dtypes with the op's name") {
  Tensor x = Tensor::zeros({2, 3}, DType::f32), w = Tensor::zeros({4, 5}, DType::f32), b = Tensor::zeros({4}, DType::f32), y = Tensor::zeros({2, 4}, DType::f32);
  CHECK_THROWS_WITH_AS(ops::dense_forward(x, w, b, false, y), doctest::Contains("dense_forward"), Error);
}

namespace {

struct LossRef {
  double class_loss, leak_loss;
  std::vector<double> grad;  // d total / d logits
};

// PyTorch's formulas in float64 (weighted mean with smoothing as in
// torch.nn.functional.cross_entropy; BCEWithLogits mean).
double total_loss(const std::vector<double>& z, const std::vector<int>& y, const std::vector<float>& t,
                  const std::vector<float>& cw, std::int64_t B, std::int64_t C, double eps, double wc, double wl, double* ce_out,
                  double* bce_out) {
  double nll = 0, smooth = 0, den = 0, bce = 0;
  for (std::int64_t i = 0; i < B; ++i) {
    const double* r = z.data() + i * (C + 1);
    double mx = r[0];
    for (std::int64_t c = 1; c < C; ++c) mx = std::max(mx, r[c]);
    double se = 0;
    for (std::int64_t c = 0; c < C; ++c) se += std::exp(r[c] - mx);
    const double lse = mx + std::log(se);
    const double wy = cw.empty() ? 1 : cw[std::size_t(y[std::size_t(i)])];
    nll += wy * (lse - r[y[std::size_t(i)]]);
    den += wy;
    for (std::int64_t c = 0; c < C; ++c) smooth += (cw.empty() ? 1 : cw[std::size_t(c)]) * (lse - r[c]);
    const double zl = r[C], tt = t[std::size_t(i)];
    bce += std::max(zl, 0.0) - zl * tt + std::log1p(std::exp(-std::fabs(zl)));
  }
  const double ce = (1 - eps) * nll / den + eps / C * smooth / den;
  if (ce_out) *ce_out = ce;
  if (bce_out) *bce_out = bce / B;
  return wc * ce + wl * bce / B;
}

}  // namespace

TEST_CASE("fused loss: PyTorch semantics (class weights, label smoothing), gradients by finite differences, metrics") {
  const std::int64_t B = 13, C = 4;
  const auto zf = testing::random_floats(std::size_t(B * (C + 1)), 21, -3, 3);
  std::vector<int> y;
  std::vector<float> labels, t;
  for (std::int64_t i = 0; i < B; ++i) {
    y.push_back((i * 7) % C);
    labels.push_back(float(y.back()));
    t.push_back(float(i % 3 == 0));
  }
  for (const std::vector<float>& cw : {std::vector<float>{}, std::vector<float>{1.f, 2.5f, 0.5f, 1.5f}})
    for (float eps : {0.f, 0.2f}) {
      kernels::LeakLossDims d;
      d.batch = B;
      d.classes = int(C);
      d.label_smoothing = eps;
      d.class_loss_weight = 0.8f;
      d.leak_loss_weight = 1.3f;
      d.grad_scale = 0.5f;
      const float loss_scale = 4.f;
      Tensor logits = Tensor::from_floats(zf, {B, C + 1});
      Tensor lab = Tensor::from_floats(labels, {B}, DType::i32), leak = Tensor::from_floats(t, {B});
      Tensor cwt = cw.empty() ? Tensor() : Tensor::from_floats(cw, {C});
      Tensor dl = Tensor::empty({B, C + 1}, DType::f32);
      dl.fill_bytes(0xff);
      Tensor sums = Tensor::zeros({kernels::kLossSums}, DType::f32), counts = Tensor::zeros({kernels::kLossCounts + C * C}, DType::i32);
      Tensor sl = Tensor::zeros({1}, DType::f32);
      ops::leak_loss(logits, lab, leak, cw.empty() ? nullptr : &cwt, &loss_scale, d, dl, sums, counts, &sl);
      std::vector<double> z(zf.begin(), zf.end());
      double ce = 0, bce = 0;
      const double ref = total_loss(z, y, t, cw, B, C, eps, 0.8, 1.3, &ce, &bce);
      CHECK(std::fabs(sl.to_floats()[0] - ref) <= 1e-5 * std::fabs(ref));
      const auto s = sums.to_floats();
      CHECK(std::fabs(s[0] - ce) <= 1e-5 * ce);
      CHECK(std::fabs(s[1] - bce) <= 1e-5 * bce);
      CHECK(s[3] == 1.f);
      std::vector<double> fd;
      for (std::size_t i = 0; i < z.size(); ++i) {
        auto zp = z, zm = z;
        zp[i] += 1e-5;
        zm[i] -= 1e-5;
        fd.push_back((total_loss(zp, y, t, cw, B, C, eps, 0.8, 1.3, nullptr, nullptr) -
                      total_loss(zm, y, t, cw, B, C, eps, 0.8, 1.3, nullptr, nullptr)) /
                     2e-5 * loss_scale * 0.5);
      }
      CHECK(testing::rel_l2(dl.to_floats(), fd) < 1e-5);
      // Metrics: argmax correct counts and the confusion matrix.
      const auto cnt = counts.to_floats();
      int correct = 0, lc = 0;
      std::vector<int> conf(std::size_t(C * C), 0);
      for (std::int64_t i = 0; i < B; ++i) {
        std::int64_t arg = 0;
        for (std::int64_t c = 1; c < C; ++c)
          if (zf[std::size_t(i * (C + 1) + c)] > zf[std::size_t(i * (C + 1) + arg)]) arg = c;
        correct += arg == y[std::size_t(i)];
        ++conf[std::size_t(y[std::size_t(i)] * C + arg)];
        lc += (zf[std::size_t(i * (C + 1) + C)] > 0) == (t[std::size_t(i)] > 0.5f);
      }
      CHECK(cnt[0] == B);
      CHECK(cnt[1] == correct);
      CHECK(cnt[2] == lc);
      for (std::int64_t i = 0; i < C * C; ++i) CHECK(cnt[std::size_t(kernels::kLossCounts + i)] == conf[std::size_t(i)]);
    }
}

namespace {
struct Opt {
  std::int64_t n, decay_end;
  Tensor master, grad, m, v, state, scratch;
  Opt(std::int64_t n_, std::int64_t de, std::uint64_t seed) : n(n_), decay_end(de) {
    master = Tensor::from_floats(testing::random_floats(std::size_t(n), seed), {n});
    grad = Tensor::from_floats(testing::random_floats(std::size_t(n), seed + 1), {n});
    m = Tensor::zeros({n}, DType::f32);
    v = Tensor::zeros({n}, DType::f32);
    state = Tensor::zeros({std::int64_t(sizeof(kernels::AdamWState))}, DType::u8);
    *static_cast<kernels::AdamWState*>(state.raw()) = kernels::AdamWState{};
    scratch = Tensor::zeros({std::int64_t(kernels::adamw_scratch_bytes())}, DType::u8);
  }
  kernels::AdamWState& st() { return *static_cast<kernels::AdamWState*>(state.raw()); }
  void step(const kernels::AdamWConfig& c, Tensor* work = nullptr) {
    ops::adamw_step(c, decay_end, master, grad, m, v, work, state, scratch);
  }
};
}  // namespace

TEST_CASE("AdamW: one step against a float64 evaluation of torch.optim.AdamW with clipping") {
  Opt o(1000, 600, 30);
  kernels::AdamWConfig c;
  c.lr = 0.01f;
  c.weight_decay = 0.1f;
  c.max_grad_norm = 2.f;
  o.st().loss_scale = 8.f;  // gradients carry a scale of 8
  const auto p0 = o.master.to_floats(), g = o.grad.to_floats();
  double norm = 0;
  for (float x : g) norm += double(x / 8.f) * (x / 8.f);
  norm = std::sqrt(norm);
  const double clip = std::min(1.0, 2.0 / (norm + 1e-6));
  REQUIRE(clip < 1.0);
  o.step(c);
  std::vector<double> ref;
  for (std::size_t i = 0; i < p0.size(); ++i) {
    const double gi = g[i] / 8.0 * clip;
    double p = p0[i];
    if (std::int64_t(i) < 600) p *= 1 - 0.01 * 0.1;
    const double m = 0.1 * gi, v = 0.001 * gi * gi;
    p -= 0.01 / 0.1 * m / (std::sqrt(v) / std::sqrt(0.001) + 1e-8);
    ref.push_back(p);
  }
  CHECK(testing::rel_l2(o.master.to_floats(), ref) < 1e-6);
  CHECK(std::fabs(o.st().grad_norm - norm) < 1e-5 * norm);
  CHECK(o.st().step == 1);
  CHECK(o.st().iteration == 1);
}

TEST_CASE("AdamW: weight decay only on [0, decay_end): biases keep their value under a zero gradient") {
  Opt o(64, 40, 31);
  o.grad.fill(0.f);
  kernels::AdamWConfig c;
  c.lr = 0.1f;
  c.weight_decay = 0.5f;
  const auto p0 = o.master.to_floats();
  o.step(c);
  const auto p1 = o.master.to_floats();
  for (std::size_t i = 0; i < 64; ++i) {
    if (i < 40) CHECK(p1[i] == doctest::Approx(p0[i] * (1 - 0.05f)).epsilon(1e-6));
    else CHECK(p1[i] == p0[i]);
  }
}

TEST_CASE("AdamW: a non-finite gradient skips the step, counts it and backs the FP16 scale off") {
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    Opt o(5000, 5000, 32);
    o.grad.data<float>()[4321] = bad;
    kernels::AdamWConfig c;
    c.dynamic_loss_scale = true;
    c.min_scale = 1.f;
    o.st().loss_scale = 65536.f;
    const auto p0 = o.master.to_floats();
    Tensor work = Tensor::zeros({5000}, DType::f16);
    o.step(c, &work);
    CHECK(o.master.to_floats() == p0);
    CHECK(o.m.to_floats() == std::vector<float>(5000, 0.f));
    CHECK(o.st().found_inf == 1);
    CHECK(o.st().skipped_steps == 1);
    CHECK(o.st().step == 0);
    CHECK(o.st().iteration == 1);
    CHECK(o.st().loss_scale == 32768.f);
    // A finite step afterwards applies and writes the working copy.
    o.grad.data<float>()[4321] = 0.f;
    o.step(c, &work);
    CHECK(o.st().step == 1);
    CHECK(o.st().found_inf == 0);
    const auto m = o.master.to_floats(), w = work.to_floats();
    for (std::size_t i = 0; i < m.size(); ++i) REQUIRE(w[i] == float(f16(m[i])));
  }
}

TEST_CASE("AdamW: dynamic loss scale grows after N clean steps, floors on overflow") {
  Opt o(100, 100, 33);
  kernels::AdamWConfig c;
  c.dynamic_loss_scale = true;
  c.growth_interval = 3;
  c.min_scale = 0.25f;
  o.st().loss_scale = 1.f;
  for (int i = 0; i < 3; ++i) o.step(c);
  CHECK(o.st().loss_scale == 2.f);
  CHECK(o.st().clean_steps == 0);
  o.grad.data<float>()[0] = std::numeric_limits<float>::infinity();
  for (int i = 0; i < 5; ++i) o.step(c);
  CHECK(o.st().loss_scale == 0.25f);
  CHECK(o.st().skipped_steps == 5);
  CHECK(o.st().step == 3);
}

TEST_CASE("AdamW: LR schedule values (warmup, cosine, linear, constant) and the device-held LR") {
  kernels::AdamWConfig c;
  c.lr = 1.f;
  c.min_lr = 0.1f;
  c.warmup_steps = 4;
  c.total_steps = 14;
  c.schedule = kernels::LrSchedule::cosine;
  CHECK(kernels::lr_at(c, 0) == doctest::Approx(0.25));
  CHECK(kernels::lr_at(c, 3) == doctest::Approx(1.0));
  CHECK(kernels::lr_at(c, 4) == doctest::Approx(1.0));
  CHECK(kernels::lr_at(c, 9) == doctest::Approx(0.1 + 0.9 * 0.5));
  CHECK(kernels::lr_at(c, 14) == doctest::Approx(0.1));
  CHECK(kernels::lr_at(c, 100) == doctest::Approx(0.1));
  c.schedule = kernels::LrSchedule::linear;
  CHECK(kernels::lr_at(c, 9) == doctest::Approx(0.55));
  c.schedule = kernels::LrSchedule::constant;
  CHECK(kernels::lr_at(c, 9) == doctest::Approx(1.0));
  c.schedule = kernels::LrSchedule::cosine;
  Opt o(10, 10, 34);
  for (int i = 0; i < 6; ++i) {
    o.step(c);
    CHECK(o.st().lr == doctest::Approx(kernels::lr_at(c, i)));
  }
}

TEST_CASE("dropout: mask rate, scaling, same mask forward/backward, new mask per counter") {
  const std::int64_t n = 100000;
  Tensor x = Tensor::from_floats(std::vector<float>(std::size_t(n), 1.f), {n});
  Tensor y = Tensor::empty({n}, DType::f32), y2 = Tensor::empty({n}, DType::f32), dx = Tensor::empty({n}, DType::f32);
  std::int32_t ctr = 3;
  ops::dropout_forward(x, y, 0.3f, 42, 0, &ctr);
  ops::dropout_backward(x, dx, 0.3f, 42, 0, &ctr);
  CHECK(std::memcmp(y.raw(), dx.raw(), y.nbytes()) == 0);
  const auto v = y.to_floats();
  std::int64_t kept = 0;
  for (float f : v) {
    REQUIRE((f == 0.f || f == doctest::Approx(1 / 0.7f)));
    kept += f != 0.f;
  }
  CHECK(std::fabs(double(kept) / n - 0.7) < 0.01);
  ctr = 4;
  ops::dropout_forward(x, y2, 0.3f, 42, 0, &ctr);
  CHECK(std::memcmp(y.raw(), y2.raw(), y.nbytes()) != 0);
  ops::dropout_forward(x, y2, 0.3f, 42, 1, &ctr);  // another micro-batch stream
  CHECK(std::memcmp(y.raw(), y2.raw(), y.nbytes()) != 0);
}
