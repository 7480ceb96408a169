// mixup (kernels/mixup.cu) against its CPU twin (test_mixup.cpp checks the
// twin against a float64 reference): f32/bf16/f16, batches from 1 to one
// larger than the kernel's grid, with and without the leak head; the counter
// read from device memory; a captured CUDA graph replayed with two counters.
// The weights are double Gamma draws on both sides: bit-equal on the emulator
// (the host's libm), and on a GPU equal except where CUDA's double log/pow/cos
// round the f32 weight apart (then within one f32 ulp, and the values within
// that ulp's effect). Runs only where a GPU (or the CUDA emulator) is usable;
// else exits 77.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/stream.hpp"
#include "kernels/ops.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using kernels::MixupArgs;

namespace {

const Device kGpu = Device::cuda(0);

struct Mixed {
  std::vector<float> x, leak, lam, labels_b;
};

struct Inputs {
  MixupArgs d;
  DType t;
  std::vector<float> x, labels, leak;
};

Inputs inputs(std::int64_t B, std::int64_t n, DType t, bool leak_head, float alpha) {
  Inputs in;
  in.d.batch = B;
  in.d.elems = n;
  in.d.alpha = alpha;
  in.d.seed = 0xfeedbeefull;
  in.d.stream = 1;
  in.d.first_sample = 5;
  in.t = t;
  in.x = testing::random_floats(std::size_t(B * n), std::uint64_t(B + n), -60, 5);
  for (std::int64_t i = 0; i < B; ++i) {
    in.labels.push_back(float(i % 7));
    if (leak_head) in.leak.push_back(float(i % 3) / 2.f);
  }
  return in;
}

Mixed twin(const Inputs& in, std::int32_t ctr) {
  const MixupArgs& d = in.d;
  const Tensor tx = Tensor::from_floats(in.x, {d.batch, d.elems}, in.t);
  const Tensor tl = Tensor::from_floats(in.labels, {d.batch}, DType::i32);
  const Tensor tk = in.leak.empty() ? Tensor() : Tensor::from_floats(in.leak, {d.batch});
  Tensor xo = Tensor::empty({d.batch, d.elems}, in.t), lb = Tensor::empty({d.batch}, DType::i32),
         lam = Tensor::empty({d.batch}, DType::f32);
  Tensor ko = in.leak.empty() ? Tensor() : Tensor::empty({d.batch}, DType::f32);
  ops::mixup(tx, tl, &ctr, d, xo, lb, lam, tk.defined() ? &tk : nullptr, ko.defined() ? &ko : nullptr);
  return {xo.to_floats(), ko.defined() ? ko.to_floats() : std::vector<float>{}, lam.to_floats(), lb.to_floats()};
}

struct OnGpu {
  Tensor x, labels, leak, xo, lb, lam, ko, ctr;
};

OnGpu upload(const Inputs& in, std::int32_t ctr, Stream& s) {
  const MixupArgs& d = in.d;
  OnGpu g;
  g.x = Tensor::from_floats(in.x, {d.batch, d.elems}, in.t).to(kGpu, s);
  g.labels = Tensor::from_floats(in.labels, {d.batch}, DType::i32).to(kGpu, s);
  if (!in.leak.empty()) {
    g.leak = Tensor::from_floats(in.leak, {d.batch}).to(kGpu, s);
    g.ko = Tensor::empty({d.batch}, DType::f32, kGpu, Layout::plain, s);
    g.ko.fill_bytes(0xff, s);
  }
  g.xo = Tensor::empty({d.batch, d.elems}, in.t, kGpu, Layout::plain, s);
  g.xo.fill_bytes(0xff, s);
  g.lb = Tensor::empty({d.batch}, DType::i32, kGpu, Layout::plain, s);
  g.lb.fill_bytes(0xff, s);
  g.lam = Tensor::empty({d.batch}, DType::f32, kGpu, Layout::plain, s);
  g.lam.fill_bytes(0xff, s);
  g.ctr = Tensor::from_floats(std::vector<float>{float(ctr)}, {1}, DType::i32).to(kGpu, s);
  return g;
}

Mixed download(const OnGpu& g) {
  return {g.xo.to_floats(), g.ko.defined() ? g.ko.to_floats() : std::vector<float>{}, g.lam.to_floats(),
          g.lb.to_floats()};
}

void check_equal(const Inputs& in, const Mixed& gpu, const Mixed& cpu) {
  INFO(dtype_name(in.t) << " batch " << in.d.batch << " elems " << in.d.elems << " leak " << !in.leak.empty());
  CHECK(gpu.labels_b == cpu.labels_b);
  if (testing::kEmulatedGpu) {
    CHECK(gpu.lam == cpu.lam);
    CHECK(gpu.x == cpu.x);
    CHECK(gpu.leak == cpu.leak);
    return;
  }
  REQUIRE(gpu.lam.size() == cpu.lam.size());
  for (std::size_t i = 0; i < cpu.lam.size(); ++i) CHECK(std::fabs(gpu.lam[i] - cpu.lam[i]) <= 6e-8f);
  CHECK(testing::rel_l2(gpu.x, cpu.x) <= (in.t == DType::f32 ? 1e-6 : 1e-2));
  CHECK(testing::rel_l2(gpu.leak, cpu.leak) <= 1e-6);
}

}  // namespace

TEST_CASE("mixup CUDA equals the CPU twin: dtypes, batch sizes, leak head on and off, alpha below and above 1") {
  for (std::int64_t B : {1, 2, 9, 64})
    for (DType t : {DType::f32, DType::bf16, DType::f16})
      for (bool leak_head : {true, false})
        for (float alpha : {0.3f, 2.f}) {
          const Inputs in = inputs(B, 101, t, leak_head, alpha);
          Stream s(kGpu);
          OnGpu g = upload(in, 13, s);
          ops::mixup(g.x, g.labels, g.ctr.data<std::int32_t>(), in.d, g.xo, g.lb, g.lam,
                     g.leak.defined() ? &g.leak : nullptr, g.ko.defined() ? &g.ko : nullptr, s);
          s.synchronize();
          check_equal(in, download(g), twin(in, 13));
        }
}

TEST_CASE("mixup CUDA: a batch larger than the grid (blocks loop over samples)") {
  const std::int64_t B = testing::emu_scaled(kernels::kMixupMaxBlocks * 2 + 3, 4);
  const Inputs in = inputs(B, 3, DType::f32, true, 0.4f);
  Stream s(kGpu);
  OnGpu g = upload(in, 2, s);
  ops::mixup(g.x, g.labels, g.ctr.data<std::int32_t>(), in.d, g.xo, g.lb, g.lam, g.leak.defined() ? &g.leak : nullptr,
             g.ko.defined() ? &g.ko : nullptr, s);
  s.synchronize();
  check_equal(in, download(g), twin(in, 2));
}

TEST_CASE("mixup CUDA: a captured graph replayed with two counters draws the twin's weights and pairs for each") {
  const Inputs in = inputs(12, 40, DType::bf16, true, 0.4f);
  Stream s(kGpu);
  OnGpu g = upload(in, 0, s);
  s.synchronize();
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  ops::mixup(g.x, g.labels, g.ctr.data<std::int32_t>(), in.d, g.xo, g.lb, g.lam, g.leak.defined() ? &g.leak : nullptr,
             g.ko.defined() ? &g.ko : nullptr, s);
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  std::vector<float> first;
  for (std::int32_t ctr : {100, 101}) {
    g.ctr.copy_from(Tensor::from_floats(std::vector<float>{float(ctr)}, {1}, DType::i32), s);
    REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
    s.synchronize();
    CAPTURE(ctr);
    const Mixed replayed = download(g);
    check_equal(in, replayed, twin(in, ctr));
    if (first.empty()) {
      first = replayed.lam;
    } else {
      CHECK(replayed.lam != first);  // the second replay drew afresh
    }
  }
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
  CHECK(cudaGraphDestroy(graph) == cudaSuccess);
}
