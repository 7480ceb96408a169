// cast (kernels/cast.cu) against its CPU twin over every f16 and bf16 bit
// pattern: widening to f32 bit for bit (NaN payloads aside), and narrowing
// back recovers every non-NaN pattern. Device outputs are NaN-poisoned first.
// Runs only where a GPU (or the CUDA emulator) is usable; else exits 77 (skipped).
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/stream.hpp"
#include "kernels/ops.hpp"

using namespace mf;

TEST_CASE("cast kernel matches the CPU twin bit for bit over every 16-bit pattern") {
  Stream s(Device::cuda(0));
  std::vector<std::uint16_t> patterns(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) patterns[i] = std::uint16_t(i);
  for (DType t : {DType::f16, DType::bf16}) {
    Tensor h = Tensor::empty({65536}, t);
    std::memcpy(h.raw(), patterns.data(), 65536 * 2);
    Tensor d = h.to(Device::cuda(0), s);
    Tensor d32 = Tensor::empty({65536}, DType::f32, Device::cuda(0), Layout::plain, s);
    d32.fill_bytes(0xff, s);  // poison: every element must be written
    ops::cast(d, d32, s);
    Tensor back = Tensor::empty({65536}, t, Device::cuda(0), Layout::plain, s);
    ops::cast(d32, back, s);
    Tensor c32 = Tensor::empty({65536}, DType::f32);
    ops::cast(h, c32);
    const auto got = d32.to_floats(), want = c32.to_floats();
    int bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i]) &&
          !(std::isnan(got[i]) && std::isnan(want[i])))
        ++bad;
    CHECK(bad == 0);
    Tensor bh = back.to(Device::cpu());
    int bad_rt = 0;
    for (std::size_t i = 0; i < 65536; ++i) {
      std::uint16_t b;
      std::memcpy(&b, static_cast<char*>(bh.raw()) + 2 * i, 2);
      if (b != patterns[i] && !std::isnan(want[i])) ++bad_rt;
    }
    CHECK(bad_rt == 0);
  }
}
