// engine/float_convert.hpp: whole-buffer conversions match engine/dtype.hpp's
// scalar conversions bit for bit (the fused AVX2/F16C passes and the blocked
// fallback alike), the non-finite check finds the first NaN/Inf in any
// position, and non-float dtypes are refused by name.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/error.hpp"
#include "engine/float_convert.hpp"

using namespace mf;

TEST_CASE("convert_floats matches engine/dtype.hpp's conversions bit for bit (all f16 patterns, f32 sweep)") {
  // Every finite f16 pattern -> f32 and -> bf16 (NaN/Inf are rejected by the check).
  std::vector<std::uint16_t> h;
  for (std::uint32_t b = 0; b < 65536; ++b)
    if ((b & 0x7c00u) != 0x7c00u) h.push_back(std::uint16_t(b));
  std::vector<float> f(h.size());
  CHECK(convert_floats(h.data(), DType::f16, f.data(), DType::f32, std::int64_t(h.size()), true) == -1);
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < h.size(); ++i)
    bad += std::bit_cast<std::uint32_t>(f[i]) != std::bit_cast<std::uint32_t>(f16_bits_to_f32(h[i]));
  CHECK(bad == 0);
  std::vector<std::uint16_t> b16(h.size());
  convert_floats(h.data(), DType::f16, b16.data(), DType::bf16, std::int64_t(h.size()), true);
  bad = 0;
  for (std::size_t i = 0; i < h.size(); ++i) bad += b16[i] != f32_to_bf16_bits(f16_bits_to_f32(h[i]));
  CHECK(bad == 0);
  // f32 -> f16 / bf16 over rounding boundaries, subnormals, overflow and random values.
  std::vector<float> x;
  std::mt19937 rng(3);
  for (int i = 0; i < 200000; ++i) x.push_back(std::bit_cast<float>(std::uint32_t(rng()) & 0xc7ffffffu));
  for (std::uint32_t e = 0x33000000u; e < 0x47800000u; e += 0x1000u) x.push_back(std::bit_cast<float>(e));
  x.push_back(65519.f);
  x.push_back(65520.f);
  x.push_back(-1e9f);
  std::vector<std::uint16_t> o(x.size());
  convert_floats(x.data(), DType::f32, o.data(), DType::f16, std::int64_t(x.size()), false);
  bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i) bad += o[i] != f32_to_f16_bits(x[i]);
  CHECK(bad == 0);
  convert_floats(x.data(), DType::f32, o.data(), DType::bf16, std::int64_t(x.size()), false);
  bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i) bad += o[i] != f32_to_bf16_bits(x[i]);
  CHECK(bad == 0);
  // The check finds the first non-finite value in any position of a block.
  std::vector<float> y(3000, 1.f);
  y[2049] = -INFINITY;
  std::vector<std::uint16_t> yo(y.size());
  CHECK(convert_floats(y.data(), DType::f32, yo.data(), DType::bf16, 3000, true) == 2049);
  CHECK(convert_floats(y.data(), DType::f32, y.data(), DType::f32, 3000, true) == 2049);
}

TEST_CASE("convert_floats: fused check finds the first non-finite value for every type pair, any position") {
  // Lengths around the vector widths; Inf and NaN of both signs; two bad values (the first wins).
  const std::uint16_t h_bad[] = {0x7c00, 0xfc00, 0x7e00, 0xfd01};
  const std::uint32_t f_bad[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xff800001u};
  for (std::int64_t n : {1, 7, 15, 16, 17, 31, 32, 33, 100, 4099}) {
    for (std::int64_t pos : {std::int64_t(0), n / 2, n - 1}) {
      for (int k = 0; k < 4; ++k) {
        std::vector<std::uint16_t> h(std::size_t(n), 0x3c00);  // 1.0
        std::vector<float> f(std::size_t(n), 1.f);
        h[std::size_t(pos)] = h_bad[k];
        f[std::size_t(pos)] = std::bit_cast<float>(f_bad[k]);
        if (pos + 3 < n) {
          h[std::size_t(pos + 3)] = 0x7c00;
          f[std::size_t(pos + 3)] = INFINITY;
        }
        std::vector<std::byte> out(std::size_t(n) * 4);
        for (DType dt : {DType::f16, DType::f32, DType::bf16}) {
          CAPTURE(n);
          CAPTURE(pos);
          CAPTURE(k);
          CHECK(convert_floats(h.data(), DType::f16, out.data(), dt, n, true) == pos);
          CHECK(convert_floats(f.data(), DType::f32, out.data(), dt, n, true) == pos);
          CHECK(convert_floats(h.data(), DType::f16, out.data(), dt, n, false) == -1);
        }
        CHECK(convert_floats(h.data(), DType::f16, h.data(), DType::f16, n, true) == pos);  // in place
        CHECK(convert_floats(f.data(), DType::f32, f.data(), DType::f32, n, true) == pos);
      }
    }
    // Largest finite values pass.
    std::vector<std::uint16_t> h(std::size_t(n), 0xfbff);
    std::vector<float> f(std::size_t(n), -3.4028235e38f);
    std::vector<std::byte> out(std::size_t(n) * 4);
    for (DType dt : {DType::f16, DType::f32, DType::bf16}) {
      CHECK(convert_floats(h.data(), DType::f16, out.data(), dt, n, true) == -1);
      CHECK(convert_floats(f.data(), DType::f32, out.data(), dt, n, true) == -1);
    }
  }
}

TEST_CASE("convert_floats: unchecked f32 -> bf16 and copies keep NaN/Inf bit for bit") {
  std::vector<float> x;
  for (std::uint32_t b : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffbfffffu, 0x7fffffffu, 0x7f7fffffu,
                          0x7f7f8000u, 0x3f808000u, 0x3f818000u})
    for (int rep = 0; rep < 5; ++rep) x.push_back(std::bit_cast<float>(b ^ std::uint32_t(rep)));
  std::vector<std::uint16_t> o(x.size());
  convert_floats(x.data(), DType::f32, o.data(), DType::bf16, std::int64_t(x.size()), false);
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i) bad += o[i] != f32_to_bf16_bits(x[i]);
  CHECK(bad == 0);
  std::vector<float> y(x.size());
  convert_floats(x.data(), DType::f32, y.data(), DType::f32, std::int64_t(x.size()), false);
  CHECK(std::memcmp(x.data(), y.data(), x.size() * 4) == 0);
  std::vector<std::uint16_t> h(77), h2(77);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = std::uint16_t(0x7c00 + i * 13);
  convert_floats(h.data(), DType::f16, h2.data(), DType::f16, 77, false);
  CHECK(h == h2);
}

TEST_CASE("first_nonfinite and float_at: any float dtype; other dtypes are refused by name") {
  const std::vector<float> f{1.f, -2.f, NAN, INFINITY};
  CHECK(first_nonfinite(f.data(), DType::f32, 2) == -1);
  CHECK(first_nonfinite(f.data(), DType::f32, 4) == 2);
  const std::vector<std::uint16_t> b{f32_to_bf16_bits(1.f), f32_to_bf16_bits(-INFINITY)};
  CHECK(first_nonfinite(b.data(), DType::bf16, 2) == 1);
  CHECK(float_at(b.data(), DType::bf16, 0) == 1.f);
  CHECK(float_at(f.data(), DType::f32, 1) == -2.f);
  const std::vector<std::int32_t> ints{1, 2};
  CHECK_THROWS_WITH_AS(first_nonfinite(ints.data(), DType::i32, 2), doctest::Contains("found i32"), Error);
  CHECK_THROWS_WITH_AS(float_at(ints.data(), DType::i32, 0), doctest::Contains("found i32"), Error);
  std::vector<float> out(2);
  CHECK_THROWS_WITH_AS(convert_floats(ints.data(), DType::i32, out.data(), DType::f32, 2, false),
                       doctest::Contains("source must be f32, f16 or bf16, not i32"), Error);
  CHECK_THROWS_WITH_AS(convert_floats(f.data(), DType::f32, out.data(), DType::u8, 2, false),
                       doctest::Contains("destination must be f32, f16 or bf16, not u8"), Error);
}
