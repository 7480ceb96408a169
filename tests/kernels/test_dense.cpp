// dense (kernels/dense.hpp), CPU twin: the forward against a float64 loop on
// the operands as rounded to each precision (exact with small integers), the
// backward against finite differences of a float64 probe loss, and shape
// checks that name the op. The CUDA kernel against this twin:
// test_dense_gpu.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "engine/parallel.hpp"
#include "kernels/dense.hpp"

#include "kernels/ops.hpp"
#include "tests/kernels/tolerance.hpp"
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
        CHECK(testing::rel_l2(y.to_floats(), ref) <= testing::rel_l2_tolerance(t));
      }
  }
}

TEST_CASE("dense forward (f32): each output is the k-order sum plus bias, for a batch below and above N") {
  // Below N the CPU computes C^T = W x^T and transposes it back: the same bits.
  for (const auto& [M, K, N] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{5, 300, 40}, {40, 300, 5}}) {
    CAPTURE(M);
    const auto x = testing::random_floats(std::size_t(M * K), 21), w = testing::random_floats(std::size_t(N * K), 22),
               b = testing::random_floats(std::size_t(N), 23);
    for (const CpuKernels variant : testing::cpu_kernel_variants()) {
      const testing::CpuKernelsScope scope(variant);
      INFO("CPU kernels ", cpu_kernels_name(variant));
      Tensor y = Tensor::empty({M, N}, DType::f32);
      ops::dense_forward(Tensor::from_floats(x, {M, K}), Tensor::from_floats(w, {N, K}), Tensor::from_floats(b, {N}),
                         false, y);
      const auto got = y.to_floats();
      int bad = 0;
      for (std::int64_t m = 0; m < M; ++m)
        for (std::int64_t n = 0; n < N; ++n) {
          float sum = 0.f;
          for (std::int64_t k = 0; k < K; ++k) {
            const float a = x[std::size_t(m * K + k)], c = w[std::size_t(n * K + k)];
            sum = variant != CpuKernels::twin ? std::fma(a, c, sum) : sum + a * c;
          }
          bad += got[std::size_t(m * N + n)] != sum + b[std::size_t(n)];
        }
      CHECK(bad == 0);
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
    ops::dense_backward(xt, wt, y, dy, relu, dw, db, &dx);
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

TEST_CASE("gemm_cpu: the bits of a plain f32 loop over k in order, every tile path, stride and thread count") {
  // Shapes cover 4x16 and 8x32 register tiles, row and column edges, several k panels
  // (kKB = 128) and column panels (kNB = 256); strides: both operands plain,
  // B transposed (a weight read as W^T), A transposed (dz^T).
  const std::tuple<std::int64_t, std::int64_t, std::int64_t> shapes[] = {
      {1, 1, 1}, {4, 16, 3}, {5, 17, 129}, {37, 300, 260}, {64, 48, 1000}, {3, 520, 7}};
  const int threads = cpu_threads();
  for (const auto& [M, N, K] : shapes)
    for (int layout = 0; layout < 3; ++layout)
      for (DType t : {DType::f32, DType::bf16}) {
        CAPTURE(M);
        CAPTURE(N);
        CAPTURE(K);
        CAPTURE(layout);
        const auto af = testing::random_floats(std::size_t(M * K), 11, -2, 2);
        const auto bf = testing::random_floats(std::size_t(K * N), 12, -2, 2);
        const Tensor a = Tensor::from_floats(af, {M * K}, t), b = Tensor::from_floats(bf, {K * N}, t);
        const std::vector<float> ar = a.to_floats(), br = b.to_floats();  // as rounded to t
        // A(m,k) and B(k,n) element offsets for this layout.
        const std::int64_t a_rs = layout == 2 ? 1 : K, a_cs = layout == 2 ? M : 1;
        const std::int64_t b_rs = layout == 1 ? 1 : N, b_cs = layout == 1 ? K : 1;
        for (const CpuKernels variant : testing::cpu_kernel_variants()) {
          const testing::CpuKernelsScope scope(variant);
          INFO("CPU kernels ", cpu_kernels_name(variant));
          // twin: s += a*b (two roundings); avx2, avx512: s = fma(a, b, s) (one).
          const bool fused = variant != CpuKernels::twin;
          std::vector<float> want(std::size_t(M * N));
          for (std::int64_t m = 0; m < M; ++m)
            for (std::int64_t n = 0; n < N; ++n) {
              float s = 0.f;
              for (std::int64_t k = 0; k < K; ++k) {
                const float x = ar[std::size_t(m * a_rs + k * a_cs)], y = br[std::size_t(k * b_rs + n * b_cs)];
                s = fused ? std::fma(x, y, s) : s + x * y;
              }
              want[std::size_t(m * N + n)] = s;
            }
          for (int th : {1, 2}) {
            set_cpu_threads(th);
            std::vector<float> got(std::size_t(M * N), NAN);
            kernels::gemm_cpu(M, N, K, t, a.raw(), a_rs, a_cs, b.raw(), b_rs, b_cs, got.data());
            CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
          }
        }
      }
  set_cpu_threads(threads);
}
