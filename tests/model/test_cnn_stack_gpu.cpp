// Whole CNN stacks (model.arch = cnn) trained on the GPU: the three stacks of
// tests/model/cnn_stacks.hpp (every layer type) against the CPU backend in
// fp32 (weights, batch-norm running statistics and forward_eval probabilities
// after AdamW steps), bf16 and fp16 within a stated distance of fp32, CUDA
// graph replay against eager steps and run against run (bit-identical, with
// dropout and gradient accumulation), a batch of 1 in forward_eval and an odd
// micro-batch. Each op's kernel against its CPU twin has its own suite
// (tests/kernels/test_<op>_gpu.cpp); this one checks how CnnStack and
// TrainStep put them together on a device. Runs only where a GPU (or the CUDA
// emulator) is usable; else exits 77 (skipped).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/stream.hpp"
#include "model/train_step.hpp"
#include "tests/model/cnn_stacks.hpp"
#include "tests/model/step_fixture.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {

const Device kGpu = Device::cuda(0);

struct NamedStack {
  std::string name;
  model::ModelConfig m;
};

std::vector<NamedStack> all_stacks() {
  return {{"a", testing::stack_a()}, {"b", testing::stack_b()}, {"c", testing::stack_c()}};
}

// The PyTorch oracle's step configuration (test_cnn_stack.cpp): warmup then
// cosine, clipping that bites, weight decay, class weights, label smoothing.
model::TrainConfig step_config(const model::ModelConfig& m, std::int64_t micro_batch) {
  model::TrainConfig cfg;
  cfg.model = m;
  cfg.micro_batch = micro_batch;
  cfg.optim.lr = 3e-3f;
  cfg.optim.weight_decay = 0.05f;
  cfg.optim.max_grad_norm = 0.5f;
  cfg.optim.schedule = kernels::LrSchedule::cosine;
  cfg.optim.warmup_steps = 2;
  cfg.optim.total_steps = 6;
  cfg.optim.min_lr = 1e-4f;
  cfg.class_weights = {1.0f, 2.0f, 0.5f};
  cfg.label_smoothing = 0.1f;
  cfg.leak_loss_weight = 0.7f;
  cfg.seed = 11;
  return cfg;
}

// What a run leaves: the f32 master (weights and running statistics), the
// forward_eval outputs on the evaluation batch, the step metrics.
struct RunResult {
  std::vector<float> master;
  std::vector<float> probs, leak_prob;
  model::StepMetrics metrics;
  bool graph = false;
};

// `steps` optimizer steps of `cfg` on `dev` (batches 50, 51, ...), then
// forward_eval on `eval_n` samples (batch 999).
RunResult run(const model::TrainConfig& cfg, Device dev, int steps, std::int64_t eval_n, cudaStream_t s) {
  model::TrainStep ts(cfg, dev, s);
  const int mels = cfg.model.in_mels, frames = cfg.model.in_frames;
  for (int i = 0; i < steps; ++i) {
    const auto b = testing::band_batch(ts.batch(), mels, frames, cfg.model.classes, 50 + std::uint64_t(i));
    const auto t = testing::to_tensors(b, ts.batch(), mels, frames, dev);
    if (dev.is_cuda()) MF_CUDA_CHECK(cudaDeviceSynchronize());  // the inputs were copied on the legacy stream
    ts.step(t.x, t.labels, t.leak, s);
    if (dev.is_cuda()) MF_CUDA_CHECK(cudaStreamSynchronize(s));  // the inputs are freed on the legacy stream
  }
  RunResult r;
  r.graph = ts.graph_captured();
  r.metrics = ts.read_metrics(s);
  const auto v = testing::band_batch(eval_n, mels, frames, cfg.model.classes, 999);
  const auto t = testing::to_tensors(v, eval_n, mels, frames, dev);
  if (dev.is_cuda()) MF_CUDA_CHECK(cudaDeviceSynchronize());
  const model::EvalOutput e = ts.forward_eval(t.x, s);
  r.probs = e.probs.to_floats();
  if (cfg.model.leak_head) r.leak_prob = e.leak_prob.to_floats();
  r.master = ts.params().master().to_floats();
  return r;
}

std::vector<float> slice(const std::vector<float>& v, const model::ParamInfo& p) {
  return {v.begin() + p.offset, v.begin() + p.offset + p.numel};
}

// Every parameter and running statistic of `a` near `b`, per tensor (a small
// tensor cannot hide behind a large one): rel L2 `tol` for the weights (conv,
// linear) and the running statistics, `tol_norm` for the biases and batch
// norm's gamma and beta. Why two bounds: a batch norm's output has zero mean
// per channel over the batch, so the gradients of the biases after it (beta,
// the SE gate's fc2 bias) are sums that nearly cancel; AdamW divides each
// gradient by its own magnitude, so their rounding differences reach the
// weights about 100 times amplified (stack a's layers.1.se.fc2.bias: 2.9e-5 on
// the emulator, while every weight tensor stays under 3e-7). Returns the worst
// distance.
double check_params(const model::ModelConfig& m, const std::vector<float>& a, const std::vector<float>& b, double tol,
                    double tol_norm, const std::string& what) {
  const model::ParamBuffer layout(m, DType::f32, Device::cpu());
  REQUIRE(a.size() == b.size());
  double worst = 0;
  std::string worst_name;
  for (const model::ParamInfo& p : layout.params()) {
    const double d = testing::rel_l2(slice(a, p), slice(b, p));
    if (!(d <= worst)) {
      worst = d;
      worst_name = p.name;
    }
    const double t = p.decay || !model::param_trainable(p.kind) ? tol : tol_norm;
    CHECK_MESSAGE(d <= t, what << ": " << p.name << " rel L2 " << d << " > " << t);
  }
  MESSAGE(what << ": worst tensor " << worst_name << " rel L2 " << worst << " (whole buffer "
               << testing::rel_l2(a, b) << ")");
  return worst;
}

bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Stack `m` with dropout after its first layer (spatial) and at its end (flat).
model::ModelConfig with_dropout(model::ModelConfig m, float p) {
  model::CnnLayer d{model::LayerType::dropout};
  d.p = p;
  m.layers.insert(m.layers.begin() + 1, d);
  m.layers.push_back(d);
  return m;
}

}  // namespace

// fp32 on the GPU against the CPU backend: the same math in other summation
// orders (conv2d's and batch norm's chunked reductions, cuBLASLt's dense). The
// PyTorch oracle puts the CPU backend within 6e-6 of float64 after 5 steps.
// Bounds (rel L2 per tensor): 1e-5 for the weights and running statistics
// (measured on the emulator: <= 1e-6), 1e-4 for the biases and batch norm
// parameters (check_params says why; measured <= 2.9e-5), 5e-5 for the
// forward_eval probabilities (measured <= 3e-8). A wrong gradient, statistic
// or index moves a tensor by 1e-2 or more.
TEST_CASE("fp32 stacks: GPU vs CPU backend over 3 AdamW steps (weights, running statistics, forward_eval)") {
  Stream s(kGpu, "cnn-stack-test");
  for (const NamedStack& st : all_stacks()) {
    CAPTURE(st.name);
    model::TrainConfig cfg = step_config(st.m, 8);
    cfg.cuda_graph = true;
    const RunResult g = run(cfg, kGpu, 3, 7, s);
    const RunResult c = run(cfg, Device::cpu(), 3, 7, nullptr);
    CHECK(g.graph);
    CHECK(g.metrics.step == 3);
    CHECK(std::fabs(g.metrics.loss - c.metrics.loss) <= 1e-5 * std::fabs(c.metrics.loss));
    CHECK(std::fabs(g.metrics.grad_norm - c.metrics.grad_norm) <= 1e-4f * c.metrics.grad_norm);
    check_params(st.m, g.master, c.master, 1e-5, 1e-4, "stack " + st.name + " fp32 GPU vs CPU");
    // The weights moved (a run that does nothing would match too).
    const model::TrainStep init(cfg, Device::cpu());
    CHECK(testing::rel_l2(c.master, init.params().master().to_floats()) > 1e-3);
    const double dp = testing::rel_l2(g.probs, c.probs);
    MESSAGE("stack " << st.name << " forward_eval probabilities rel L2 " << dp);
    CHECK(dp <= 5e-5);
    if (st.m.leak_head) CHECK(testing::rel_l2(g.leak_prob, c.leak_prob) <= 5e-5);
    CHECK(all_finite(g.probs));
  }
}

// bf16 and fp16: activations rounded to 8 (bf16) or 11 (fp16) bits at every
// layer; parameter gradients, statistics and master weights f32. The master
// then differs from fp32 only through the 3 updates, so the bound is stated
// against how far fp32 moved the master from its initial value (M = rel L2 of
// fp32 after 3 steps vs init, 0.08..0.16 here): within 10% of M (bf16) and 5%
// of M (fp16) of fp32 (measured on the emulator: <= 4.2% and 2.1%), within 3%
// and 1% of M of the CPU backend in the same precision (measured <= 0.8% and
// 0.07%); the forward_eval probabilities within rel L2 3e-3 (bf16) and 1e-3
// (fp16) of both (measured <= 5.4e-4 and 1.1e-4). No fp16 step may be skipped
// by the loss scaler (it would leave fewer updates than fp32).
TEST_CASE("bf16 and fp16 stacks: 3 steps stay finite and near fp32, GPU near the CPU backend") {
  Stream s(kGpu, "cnn-stack-precision-test");
  for (const NamedStack& st : all_stacks()) {
    CAPTURE(st.name);
    model::TrainConfig cfg = step_config(st.m, 8);
    const RunResult ref = run(cfg, kGpu, 3, 7, s);
    const model::TrainStep init(cfg, Device::cpu());
    const double moved = testing::rel_l2(ref.master, init.params().master().to_floats());
    REQUIRE(moved > 1e-2);
    for (model::Precision p : {model::Precision::bf16, model::Precision::fp16}) {
      CAPTURE(model::precision_name(p));
      cfg.precision = p;
      const RunResult g = run(cfg, kGpu, 3, 7, s);
      const RunResult c = run(cfg, Device::cpu(), 3, 7, nullptr);
      CHECK(g.metrics.skipped_steps == 0);
      CHECK(all_finite(g.master));
      CHECK(all_finite(g.probs));
      const bool bf = p == model::Precision::bf16;
      const double dw = testing::rel_l2(g.master, ref.master) / moved;
      const double dc = testing::rel_l2(g.master, c.master) / moved;
      const double dp = testing::rel_l2(g.probs, ref.probs), dpc = testing::rel_l2(g.probs, c.probs);
      MESSAGE("stack " << st.name << " " << model::precision_name(p) << " (fp32 moved the master by " << moved
                       << "): master vs fp32 " << dw << " of that, vs CPU " << dc << "; probabilities vs fp32 " << dp
                       << ", vs CPU " << dpc);
      CHECK(dw <= (bf ? 0.10 : 0.05));
      CHECK(dc <= (bf ? 0.03 : 0.01));
      CHECK(dp <= (bf ? 3e-3 : 1e-3));
      CHECK(dpc <= (bf ? 3e-3 : 1e-3));
      CHECK(dw > 0);  // the precision took effect
    }
  }
}

// The captured step replays exactly what eager execution does (same kernels,
// same order, dropout masks drawn from the device-held iteration counter), and
// two runs give the same bits. Dropout in a spatial and a flat position,
// 2 accumulated micro-batches of 4. Against the CPU backend too: the dropout
// masks are the same hash on both, so fp32 stays within the bounds above.
TEST_CASE("CUDA graphs: replay is bit-identical to eager steps and to another run, with dropout and accumulation") {
  Stream s(kGpu, "cnn-stack-graph-test");
  for (const NamedStack& st : all_stacks()) {
    CAPTURE(st.name);
    model::TrainConfig cfg = step_config(with_dropout(st.m, 0.25f), 4);
    cfg.accum_steps = 2;
    cfg.optim.max_grad_norm = 1.f;
    cfg.seed = 5;
    const std::vector<model::Precision> precisions =
        st.name == "a" ? std::vector<model::Precision>{model::Precision::fp32, model::Precision::bf16}
                       : std::vector<model::Precision>{model::Precision::fp32};
    for (model::Precision p : precisions) {
      CAPTURE(model::precision_name(p));
      cfg.precision = p;
      cfg.cuda_graph = true;
      const RunResult a = run(cfg, kGpu, 4, 3, s);
      const RunResult b = run(cfg, kGpu, 4, 3, s);
      CHECK(a.graph);
      CHECK(same_bits(a.master, b.master));
      CHECK(same_bits(a.probs, b.probs));
      cfg.cuda_graph = false;
      const RunResult e = run(cfg, kGpu, 4, 3, s);
      CHECK_FALSE(e.graph);
      CHECK(same_bits(a.master, e.master));
      CHECK(same_bits(a.probs, e.probs));
      if (p == model::Precision::fp32) {
        const RunResult c = run(cfg, Device::cpu(), 4, 3, nullptr);
        check_params(cfg.model, a.master, c.master, 1e-5, 1e-4, "stack " + st.name + " with dropout, GPU vs CPU");
        // Dropout acted: without it the weights differ.
        model::TrainConfig off = cfg;
        off.model = with_dropout(st.m, 0.f);
        CHECK_FALSE(same_bits(run(off, kGpu, 4, 3, s).master, a.master));
      }
    }
  }
}

// An odd micro-batch (5: batch-norm statistics over 5*H*W rows, attentive
// pooling and the dense layers over 5 samples) trains like the CPU backend,
// and forward_eval of one sample matches the CPU backend and the same sample
// inside a larger batch (inference uses the running statistics: no sample
// sees another).
TEST_CASE("odd micro-batch 5 and a forward_eval batch of 1: GPU vs CPU backend") {
  Stream s(kGpu, "cnn-stack-odd-test");
  for (const NamedStack& st : all_stacks()) {
    CAPTURE(st.name);
    model::TrainConfig cfg = step_config(st.m, 5);
    const RunResult g = run(cfg, kGpu, 2, 1, s);
    const RunResult c = run(cfg, Device::cpu(), 2, 1, nullptr);
    check_params(st.m, g.master, c.master, 1e-5, 1e-4, "stack " + st.name + " micro-batch 5 GPU vs CPU");
    REQUIRE(g.probs.size() == std::size_t(st.m.classes));
    CHECK(testing::rel_l2(g.probs, c.probs) <= 5e-5);
    if (st.m.leak_head) CHECK(testing::rel_l2(g.leak_prob, c.leak_prob) <= 5e-5);
    // The same sample first in a batch of 6 (batch 999's first sample is the same draw).
    const RunResult g6 = run(cfg, kGpu, 2, 6, s);
    CHECK(same_bits(g6.master, g.master));
    const std::vector<float> first(g6.probs.begin(), g6.probs.begin() + st.m.classes);
    CHECK(testing::rel_l2(first, g.probs) <= 1e-6);
  }
}
