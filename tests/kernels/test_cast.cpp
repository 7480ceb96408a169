// cast (kernels/cast.hpp), CPU twin: f32 -> f16/bf16 rounds exactly as the
// scalar conversions of engine/dtype.hpp (round to nearest even), bit for bit;
// a shape mismatch is an error naming the op. The CUDA kernel against this
// twin: test_cast_gpu.cpp.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/dtype.hpp"
#include "kernels/ops.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

TEST_CASE("cast through the dispatch point (CPU twin) rounds like the scalar conversions") {
  const auto v = testing::random_floats(100000, 2, -70000.f, 70000.f);
  Tensor a = Tensor::from_floats(v, {100000});
  for (DType t : {DType::f16, DType::bf16}) {
    Tensor h = Tensor::empty({100000}, t);
    ops::cast(a, h);
    const auto got = h.to_floats();
    for (std::size_t i = 0; i < v.size(); ++i) {
      const float want = t == DType::f16 ? f16_bits_to_f32(f32_to_f16_bits(v[i]))
                                         : bf16_bits_to_f32(f32_to_bf16_bits(v[i]));
      REQUIRE(std::bit_cast<std::uint32_t>(got[i]) == std::bit_cast<std::uint32_t>(want));
    }
  }
  Tensor wrong = Tensor::empty({5}, DType::f16);
  CHECK_THROWS_WITH_AS(ops::cast(a, wrong), doctest::Contains("cast: dst must have shape [100000]"), Error);
}

TEST_CASE("cast to f32 widens every f16 and bf16 bit pattern as the scalar conversions do") {
  for (DType t : {DType::f16, DType::bf16}) {
    std::vector<std::uint16_t> patterns(65536);
    for (std::uint32_t i = 0; i < 65536; ++i) patterns[i] = std::uint16_t(i);
    Tensor h = Tensor::empty({65536}, t);
    std::memcpy(h.raw(), patterns.data(), 65536 * 2);
    Tensor f = Tensor::empty({65536}, DType::f32);
    f.fill_bytes(0xff);  // NaN: every element must be written
    ops::cast(h, f);
    int bad = 0;
    for (std::uint32_t i = 0; i < 65536; ++i) {
      const float want = t == DType::f16 ? f16_bits_to_f32(std::uint16_t(i)) : bf16_bits_to_f32(std::uint16_t(i));
      const float got = f.data<float>()[i];
      // Widening is exact: equal bits, NaN payloads aside.
      if (std::bit_cast<std::uint32_t>(got) != std::bit_cast<std::uint32_t>(want) && !(std::isnan(got) && std::isnan(want)))
        ++bad;
    }
    CHECK(bad == 0);
  }
}
