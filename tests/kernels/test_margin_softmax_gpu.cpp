// margin_softmax_loss (kernels/margin_softmax.cu) against its CPU twin: every
// precision, AM and AAM, C = 1..37 and C = 600, batch 1, ignored labels, a
// device-held loss scale with grad_scale; outputs NaN-poisoned first (every
// element must be written), metrics accumulated onto non-zero values, two
// runs bit-identical; a caller scratch gives the per-call scratch's bits, and
// a CUDA graph capture with it replays them (without it the capture is
// refused); the short counts form. Runs only where a GPU (or the CUDA
// emulator) is usable; else exits 77 (skipped).
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
using kernels::MarginType;

namespace {

const Device kGpu = Device::cuda(0);

struct Problem {
  kernels::MarginSoftmaxArgs d;
  std::vector<float> emb, w;
  std::vector<std::int32_t> labels;
};

Problem make(std::int64_t B, int C, int D, MarginType type, std::uint64_t seed, float grad_scale = 1.f) {
  Problem p;
  p.d.batch = B;
  p.d.classes = C;
  p.d.dim = D;
  p.d.type = type;
  p.d.margin = type == MarginType::am ? 0.3f : 0.2f;
  p.d.grad_scale = grad_scale;
  p.emb = testing::random_floats(std::size_t(B * D), seed);
  p.w = testing::random_floats(std::size_t(C) * D, seed + 1);
  const std::vector<float> l = testing::random_floats(std::size_t(B), seed + 2, 0.f, float(C));
  for (float v : l) p.labels.push_back(std::min(std::int32_t(v), C - 1));
  if (B >= 3) {  // ignored labels
    p.labels[1] = -1;
    p.labels[std::size_t(B - 1)] = C;
  }
  return p;
}

struct Outputs {
  Tensor demb, dweight, sums, counts, step;
};

Tensor labels_tensor(const std::vector<std::int32_t>& l) {
  Tensor t = Tensor::empty({std::int64_t(l.size())}, DType::i32);
  std::memcpy(t.raw(), l.data(), l.size() * sizeof(std::int32_t));
  return t;
}

// Runs the op on `dev`; sums and counts start at non-zero values (the op adds).
Outputs run(const Problem& p, DType t, Device dev, Stream* s, float loss_scale, bool confusion = true,
            Tensor* scratch = nullptr, Outputs* into = nullptr) {
  const std::int64_t B = p.d.batch, C = p.d.classes, D = p.d.dim;
  cudaStream_t st = s ? s->handle() : nullptr;
  const Tensor emb = Tensor::from_floats(p.emb, {B, D}, t).to(dev, st);
  const Tensor w = Tensor::from_floats(p.w, {C, D}, t).to(dev, st);
  const Tensor labels = labels_tensor(p.labels).to(dev, st);
  const Tensor ls = Tensor::from_floats(std::vector<float>{loss_scale}, {1}).to(dev, st);
  Outputs o;
  o.demb = Tensor::empty({B, D}, t, dev, Layout::plain, st);
  o.dweight = Tensor::empty({C, D}, DType::f32, dev, Layout::plain, st);
  o.step = Tensor::empty({1}, DType::f32, dev, Layout::plain, st);
  for (Tensor* x : {&o.demb, &o.dweight, &o.step}) x->fill_bytes(0xff, st);
  std::vector<float> sums0 = {0.5f, 0.25f, 0.75f, 3.f};
  std::vector<float> counts0(std::size_t(kernels::kLossCounts + (confusion ? C * C : 0)), 2.f);
  o.sums = Tensor::from_floats(sums0, {kernels::kLossSums}).to(dev, st);
  o.counts = Tensor::from_floats(counts0, {std::int64_t(counts0.size())}, DType::i32).to(dev, st);
  ops::margin_softmax_loss(emb, w, labels, p.d, o.demb, o.dweight, o.sums, o.counts, ls.data<float>(), &o.step, scratch,
                           st);
  if (s) s->synchronize();
  if (into) *into = o;
  return o;
}

bool same_outputs(const Outputs& a, const Outputs& b) {
  return testing::same_bytes(a.demb, b.demb) && testing::same_bytes(a.dweight, b.dweight) && testing::same_bytes(a.sums, b.sums) &&
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
  CHECK(testing::rel_l2(gpu.dweight.to_floats(), cpu.dweight.to_floats()) <= 1e-5);
  const std::vector<float> sg = gpu.sums.to_floats(), sc = cpu.sums.to_floats();
  for (int i = 0; i < kernels::kLossSums; ++i) CHECK(std::fabs(sg[std::size_t(i)] - sc[std::size_t(i)]) <= 1e-5f * std::max(1.f, std::fabs(sc[std::size_t(i)])));
  CHECK(gpu.counts.to_floats() == cpu.counts.to_floats());
}

}  // namespace

TEST_CASE("margin_softmax gpu: CUDA vs CPU twin, every precision, AM and AAM, C = 1..37, batch 1") {
  for (int C = 1; C <= 37; ++C)
    for (MarginType type : {MarginType::am, MarginType::aam})
      for (DType t : {DType::f32, DType::bf16, DType::f16}) {
        CAPTURE(C);
        CAPTURE(int(type));
        CAPTURE(dtype_name(t));
        const std::int64_t B = 1 + C % 5;  // 1..5: batch 1 included, ignored labels from 3
        const int D = 1 + (C * 7) % 40;      // odd sizes, below and above a warp
        compare(make(B, C, D, type, std::uint64_t(C * 10 + int(type))), t, 1.f);
      }
}

TEST_CASE("margin_softmax gpu: C = 600, D = 192 and 512, batch 1 and 9, loss scale on the device with grad_scale") {
  for (auto [B, D] : {std::pair<std::int64_t, int>{1, 192}, {9, 512}})
    for (MarginType type : {MarginType::am, MarginType::aam})
      for (DType t : {DType::f32, DType::bf16, DType::f16}) {
        CAPTURE(B);
        CAPTURE(int(type));
        CAPTURE(dtype_name(t));
        const bool scaled = t == DType::f16;
        compare(make(B, 600, D, type, 700 + std::uint64_t(B), scaled ? 0.5f : 1.f), t, scaled ? 1024.f : 1.f);
      }
}

TEST_CASE("margin_softmax gpu: all labels ignored; the short counts form") {
  Stream s(kGpu);
  Problem p = make(4, 6, 9, MarginType::aam, 901);
  p.labels = {-1, 6, 17, -3};
  const Outputs g = run(p, DType::f32, kGpu, &s, 1.f), c = run(p, DType::f32, Device::cpu(), nullptr, 1.f);
  CHECK(g.step.to_floats()[0] == 0.f);
  for (float v : g.demb.to_floats()) CHECK(v == 0.f);
  for (float v : g.dweight.to_floats()) CHECK(v == 0.f);
  CHECK(g.counts.to_floats() == c.counts.to_floats());
  CHECK(g.sums.to_floats() == c.sums.to_floats());
  const Problem q = make(7, 11, 13, MarginType::am, 902);
  const Outputs gs = run(q, DType::bf16, kGpu, &s, 1.f, false), cs = run(q, DType::bf16, Device::cpu(), nullptr, 1.f, false);
  CHECK(gs.counts.to_floats() == cs.counts.to_floats());
  CHECK(gs.counts.numel() == kernels::kLossCounts);
}

TEST_CASE("margin_softmax gpu: caller scratch = per-call scratch bits; graph capture with scratch replays them") {
  Stream s(kGpu);
  const Problem p = make(6, 29, 33, MarginType::aam, 903);
  const Outputs direct = run(p, DType::bf16, kGpu, &s, 1.f);
  Tensor scratch = Tensor::empty({kernels::margin_softmax_scratch_elems(6, 29, 33)}, DType::f32, kGpu,
                                 Layout::plain, s.handle());
  scratch.fill_bytes(0xff, s.handle());
  CHECK(same_outputs(direct, run(p, DType::bf16, kGpu, &s, 1.f, true, &scratch)));
  Tensor small = Tensor::empty({kernels::margin_softmax_scratch_elems(6, 29, 33) - 1}, DType::f32, kGpu);
  CHECK(testing::error_of([&] { run(p, DType::bf16, kGpu, &s, 1.f, true, &small); })
            .find("scratch must hold at least margin_softmax_scratch_elems(B = 6, C = 29, D = 33)") !=
        std::string::npos);

  // Capture: inputs and outputs allocated before it; the op inside.
  const Tensor emb = Tensor::from_floats(p.emb, {6, 33}, DType::bf16).to(kGpu, s.handle());
  const Tensor w = Tensor::from_floats(p.w, {29, 33}, DType::bf16).to(kGpu, s.handle());
  const Tensor labels = labels_tensor(p.labels).to(kGpu, s.handle());
  const Tensor ls = Tensor::from_floats(std::vector<float>{1.f}, {1}).to(kGpu, s.handle());
  Outputs cap;
  cap.demb = Tensor::empty({6, 33}, DType::bf16, kGpu, Layout::plain, s.handle());
  cap.dweight = Tensor::empty({29, 33}, DType::f32, kGpu, Layout::plain, s.handle());
  cap.step = Tensor::empty({1}, DType::f32, kGpu, Layout::plain, s.handle());
  cap.sums = Tensor::from_floats(std::vector<float>{0.5f, 0.25f, 0.75f, 3.f}, {4}).to(kGpu, s.handle());
  cap.counts = Tensor::from_floats(std::vector<float>(3 + 29 * 29, 2.f), {3 + 29 * 29}, DType::i32).to(kGpu, s.handle());
  for (Tensor* x : {&cap.demb, &cap.dweight, &cap.step}) x->fill_bytes(0xff, s.handle());
  s.synchronize();
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamBeginCapture(s.handle(), cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  const std::string refused = testing::error_of([&] {
    ops::margin_softmax_loss(emb, w, labels, p.d, cap.demb, cap.dweight, cap.sums, cap.counts, ls.data<float>(),
                             &cap.step, nullptr, s.handle());
  });
  ops::margin_softmax_loss(emb, w, labels, p.d, cap.demb, cap.dweight, cap.sums, cap.counts, ls.data<float>(),
                           &cap.step, &scratch, s.handle());
  REQUIRE(cudaStreamEndCapture(s.handle(), &graph) == cudaSuccess);
  CHECK(refused.find("being captured into a CUDA graph") != std::string::npos);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, s.handle()) == cudaSuccess);
  s.synchronize();
  CHECK(same_outputs(direct, cap));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}
