// conv_relu_pool CPU twin against an independent oracle: PyTorch (Debian's
// python3-torch, CPU) computes the same forward and backward in float64 from
// the same inputs (already rounded to the storage dtype), via
// tests/oracle/conv_relu_pool.py. Tolerances: relative L2, fp32 1e-5, bf16
// 1e-2, fp16 2e-3 (outputs rounded to T); dw/db are f32 in every precision.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/tensor.hpp"
#include "kernels/conv_relu_pool.hpp"
#include "kernels/ops.hpp"
#include "tests/support/oracle_files.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using kernels::ConvReluPoolDims;

namespace {

double tolerance(DType t) { return t == DType::bf16 ? 1e-2 : (t == DType::f16 ? 2e-3 : 1e-5); }

struct OracleCase {
  ConvReluPoolDims d;
  DType dtype;
  std::filesystem::path dir;
  Tensor y, code, dx, dw, db;
};

}  // namespace

TEST_CASE("conv_relu_pool CPU twin agrees with PyTorch (float64) forward and backward") {
  const auto root = std::filesystem::temp_directory_path() / ("mf_conv_oracle_" + std::to_string(getpid()));
  std::filesystem::create_directories(root);
  const ConvReluPoolDims shapes[] = {
      {2, 16, 16, 1, 8, 3, 2},   // the input layer's shape class (Cin = 1)
      {1, 9, 7, 3, 5, 3, 2},     // batch 1, odd H and W (floor windows)
      {3, 8, 10, 16, 12, 3, 2},
      {2, 7, 6, 3, 4, 5, 1},     // k 5, no pool
      {2, 6, 5, 4, 6, 1, 2},     // k 1
  };
  std::vector<OracleCase> cases;
  std::uint64_t seed = 7000;
  std::ofstream list(root / "cases.txt");
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    for (const auto& d : shapes) {
      OracleCase c;
      c.d = d;
      c.dtype = dt;
      c.dir = root / ("case" + std::to_string(cases.size()));
      std::filesystem::create_directories(c.dir);
      const float ws = 1.f / std::sqrt(float(d.k * d.k * d.cin));
      const Tensor x = Tensor::from_floats(testing::random_floats(std::size_t(d.n) * d.h * d.w * d.cin, seed++),
                                           {d.n, d.h, d.w, d.cin}, dt, Layout::nhwc);
      const Tensor w = Tensor::from_floats(testing::random_floats(std::size_t(d.cout) * d.k * d.k * d.cin, seed++, -ws, ws),
                                           {d.cout, d.k, d.k, d.cin}, dt);
      const Tensor b = Tensor::from_floats(testing::random_floats(std::size_t(d.cout), seed++, -0.1f, 0.1f), {d.cout}, dt);
      const Shape ys{d.n, d.ph(), d.pw(), d.cout};
      const Tensor dy = Tensor::from_floats(testing::random_floats(std::size_t(shape_numel(ys)), seed++), ys, dt);
      c.y = Tensor::empty(ys, dt);
      c.code = Tensor::empty(ys, DType::u8);
      c.dx = Tensor::empty(x.shape(), dt);
      c.dw = Tensor::empty(w.shape(), DType::f32);
      c.db = Tensor::empty({d.cout}, DType::f32);
      ops::conv_relu_pool_forward(x, w, b, d.pool, c.y, &c.code);
      ops::conv_relu_pool_backward(x, w, dy, c.code, d.pool, c.dw, c.db, &c.dx);
      testing::write_bin(c.dir / "x.bin", x.to_floats());
      testing::write_bin(c.dir / "w.bin", w.to_floats());
      testing::write_bin(c.dir / "b.bin", b.to_floats());
      testing::write_bin(c.dir / "dy.bin", dy.to_floats());
      list << c.dir.string() << ' ' << d.n << ' ' << d.h << ' ' << d.w << ' ' << d.cin << ' ' << d.cout << ' '
           << d.k << ' ' << d.pool << '\n';
      cases.push_back(std::move(c));
    }
  }
  list.close();
  REQUIRE(testing::run_oracle("conv_relu_pool.py", (root / "cases.txt").string()) == 0);
  for (const auto& c : cases) {
    const auto& d = c.d;
    INFO("dtype ", dtype_name(c.dtype), " n ", d.n, " h ", d.h, " w ", d.w, " cin ", d.cin, " cout ", d.cout,
         " k ", d.k, " p ", d.pool);
    const auto ty = testing::read_bin<double>(c.dir / "y.bin", std::size_t(c.y.numel()));
    const auto tcode = testing::read_bin<std::uint8_t>(c.dir / "code.bin", std::size_t(c.y.numel()));
    const auto tdx = testing::read_bin<double>(c.dir / "dx.bin", std::size_t(c.dx.numel()));
    const auto tdw = testing::read_bin<double>(c.dir / "dw.bin", std::size_t(c.dw.numel()));
    const auto tdb = testing::read_bin<double>(c.dir / "db.bin", std::size_t(c.db.numel()));
    // With random real inputs there are no exact ties, so the routing agrees;
    // any disagreement would make the gradients differ far beyond tolerance.
    const auto* code = static_cast<const std::uint8_t*>(c.code.raw());
    int code_diff = 0;
    for (std::size_t i = 0; i < tcode.size(); ++i) code_diff += code[i] != tcode[i];
    CHECK(code_diff == 0);
    CHECK(testing::rel_l2(c.y.to_floats(), ty) <= tolerance(c.dtype));
    CHECK(testing::rel_l2(c.dx.to_floats(), tdx) <= tolerance(c.dtype));
    CHECK(testing::rel_l2(c.dw.to_floats(), tdw) <= 1e-5);
    CHECK(testing::rel_l2(c.db.to_floats(), tdb) <= 1e-5);
  }
  std::filesystem::remove_all(root);
}
