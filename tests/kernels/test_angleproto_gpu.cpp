// angleproto_loss (kernels/angleproto.cu) against its CPU twin: every
// precision, N = 2..40 with M = 2 and 3, odd D below and above a warp, N = 300
// (more prototypes than the forward block's threads), w above and below the
// clamp, a device-held loss scale with grad_scale; outputs NaN-poisoned first
// (every element must be written), metrics accumulated onto non-zero values,
// two runs bit-identical; a caller scratch gives the per-call scratch's bits.
// Runs only where a GPU (or the CUDA emulator) is usable; else exits 77.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/stream.hpp"
#include "kernels/loss.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/tensor_bits.hpp"
#include "tests/kernels/tolerance.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {

const Device kGpu = Device::cuda(0);

struct Problem {
  kernels::AngleProtoArgs d;
  float w = 10.f, b = -5.f;
  std::vector<float> emb;
};

Problem make(int N, int M, int D, std::uint64_t seed, float w = 10.f, float grad_scale = 1.f) {
  Problem p;
  p.d.classes = N;
  p.d.per_class = M;
  p.d.dim = D;
  p.d.grad_scale = grad_scale;
  p.w = w;
  p.emb = testing::random_floats(std::size_t(N) * std::size_t(M) * std::size_t(D), seed);
  return p;
}

struct Outputs {
  Tensor demb, dwb, sums, counts, step;
};

Outputs run(const Problem& p, DType t, Device dev, Stream* s, float loss_scale, Tensor* scratch = nullptr) {
  const std::int64_t R = std::int64_t(p.d.classes) * p.d.per_class, D = p.d.dim;
  cudaStream_t st = s ? s->handle() : nullptr;
  const Tensor emb = Tensor::from_floats(p.emb, {R, D}, t).to(dev, st);
  const Tensor wb = Tensor::from_floats(std::vector<float>{p.w, p.b}, {2}).to(dev, st);
  const Tensor ls = Tensor::from_floats(std::vector<float>{loss_scale}, {1}).to(dev, st);
  Outputs o;
  o.demb = Tensor::empty({R, D}, t, dev, Layout::plain, st);
  o.dwb = Tensor::empty({2}, DType::f32, dev, Layout::plain, st);
  o.step = Tensor::empty({1}, DType::f32, dev, Layout::plain, st);
  for (Tensor* x : {&o.demb, &o.dwb, &o.step}) x->fill_bytes(0xff, st);
  o.sums = Tensor::from_floats(std::vector<float>{0.5f, 0.25f, 0.75f, 3.f}, {kernels::kLossSums}).to(dev, st);
  o.counts = Tensor::from_floats(std::vector<float>{2, 2, 2, 5}, {4}, DType::i32).to(dev, st);
  ops::angleproto_loss(emb, wb, p.d, o.demb, o.dwb, o.sums, o.counts, ls.data<float>(), &o.step, scratch, st);
  if (s) s->synchronize();
  return o;
}

bool same_outputs(const Outputs& a, const Outputs& b) {
  return testing::same_bytes(a.demb, b.demb) && testing::same_bytes(a.dwb, b.dwb) && testing::same_bytes(a.sums, b.sums) &&
         testing::same_bytes(a.counts, b.counts) && testing::same_bytes(a.step, b.step);
}

void compare(const Problem& p, DType t, float loss_scale) {
  Stream s(kGpu);
  const Outputs cpu = run(p, t, Device::cpu(), nullptr, loss_scale);
  const Outputs gpu = run(p, t, kGpu, &s, loss_scale), again = run(p, t, kGpu, &s, loss_scale);
  CHECK(same_outputs(gpu, again));
  const float lc = cpu.step.to_floats()[0], lg = gpu.step.to_floats()[0];
  CHECK(std::fabs(lg - lc) <= 1e-5f * std::max(1.f, std::fabs(lc)));
  CHECK(testing::rel_l2(gpu.demb.to_floats(), cpu.demb.to_floats()) <= testing::rel_l2_tolerance(t));
  const std::vector<float> dg = gpu.dwb.to_floats(), dc = cpu.dwb.to_floats();
  const float S = loss_scale * p.d.grad_scale;
  CHECK(std::fabs(dg[0] - dc[0]) <= 1e-5f * std::max(S, std::fabs(dc[0])));
  CHECK(std::fabs(dg[1] - dc[1]) <= 1e-6f * S);  // both ~0 (softmax rows sum to 1)
  if (p.w < 1e-6f) CHECK(dg[0] == 0.f);
  const std::vector<float> sg = gpu.sums.to_floats(), sc = cpu.sums.to_floats();
  for (std::size_t i = 0; i < sg.size(); ++i) CHECK(std::fabs(sg[i] - sc[i]) <= 1e-5f * std::max(1.f, std::fabs(sc[i])));
  const std::vector<float> cg = gpu.counts.to_floats(), cc = cpu.counts.to_floats();
  CHECK(cg[0] == cc[0]);
  if (p.w >= 1e-6f) CHECK(cg[1] == cc[1]);  // below the clamp the logits tie in f32: argmax is order-dependent
  CHECK(cg[2] == 2.f);
  CHECK(cg[3] == 5.f);  // the tail is not touched
}

}  // namespace

TEST_CASE("angleproto gpu: CUDA vs CPU twin, every precision, N = 2..40, M = 2 and 3, w above and below the clamp") {
  for (int N = 2; N <= 40; N += (N < 6 ? 1 : 7))
    for (int M : {2, 3})
      for (DType t : {DType::f32, DType::bf16, DType::f16}) {
        CAPTURE(N);
        CAPTURE(M);
        CAPTURE(dtype_name(t));
        const int D = 1 + (N * 13 + M) % 70;  // odd sizes, below and above a warp
        compare(make(N, M, D, std::uint64_t(N * 10 + M)), t, 1.f);
        compare(make(N, M, D, std::uint64_t(N * 10 + M + 5), 1e-7f), t, 65536.f);
      }
}

TEST_CASE("angleproto gpu: N = 300, D = 192, loss scale on the device with grad_scale") {
  const int N = int(testing::emu_scaled(300, 3));
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(t));
    const bool scaled = t == DType::f16;
    compare(make(N, 2, 192, 700, 10.f, scaled ? 0.5f : 1.f), t, scaled ? 1024.f : 1.f);
  }
}

TEST_CASE("angleproto gpu: a caller scratch gives the per-call scratch's bits; too small a scratch is refused") {
  Stream s(kGpu);
  const Problem p = make(6, 3, 33, 903);
  const Outputs direct = run(p, DType::bf16, kGpu, &s, 1.f);
  Tensor scratch = Tensor::empty({kernels::angleproto_scratch_elems(6, 33)}, DType::f32, kGpu, Layout::plain,
                                 s.handle());
  scratch.fill_bytes(0xff, s.handle());
  CHECK(same_outputs(direct, run(p, DType::bf16, kGpu, &s, 1.f, &scratch)));
  Tensor small = Tensor::empty({kernels::angleproto_scratch_elems(6, 33) - 1}, DType::f32, kGpu);
  CHECK(testing::error_of([&] { run(p, DType::bf16, kGpu, &s, 1.f, &small); })
            .find("scratch must hold at least angleproto_scratch_elems(N = 6, D = 33)") != std::string::npos);
}
