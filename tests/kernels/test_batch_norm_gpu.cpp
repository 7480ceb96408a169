// batch_norm CUDA kernels (kernels/batch_norm.cu) against the CPU twin: train
// forward, running-stat update, backward and eval forward, every precision,
// residual and ReLU on and off, odd channel counts (not multiples of 32),
// batch 1, M = 2, rank 2, many row chunks; log-mel-like data with a large
// mean. Device outputs are NaN-poisoned first, so every element must be
// written; every case runs twice for bit-identical results; a caller's
// scratch gives the bits of the per-call one, and a CUDA graph capture with it
// replays to the same bits (without it the capture is refused).
// Runs only where a GPU (or the CUDA emulator) is usable; else exits 77.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/stream.hpp"
#include "kernels/batch_norm.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/tensor_bits.hpp"
#include "tests/kernels/tolerance.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {

const Device kGpu = Device::cuda(0);

// The tensors of one training step of the op (inputs and outputs).
struct Run {
  Tensor x, gamma, beta, res, rm, rv, sm, si, y, dy, dx, dg, db, y_eval;
};

Run make_inputs(const Shape& shape, DType t, std::uint64_t seed, bool with_res, float xmean, float xsd) {
  const std::int64_t C = shape.back(), n = shape_numel(shape);
  Run r;
  r.x = Tensor::from_floats(testing::random_normal_floats(std::size_t(n), seed, xmean, xsd), shape, t);
  r.gamma = Tensor::from_floats(testing::random_floats(std::size_t(C), seed + 1, 0.5f, 1.5f), {C}, t);
  r.beta = Tensor::from_floats(testing::random_floats(std::size_t(C), seed + 2, -0.5f, 0.5f), {C}, t);
  if (with_res) r.res = Tensor::from_floats(testing::random_floats(std::size_t(n), seed + 3), shape, t);
  r.rm = Tensor::from_floats(testing::random_floats(std::size_t(C), seed + 4, -0.2f, 0.2f), {C});
  r.rv = Tensor::from_floats(testing::random_floats(std::size_t(C), seed + 5, 0.5f, 2.f), {C});
  r.dy = Tensor::from_floats(testing::random_floats(std::size_t(n), seed + 6), shape, t);
  return r;
}

// A copy of the inputs on `dev` with fresh (on the GPU: NaN-poisoned) outputs.
Run place(const Run& in, Device dev, Stream& s) {
  Run r;
  const Shape& shape = in.x.shape();
  const std::int64_t C = shape.back();
  const DType t = in.x.dtype();
  r.x = in.x.to(dev, s);
  r.gamma = in.gamma.to(dev, s);
  r.beta = in.beta.to(dev, s);
  if (in.res.defined()) r.res = in.res.to(dev, s);
  r.rm = in.rm.to(dev, s);
  r.rv = in.rv.to(dev, s);
  r.dy = in.dy.to(dev, s);
  r.sm = Tensor::empty({C}, DType::f32, dev, Layout::plain, s);
  r.si = Tensor::empty({C}, DType::f32, dev, Layout::plain, s);
  r.dg = Tensor::empty({C}, DType::f32, dev, Layout::plain, s);
  r.db = Tensor::empty({C}, DType::f32, dev, Layout::plain, s);
  r.y = Tensor::empty(shape, t, dev, Layout::plain, s);
  r.dx = Tensor::empty(shape, t, dev, Layout::plain, s);
  r.y_eval = Tensor::empty(shape, t, dev, Layout::plain, s);
  if (dev.is_cuda())
    for (Tensor* p : {&r.sm, &r.si, &r.dg, &r.db, &r.y, &r.dx, &r.y_eval}) p->fill_bytes(0xff, s);
  return r;
}

void step(Run& r, bool relu, cudaStream_t s, Tensor* scratch = nullptr) {
  const Tensor* res = r.res.defined() ? &r.res : nullptr;
  ops::batch_norm_train_forward(r.x, r.gamma, r.beta, r.rm, r.rv, 1e-5f, 0.1f, relu, r.sm, r.si, r.y, res, scratch,
                                s);
  ops::batch_norm_backward(r.x, r.gamma, r.sm, r.si, r.dy, relu, r.dx, r.dg, r.db, &r.y, scratch, s);
  ops::batch_norm_eval_forward(r.x, r.gamma, r.beta, r.rm, r.rv, 1e-5f, relu, r.y_eval, res, s);
}

bool same_outputs(const Run& a, const Run& b) {
  bool same = true;
  for (auto [p, q] : {std::pair{&a.y, &b.y}, {&a.sm, &b.sm}, {&a.si, &b.si}, {&a.rm, &b.rm}, {&a.rv, &b.rv},
                      {&a.dy, &b.dy}, {&a.dx, &b.dx}, {&a.dg, &b.dg}, {&a.db, &b.db}, {&a.y_eval, &b.y_eval}})
    same = same && testing::same_bytes(*p, *q);
  return same;
}

// dx cancels (to ~0 when M = 2): its error is measured against the size of
// the cancelling terms ||gamma * invstd * dy|| when that is the larger.
double dx_error(const Tensor& dx, const Run& ref) {
  const auto a = dx.to_floats(), b = ref.dx.to_floats(), g = ref.gamma.to_floats(), is = ref.si.to_floats(),
             dy = ref.dy.to_floats();
  const std::size_t C = g.size();
  double num = 0, den = 0, scale = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    if (std::isnan(a[k])) return INFINITY;
    num += double(a[k] - b[k]) * (a[k] - b[k]);
    den += double(b[k]) * b[k];
    const double t = double(g[k % C]) * is[k % C] * dy[k];
    scale += t * t;
  }
  return std::sqrt(num / std::max({den, scale, 1e-300}));
}

// The mean's difference in units of the data's spread.
double mean_error(const Tensor& mean, const Run& ref) {
  const auto m = mean.to_floats(), want = ref.sm.to_floats(), is = ref.si.to_floats();
  double e = 0;
  for (std::size_t c = 0; c < m.size(); ++c) {
    if (std::isnan(m[c])) return INFINITY;
    const double t = double(m[c] - want[c]) * is[c];
    e += t * t;
  }
  return std::sqrt(e / double(m.size()));
}

void check_against_twin(const Run& g, const Run& cpu, DType t, double stat_tol) {
  const double tol = testing::rel_l2_tolerance(t);
  CHECK(testing::rel_l2(g.y.to_floats(), cpu.y.to_floats()) <= tol);
  CHECK(mean_error(g.sm, cpu) <= stat_tol);
  CHECK(testing::rel_l2(g.si.to_floats(), cpu.si.to_floats()) <= stat_tol);
  CHECK(testing::rel_l2(g.rm.to_floats(), cpu.rm.to_floats()) <= stat_tol);
  CHECK(testing::rel_l2(g.rv.to_floats(), cpu.rv.to_floats()) <= stat_tol);
  CHECK(testing::rel_l2(g.dy.to_floats(), cpu.dy.to_floats()) <= tol);
  CHECK(dx_error(g.dx, cpu) <= tol);
  CHECK(testing::rel_l2(g.dg.to_floats(), cpu.dg.to_floats()) <= 1e-5);
  CHECK(testing::rel_l2(g.db.to_floats(), cpu.db.to_floats()) <= 1e-5);
  CHECK(testing::rel_l2(g.y_eval.to_floats(), cpu.y_eval.to_floats()) <= tol);
}

}  // namespace

TEST_CASE("batch_norm CUDA vs CPU twin: every precision, residual/relu, odd C, batch 1, M = 2, rank 2, many chunks") {
  Stream s(kGpu);
  Stream cpu_stream;
  const std::int64_t big = testing::emu_scaled(100, 4);  // M = 2 * big * 100 rows: > 64 rows per chunk on a GPU
  const Shape shapes[] = {{1, 3, 5, 7}, {2, 1, 1, 3}, {37, 5}, {5, 9, 7, 40}, {2, big, 100, 24}};
  std::uint64_t seed = 1;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (const Shape& shape : shapes)
      for (int combo = 0; combo < 4; ++combo) {
        const bool with_res = combo & 1, relu = combo & 2;
        INFO(dtype_name(t), " ", shape_str(shape), " residual ", with_res, " relu ", relu);
        const Run in = make_inputs(shape, t, seed += 10, with_res, 0.f, 1.f);
        Run cpu = place(in, Device::cpu(), cpu_stream);
        step(cpu, relu, nullptr);
        Run g1 = place(in, kGpu, s), g2 = place(in, kGpu, s);
        step(g1, relu, s);
        step(g2, relu, s);
        s.synchronize();
        check_against_twin(g1, cpu, t, 1e-5);
        CHECK(same_outputs(g1, g2));
      }
}

TEST_CASE("batch_norm CUDA with log-mel-like data (-40 dB +- 5): statistics as accurate as the twin's") {
  Stream s(kGpu);
  Stream cpu_stream;
  const Shape shape{4, testing::emu_scaled(64, 4), 40, 16};
  for (DType t : {DType::f32, DType::bf16}) {
    INFO(dtype_name(t));
    const Run in = make_inputs(shape, t, 4040, true, -40.f, 5.f);
    Run cpu = place(in, Device::cpu(), cpu_stream);
    step(cpu, true, nullptr);
    Run g = place(in, kGpu, s);
    step(g, true, s);
    s.synchronize();
    check_against_twin(g, cpu, t, 2e-6);
  }
}

TEST_CASE("batch_norm CUDA: a caller's scratch gives the same bits; a graph capture with it replays them") {
  Stream s(kGpu);
  const Shape shape{3, 11, 13, 20};
  const std::int64_t M = 3 * 11 * 13;
  const Run in = make_inputs(shape, DType::bf16, 777, true, 0.f, 1.f);
  Run direct = place(in, kGpu, s);
  step(direct, true, s);
  Tensor scratch = Tensor::empty({kernels::batch_norm_scratch_elems(M, 20)}, DType::f32, kGpu, Layout::plain, s);
  scratch.fill_bytes(0xff, s);
  Run given = place(in, kGpu, s);
  step(given, true, s, &scratch);
  s.synchronize();
  CHECK(same_outputs(direct, given));

  Tensor small = Tensor::empty({kernels::batch_norm_scratch_elems(M, 20) - 1}, DType::f32, kGpu, Layout::plain, s);
  CHECK(testing::error_of([&] { step(given, true, s, &small); }).find("scratch must hold at least") !=
        std::string::npos);

  // Capture: the op allocates nothing when given a scratch. The capture
  // records the launches only, so the graph's replay computes the step.
  Run captured = place(in, kGpu, s);
  s.synchronize();
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  const std::string refused = testing::error_of([&] { step(captured, true, s); });
  step(captured, true, s, &scratch);
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  CHECK(refused.find("being captured into a CUDA graph") != std::string::npos);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  s.synchronize();
  CHECK(same_outputs(direct, captured));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}
