// accumulate (dst += src, any float dtype; kernels/pooling.cu) against its CPU
// twin: the f32 sum rounded once on both, so the results are equal bit for
// bit, for every dtype, lengths that do not fill the last block and views at
// 16-byte offsets (the gradient buffers' parameter views), each run twice
// giving the same bits. Runs only where a GPU (or the CUDA emulator) is
// usable; else exits 77 (skipped).
#include <doctest/doctest.h>

#include <cmath>

#include "engine/stream.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/tensor_bits.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

TEST_CASE("accumulate: CUDA equals the CPU twin bit for bit, every dtype, odd lengths and offset views") {
  const Device gpu = Device::cuda(0);
  Stream s(gpu);
  const std::int64_t off = 8;  // 16 bytes in f16/bf16, 32 in f32
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (std::int64_t n : {1, 255, 257, 1000003}) {
      INFO(dtype_name(t), " n ", n);
      const Tensor src = Tensor::from_floats(testing::random_floats(std::size_t(n), 50), {n}, t);
      const Tensor dst0 = Tensor::from_floats(testing::random_floats(std::size_t(n), 51), {n}, t);
      Tensor dst = Tensor::empty({n}, t);
      dst.copy_from(dst0);
      ops::accumulate(src, dst);
      ops::accumulate(src, dst);
      // Device operands as views `off` elements into bigger buffers whose
      // margins must stay as they were (poisoned): nothing written outside.
      std::vector<std::uint8_t> runs[2];
      for (auto& r : runs) {
        Tensor gsrc_flat = Tensor::empty({n + 2 * off}, t, gpu, Layout::plain, s);
        Tensor gdst_flat = Tensor::empty({n + 2 * off}, t, gpu, Layout::plain, s);
        gsrc_flat.fill_bytes(0xff, s);
        gdst_flat.fill_bytes(0xff, s);
        Tensor gsrc = gsrc_flat.slice(off, off + n), gdst = gdst_flat.slice(off, off + n);
        gsrc.copy_from(src, s);
        gdst.copy_from(dst0, s);
        ops::accumulate(gsrc, gdst, s);
        ops::accumulate(gsrc, gdst, s);
        s.synchronize();
        r = testing::bytes_of(gdst);
        CHECK(r == testing::bytes_of(dst));
        CHECK(testing::bytes_of(gsrc) == testing::bytes_of(src));
        const auto flat = gdst_flat.to_floats();
        int margin_written = 0;
        for (std::int64_t i = 0; i < off; ++i)
          margin_written += !std::isnan(flat[std::size_t(i)]) + !std::isnan(flat[std::size_t(n + off + i)]);
        CHECK(margin_written == 0);
      }
      CHECK(runs[0] == runs[1]);
    }
}
