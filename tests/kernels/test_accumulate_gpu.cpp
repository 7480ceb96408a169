// accumulate (dst += src, f32; kernels/adamw.cu) against its CPU twin: one f32
// addition per element on both, so the results are equal bit for bit, for
// lengths that do not fill the last block and on views at 16-byte offsets (the
// gradient buffers' parameter views). Runs only where a GPU (or the CUDA
// emulator) is usable; else exits 77 (skipped).
#include <doctest/doctest.h>

#include <cmath>

#include "engine/stream.hpp"
#include "kernels/ops.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

TEST_CASE("accumulate: CUDA equals the CPU twin bit for bit, odd lengths and offset views") {
  const Device gpu = Device::cuda(0);
  Stream s(gpu);
  const std::int64_t off = 4;  // 16 bytes
  for (std::int64_t n : {1, 255, 257, 1000003}) {
    const Tensor src = Tensor::from_floats(testing::random_floats(std::size_t(n), 50), {n});
    const Tensor dst0 = Tensor::from_floats(testing::random_floats(std::size_t(n), 51), {n});
    Tensor dst = Tensor::empty({n}, DType::f32);
    dst.copy_from(dst0);
    ops::accumulate(src, dst);
    ops::accumulate(src, dst);
    // Device operands as views `off` elements into bigger buffers whose
    // margins must stay as they were (poisoned): nothing written outside.
    Tensor gsrc_flat = Tensor::empty({n + 2 * off}, DType::f32, gpu, Layout::plain, s);
    Tensor gdst_flat = Tensor::empty({n + 2 * off}, DType::f32, gpu, Layout::plain, s);
    gsrc_flat.fill_bytes(0xff, s);
    gdst_flat.fill_bytes(0xff, s);
    Tensor gsrc = gsrc_flat.slice(off, off + n), gdst = gdst_flat.slice(off, off + n);
    gsrc.copy_from(src, s);
    gdst.copy_from(dst0, s);
    ops::accumulate(gsrc, gdst, s);
    ops::accumulate(gsrc, gdst, s);
    s.synchronize();
    CHECK(gdst.to_floats() == dst.to_floats());
    CHECK(gsrc.to_floats() == src.to_floats());
    const auto flat = gdst_flat.to_floats();
    int margin_written = 0;
    for (std::int64_t i = 0; i < off; ++i)
      margin_written += !std::isnan(flat[std::size_t(i)]) + !std::isnan(flat[std::size_t(n + off + i)]);
    CHECK(margin_written == 0);
  }
}
