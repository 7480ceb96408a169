// fold_batch_norm (kernels/fold_batch_norm.cu) against its CPU twin: every
// precision, with and without bias, Cout 1, per-channel sizes below and above
// a block, a weight count that is not a multiple of the block; outputs
// NaN-poisoned first (every element must be written), two runs bit-identical,
// and the same bits as the CPU twin (the same f32 formula, no FMA
// contraction, IEEE sqrt and division). Runs only where a GPU (or the CUDA
// emulator) is usable; else exits 77 (skipped).
#include <doctest/doctest.h>

#include <vector>

#include "engine/stream.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/tensor_bits.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {

const Device kGpu = Device::cuda(0);

struct Params {
  Tensor w, b, gamma, beta, mean, var;
};

Params make(int cout, int k, int cin, DType t, std::uint64_t seed) {
  const std::int64_t C = cout;
  return {Tensor::from_floats(testing::random_floats(std::size_t(cout * k * k * cin), seed), {C, k, k, cin}, t),
          Tensor::from_floats(testing::random_floats(std::size_t(cout), seed + 1), {C}, t),
          Tensor::from_floats(testing::random_floats(std::size_t(cout), seed + 2, 0.5f, 1.5f), {C}, t),
          Tensor::from_floats(testing::random_floats(std::size_t(cout), seed + 3), {C}, t),
          Tensor::from_floats(testing::random_floats(std::size_t(cout), seed + 4, -2.f, 2.f), {C}),
          Tensor::from_floats(testing::random_floats(std::size_t(cout), seed + 5, 0.01f, 3.f), {C})};
}

// On the GPU with s, else on the CPU (s null).
std::pair<Tensor, Tensor> run(const Params& p, bool bias, Device dev, Stream* s) {
  cudaStream_t st = s ? s->handle() : nullptr;
  auto on = [&](const Tensor& t) { return dev.is_cuda() ? t.to(dev, st) : t; };
  const Tensor w = on(p.w), b = on(p.b), g = on(p.gamma), be = on(p.beta), m = on(p.mean), v = on(p.var);
  Tensor w_out = testing::poisoned(p.w.shape(), p.w.dtype(), dev, Layout::plain, st);
  Tensor b_out = testing::poisoned(p.b.shape(), p.w.dtype(), dev, Layout::plain, st);
  ops::fold_batch_norm(w, g, be, m, v, 1e-5f, w_out, b_out, bias ? &b : nullptr, st);
  if (!s) return {w_out, b_out};
  const std::pair<Tensor, Tensor> host{w_out.to(Device::cpu(), st), b_out.to(Device::cpu(), st)};
  s->synchronize();
  return host;
}

}  // namespace

TEST_CASE("fold_batch_norm gpu: CUDA vs CPU twin (same bits), every precision, with and without bias, reruns") {
  Stream s(kGpu);
  struct S {
    int cout, k, cin;
  };
  std::uint64_t seed = 10;
  for (S sh : {S{1, 1, 1}, S{3, 3, 2}, S{300, 1, 1}, S{7, 5, 3}, S{64, 3, 33}, S{5, 3, 64}})
    for (bool bias : {false, true})
      for (DType t : {DType::f32, DType::bf16, DType::f16}) {
        CAPTURE(sh.cout);
        CAPTURE(sh.k);
        CAPTURE(sh.cin);
        CAPTURE(bias);
        CAPTURE(dtype_name(t));
        const Params p = make(sh.cout, sh.k, sh.cin, t, seed++);
        const auto cpu = run(p, bias, Device::cpu(), nullptr);
        const auto gpu = run(p, bias, kGpu, &s), again = run(p, bias, kGpu, &s);
        CHECK(testing::same_bytes(gpu.first, again.first));
        CHECK(testing::same_bytes(gpu.second, again.second));
        CHECK(testing::same_bytes(gpu.first, cpu.first));
        CHECK(testing::same_bytes(gpu.second, cpu.second));
      }
}
