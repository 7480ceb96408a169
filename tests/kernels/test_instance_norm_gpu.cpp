// instance_norm (kernels/instance_norm.cu) against its CPU twin: every
// precision, both shapes, batch 1, odd frame counts below and above a warp,
// one frame; outputs NaN-poisoned first (every element must be written), two
// runs bit-identical, in place = out of place bit for bit. Runs only where a
// GPU (or the CUDA emulator) is usable; else exits 77 (skipped).
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "engine/stream.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/tensor_bits.hpp"
#include "tests/kernels/tolerance.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {

const Device kGpu = Device::cuda(0);

Tensor run_gpu(const Tensor& x_host, Stream& s) {
  const Tensor x = x_host.to(kGpu, s.handle());
  Tensor y = testing::poisoned(x_host.shape(), x_host.dtype(), kGpu, Layout::plain, s.handle());
  ops::instance_norm(x, y, s.handle());
  s.synchronize();
  return y;
}

}  // namespace

TEST_CASE("instance_norm gpu: CUDA vs CPU twin, every precision, both shapes, odd sizes, in place, reruns") {
  Stream s(kGpu);
  struct S3 {
    std::int64_t B, mels;
    int frames;
  };
  for (S3 sh : {S3{1, 1, 1}, S3{1, 3, 7}, S3{2, 9, 31}, S3{3, 5, 33}, S3{2, 40, 101}, S3{1, 17, 300}})
    for (bool rank4 : {false, true})
      for (DType t : {DType::f32, DType::bf16, DType::f16}) {
        CAPTURE(sh.B);
        CAPTURE(sh.mels);
        CAPTURE(sh.frames);
        CAPTURE(rank4);
        CAPTURE(dtype_name(t));
        const std::size_t n = std::size_t(sh.B * sh.mels * sh.frames);
        std::vector<float> v = testing::random_floats(n, std::uint64_t(sh.frames * 7 + sh.mels));
        for (std::size_t i = 0; i < n; ++i) v[i] = v[i] - 40.f - float(i / std::size_t(sh.frames) % 5) * 8.f;
        const Shape shape = rank4 ? Shape{sh.B, sh.mels, sh.frames, 1} : Shape{sh.B, sh.mels, sh.frames};
        const Tensor x = Tensor::from_floats(v, shape, t);
        Tensor cpu = Tensor::empty(shape, t);
        ops::instance_norm(x, cpu);
        const Tensor gpu = run_gpu(x, s), again = run_gpu(x, s);
        CHECK(testing::same_bytes(gpu, again));
        CHECK(testing::rel_l2(gpu.to_floats(), cpu.to_floats()) <= testing::rel_l2_tolerance(t));
        Tensor inplace = x.to(kGpu, s.handle());
        ops::instance_norm(inplace, inplace, s.handle());
        s.synchronize();
        CHECK(testing::same_bytes(inplace, gpu));
      }
}
