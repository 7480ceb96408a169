// fold_batch_norm's CPU twin (kernels/fold_batch_norm.hpp) against a float64
// loop written from the contract (every dtype, with and without bias, Cout 1,
// odd shapes), an exact small-integer case, 1 vs 2 threads (identical bytes),
// NaN confined to its channel, error messages, the defining property
// (conv2d with the folded weights = conv2d -> batch_norm_eval, every dtype),
// and PyTorch's torch.nn.utils.fusion.fuse_conv_bn_eval
// (tests/oracle/fold_batch_norm.py, float64).
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/parallel.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/tensor_bits.hpp"
#include "tests/kernels/tolerance.hpp"
#include "tests/support/oracle_files.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;

// One conv + batch norm: the values as floats (rounded to t when made into tensors).
struct Case {
  int cout, k, cin;
  bool bias;
  float eps = 1e-5f;
  Vec w, b, gamma, beta, mean, var;
};

Case make_case(int cout, int k, int cin, bool bias, std::uint64_t seed) {
  Case c;
  c.cout = cout;
  c.k = k;
  c.cin = cin;
  c.bias = bias;
  c.w = testing::random_floats(std::size_t(cout * k * k * cin), seed);
  c.b = testing::random_floats(std::size_t(cout), seed + 1);
  c.gamma = testing::random_floats(std::size_t(cout), seed + 2, 0.5f, 1.5f);
  c.beta = testing::random_floats(std::size_t(cout), seed + 3);
  c.mean = testing::random_floats(std::size_t(cout), seed + 4, -2.f, 2.f);
  c.var = testing::random_floats(std::size_t(cout), seed + 5, 0.01f, 3.f);
  return c;
}

// The parameters as tensors in t; the running statistics f32.
struct Tensors {
  Tensor w, b, gamma, beta, mean, var;
};

Tensors tensors(const Case& c, DType t) {
  const std::int64_t C = c.cout;
  return {Tensor::from_floats(c.w, {C, c.k, c.k, c.cin}, t), Tensor::from_floats(c.b, {C}, t),
          Tensor::from_floats(c.gamma, {C}, t),         Tensor::from_floats(c.beta, {C}, t),
          Tensor::from_floats(c.mean, {C}),             Tensor::from_floats(c.var, {C})};
}

std::pair<Tensor, Tensor> run(const Case& c, const Tensors& p, DType t) {
  Tensor w_out = testing::poisoned(p.w.shape(), t), b_out = testing::poisoned({c.cout}, t);
  ops::fold_batch_norm(p.w, p.gamma, p.beta, p.mean, p.var, c.eps, w_out, b_out, c.bias ? &p.b : nullptr);
  return {w_out, b_out};
}

// The contract in float64 on the values the kernel sees (rounded to t).
std::pair<DVec, DVec> reference(const Case& c, const Tensors& p) {
  const Vec w = p.w.to_floats(), b = p.b.to_floats(), g = p.gamma.to_floats(), be = p.beta.to_floats();
  const std::size_t per = std::size_t(c.k * c.k * c.cin);
  DVec wo(w.size()), bo(std::size_t(c.cout));
  for (std::size_t co = 0; co < std::size_t(c.cout); ++co) {
    const double s = double(g[co]) / std::sqrt(double(c.var[co]) + double(c.eps));
    for (std::size_t i = 0; i < per; ++i) wo[co * per + i] = double(w[co * per + i]) * s;
    bo[co] = double(be[co]) + ((c.bias ? double(b[co]) : 0.0) - double(c.mean[co])) * s;
  }
  return {wo, bo};
}

const DType kTypes[] = {DType::f32, DType::bf16, DType::f16};

}  // namespace

TEST_CASE("fold_batch_norm: CPU twin vs float64 reference, every dtype, with and without bias, odd shapes") {
  struct S {
    int cout, k, cin;
  };
  std::uint64_t seed = 1;
  for (S s : {S{1, 1, 1}, S{1, 3, 1}, S{3, 3, 2}, S{7, 5, 3}, S{16, 3, 5}, S{33, 1, 17}})
    for (bool bias : {false, true})
      for (DType t : kTypes) {
        CAPTURE(s.cout);
        CAPTURE(s.k);
        CAPTURE(s.cin);
        CAPTURE(bias);
        CAPTURE(dtype_name(t));
        const Case c = make_case(s.cout, s.k, s.cin, bias, seed++);
        const Tensors p = tensors(c, t);
        const auto [w_out, b_out] = run(c, p, t);
        const auto [wo, bo] = reference(c, p);
        // f32: a few f32 roundings of one product; bf16/f16: one rounding on store.
        const double tol = t == DType::f32 ? 1e-6 : testing::rel_l2_tolerance(t);
        CHECK(testing::rel_l2(w_out.to_floats(), wo) <= tol);
        CHECK(testing::rel_l2(b_out.to_floats(), bo) <= tol);
      }
}

TEST_CASE("fold_batch_norm: exact small integers (s = gamma / 2), every dtype") {
  // var + eps = 4 -> s = gamma / 2; gamma = 4 -> s = 2, gamma = 2 -> s = 1.
  Case c{2, 1, 3, true, 1.f, {1, -2, 3, 4, 0, -1}, {5, -3}, {4, 2}, {1, -1}, {2, 1}, {3, 3}};
  for (bool bias : {true, false})
    for (DType t : kTypes) {
      CAPTURE(dtype_name(t));
      c.bias = bias;
      const Tensors p = tensors(c, t);
      const auto [w_out, b_out] = run(c, p, t);
      CHECK(w_out.to_floats() == Vec{2, -4, 6, 4, 0, -1});
      // b' = beta + (b - mean) * s: 1 + (5 - 2) * 2 = 7, -1 + (-3 - 1) * 1 = -5; without bias 1 - 4, -1 - 1.
      CHECK(b_out.to_floats() == (bias ? Vec{7, -5} : Vec{-3, -2}));
    }
}

TEST_CASE("fold_batch_norm: 1 and 2 threads give identical bytes") {
  const Case c = make_case(64, 3, 9, true, 77);
  for (DType t : kTypes) {
    CAPTURE(dtype_name(t));
    const Tensors p = tensors(c, t);
    set_cpu_threads(1);
    const auto one = run(c, p, t);
    set_cpu_threads(2);
    const auto two = run(c, p, t);
    set_cpu_threads(0);
    CHECK(testing::same_bytes(one.first, two.first));
    CHECK(testing::same_bytes(one.second, two.second));
  }
}

TEST_CASE("fold_batch_norm: NaN stays in its channel") {
  Case c = make_case(3, 3, 2, true, 5);
  c.var[1] = NAN;
  const Tensors p = tensors(c, DType::f32);
  const auto [w_out, b_out] = run(c, p, DType::f32);
  const Vec w = w_out.to_floats(), b = b_out.to_floats();
  const std::size_t per = 18;
  for (std::size_t i = 0; i < w.size(); ++i) CHECK(std::isnan(w[i]) == (i / per == 1));
  CHECK((!std::isnan(b[0]) && std::isnan(b[1]) && !std::isnan(b[2])));
}

TEST_CASE("fold_batch_norm: error messages name what was expected and found") {
  const Case c = make_case(4, 3, 2, true, 9);
  const Tensors p = tensors(c, DType::f32);
  Tensor w_out = Tensor::empty(p.w.shape(), DType::f32), b_out = Tensor::empty({4}, DType::f32);
  auto err = [&](const Tensor& w, const Tensor* b, const Tensor& g, const Tensor& m, Tensor& wo, Tensor& bo) {
    return testing::error_of([&] { ops::fold_batch_norm(w, g, p.beta, m, p.var, c.eps, wo, bo, b); });
  };
  CHECK(err(p.w, &p.b, p.gamma, p.mean, w_out, b_out) == "<no error>");
  const Tensor w3 = Tensor::zeros({4, 9, 2}, DType::f32);
  CHECK(err(w3, &p.b, p.gamma, p.mean, w_out, b_out).find("w must be 4-D [Cout, k, k, Cin]") != std::string::npos);
  const Tensor b5 = Tensor::zeros({5}, DType::f32);
  CHECK(err(p.w, &b5, p.gamma, p.mean, w_out, b_out).find("b ([Cout]") != std::string::npos);
  const Tensor gh = Tensor::zeros({4}, DType::f16);
  CHECK(err(p.w, &p.b, gh, p.mean, w_out, b_out).find("gamma (w's dtype)") != std::string::npos);
  const Tensor mh = Tensor::zeros({4}, DType::bf16);
  CHECK(err(p.w, &p.b, p.gamma, mh, w_out, b_out).find("running_mean") != std::string::npos);
  Tensor wo2 = Tensor::empty({4, 3, 3, 3}, DType::f32);
  CHECK(err(p.w, &p.b, p.gamma, p.mean, wo2, b_out).find("w_out (w's shape)") != std::string::npos);
  Tensor bo2 = Tensor::empty({4}, DType::bf16);
  CHECK(err(p.w, &p.b, p.gamma, p.mean, w_out, bo2).find("b_out (w's dtype)") != std::string::npos);
  Tensor alias = p.w;
  CHECK(err(p.w, &p.b, p.gamma, p.mean, alias, b_out).find("w_out must not be w itself") != std::string::npos);
  const Tensor wi = Tensor::zeros({4, 3, 3, 2}, DType::i32);
  Tensor woi = Tensor::zeros({4, 3, 3, 2}, DType::i32);
  CHECK(err(wi, nullptr, p.gamma, p.mean, woi, b_out).find("w must be f32, bf16 or f16") != std::string::npos);
}

TEST_CASE("fold_batch_norm: conv2d with the folded weights = conv2d -> batch_norm_eval, every dtype") {
  for (int stride : {1, 2})
    for (bool bias : {false, true})
      for (DType t : kTypes) {
        CAPTURE(stride);
        CAPTURE(bias);
        CAPTURE(dtype_name(t));
        const Case c = make_case(6, 3, 4, bias, std::uint64_t(40 + stride * 2 + int(bias)));
        const Tensors p = tensors(c, t);
        const std::int64_t N = 2, H = 7, W = 9, OH = (H - 1) / stride + 1, OW = (W - 1) / stride + 1;
        const Tensor x = Tensor::from_floats(testing::random_floats(std::size_t(N * H * W * c.cin), 99),
                                             {N, H, W, c.cin}, t, Layout::nhwc);
        for (bool relu : {false, true}) {
          CAPTURE(relu);
          Tensor z = Tensor::empty({N, OH, OW, c.cout}, t, Device::cpu(), Layout::nhwc);
          Tensor want = Tensor::empty(z.shape(), t, Device::cpu(), Layout::nhwc);
          ops::conv2d_forward(x, p.w, stride, false, z, bias ? &p.b : nullptr);
          ops::batch_norm_eval_forward(z, p.gamma, p.beta, p.mean, p.var, c.eps, relu, want, nullptr);
          const auto [w_out, b_out] = run(c, p, t);
          Tensor got = Tensor::empty(z.shape(), t, Device::cpu(), Layout::nhwc);
          ops::conv2d_forward(x, w_out, stride, relu, got, &b_out);
          // bf16/f16: the unfolded path rounds z to t once more than the folded one.
          CHECK(testing::rel_l2(got.to_floats(), want.to_floats()) <= testing::rel_l2_tolerance(t));
        }
      }
}

TEST_CASE("fold_batch_norm: PyTorch oracle (torch.nn.utils.fusion.fuse_conv_bn_eval, float64)") {
  const auto root = std::filesystem::temp_directory_path() / ("mf_fold_bn_oracle_" + std::to_string(getpid()));
  std::filesystem::create_directories(root);
  struct Run {
    Case c;
    DType t;
    Tensor w_out, b_out;
    std::filesystem::path dir;
  };
  std::vector<Run> runs;
  std::ofstream cases(root / "cases.txt");
  int id = 0;
  for (DType t : kTypes)
    for (auto [cout, k, cin, bias] : {std::tuple{1, 1, 1, true}, {5, 3, 3, false}, {12, 3, 7, true}, {8, 1, 16, false}}) {
      Run r{make_case(cout, k, cin, bias, std::uint64_t(300 + id)), t, {}, {}, root / std::to_string(id)};
      ++id;
      r.c.eps = id % 2 ? 1e-5f : 1e-3f;
      std::filesystem::create_directories(r.dir);
      const Tensors p = tensors(r.c, t);
      std::tie(r.w_out, r.b_out) = run(r.c, p, t);
      testing::write_bin(r.dir / "w.bin", p.w.to_floats());
      testing::write_bin(r.dir / "b.bin", p.b.to_floats());
      testing::write_bin(r.dir / "gamma.bin", p.gamma.to_floats());
      testing::write_bin(r.dir / "beta.bin", p.beta.to_floats());
      testing::write_bin(r.dir / "rm.bin", r.c.mean);
      testing::write_bin(r.dir / "rv.bin", r.c.var);
      cases << r.dir.string() << ' ' << cout << ' ' << k << ' ' << cin << ' ' << int(bias) << ' '
            << fmt::format("{}", r.c.eps) << '\n';
      runs.push_back(std::move(r));
    }
  cases.close();
  REQUIRE(testing::run_oracle("fold_batch_norm.py", (root / "cases.txt").string()) == 0);
  for (const Run& r : runs) {
    CAPTURE(r.dir.string());
    const DVec w = testing::read_f64(r.dir / "w_out.bin", std::size_t(r.w_out.numel()));
    const DVec b = testing::read_f64(r.dir / "b_out.bin", std::size_t(r.c.cout));
    const double tol = r.t == DType::f32 ? 1e-6 : testing::rel_l2_tolerance(r.t);
    CHECK(testing::rel_l2(r.w_out.to_floats(), w) <= tol);
    CHECK(testing::rel_l2(r.b_out.to_floats(), b) <= tol);
  }
  std::filesystem::remove_all(root);
}
