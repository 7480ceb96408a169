// The fused AdamW step (kernels/adamw.hpp), CPU twin: one step against a
// float64 evaluation of torch.optim.AdamW with gradient clipping and a loss
// scale; weight decay only on [0, decay_end); a non-finite gradient skips the
// step and backs the FP16 loss scale off; the scale's growth and floor; the
// learning-rate schedules and the LR the state holds; the AVX-512 loops give
// the twin's bits. The CUDA kernel against this twin: test_adamw_gpu.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/adamw.hpp"
#include "kernels/adamw_lab.hpp"
#include "kernels/ops.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {
struct Opt {
  std::int64_t n, decay_end;
  Tensor master, grad, m, v, state, scratch;
  Opt(std::int64_t n_, std::int64_t de, std::uint64_t seed) : n(n_), decay_end(de) {
    master = Tensor::from_floats(testing::random_floats(std::size_t(n), seed), {n});
    grad = Tensor::from_floats(testing::random_floats(std::size_t(n), seed + 1), {n});
    m = Tensor::zeros({n}, DType::f32);
    v = Tensor::zeros({n}, DType::f32);
    state = Tensor::zeros({std::int64_t(sizeof(kernels::AdamWState))}, DType::u8);
    *static_cast<kernels::AdamWState*>(state.raw()) = kernels::AdamWState{};
    scratch = Tensor::zeros({std::int64_t(kernels::adamw_scratch_bytes())}, DType::u8);
  }
  kernels::AdamWState& st() { return *static_cast<kernels::AdamWState*>(state.raw()); }
  void step(const kernels::AdamWConfig& c, Tensor* work = nullptr) {
    ops::adamw_step(master, grad, m, v, state, c, decay_end, work, scratch);
  }
};
}  // namespace

TEST_CASE("AdamW: one step against a float64 evaluation of torch.optim.AdamW with clipping") {
  Opt o(1000, 600, 30);
  kernels::AdamWConfig c;
  c.lr = 0.01f;
  c.weight_decay = 0.1f;
  c.max_grad_norm = 2.f;
  o.st().loss_scale = 8.f;  // gradients carry a scale of 8
  const auto p0 = o.master.to_floats(), g = o.grad.to_floats();
  double norm = 0;
  for (float x : g) norm += double(x / 8.f) * (x / 8.f);
  norm = std::sqrt(norm);
  const double clip = std::min(1.0, 2.0 / (norm + 1e-6));
  REQUIRE(clip < 1.0);
  o.step(c);
  std::vector<double> ref;
  for (std::size_t i = 0; i < p0.size(); ++i) {
    const double gi = g[i] / 8.0 * clip;
    double p = p0[i];
    if (std::int64_t(i) < 600) p *= 1 - 0.01 * 0.1;
    const double m = 0.1 * gi, v = 0.001 * gi * gi;
    p -= 0.01 / 0.1 * m / (std::sqrt(v) / std::sqrt(0.001) + 1e-8);
    ref.push_back(p);
  }
  CHECK(testing::rel_l2(o.master.to_floats(), ref) < 1e-6);
  CHECK(std::fabs(o.st().grad_norm - norm) < 1e-5 * norm);
  CHECK(o.st().step == 1);
  CHECK(o.st().iteration == 1);
}

TEST_CASE("AdamW: weight decay only on [0, decay_end): biases keep their value under a zero gradient") {
  Opt o(64, 40, 31);
  o.grad.fill(0.f);
  kernels::AdamWConfig c;
  c.lr = 0.1f;
  c.weight_decay = 0.5f;
  const auto p0 = o.master.to_floats();
  o.step(c);
  const auto p1 = o.master.to_floats();
  for (std::size_t i = 0; i < 64; ++i) {
    if (i < 40) CHECK(p1[i] == doctest::Approx(p0[i] * (1 - 0.05f)).epsilon(1e-6));
    else CHECK(p1[i] == p0[i]);
  }
}

TEST_CASE("AdamW: a non-finite gradient skips the step, counts it and backs the FP16 scale off") {
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    Opt o(5000, 5000, 32);
    o.grad.data<float>()[4321] = bad;
    kernels::AdamWConfig c;
    c.dynamic_loss_scale = true;
    c.min_scale = 1.f;
    o.st().loss_scale = 65536.f;
    const auto p0 = o.master.to_floats();
    Tensor work = Tensor::zeros({5000}, DType::f16);
    o.step(c, &work);
    CHECK(o.master.to_floats() == p0);
    CHECK(o.m.to_floats() == std::vector<float>(5000, 0.f));
    CHECK(o.st().found_inf == 1);
    CHECK(o.st().skipped_steps == 1);
    CHECK(o.st().step == 0);
    CHECK(o.st().iteration == 1);
    CHECK(o.st().loss_scale == 32768.f);
    // A finite step afterwards applies and writes the working copy.
    o.grad.data<float>()[4321] = 0.f;
    o.step(c, &work);
    CHECK(o.st().step == 1);
    CHECK(o.st().found_inf == 0);
    const auto m = o.master.to_floats(), w = work.to_floats();
    for (std::size_t i = 0; i < m.size(); ++i) REQUIRE(w[i] == float(f16(m[i])));
  }
}

TEST_CASE("AdamW: dynamic loss scale grows after N clean steps, floors on overflow") {
  Opt o(100, 100, 33);
  kernels::AdamWConfig c;
  c.dynamic_loss_scale = true;
  c.growth_interval = 3;
  c.min_scale = 0.25f;
  o.st().loss_scale = 1.f;
  for (int i = 0; i < 3; ++i) o.step(c);
  CHECK(o.st().loss_scale == 2.f);
  CHECK(o.st().clean_steps == 0);
  o.grad.data<float>()[0] = std::numeric_limits<float>::infinity();
  for (int i = 0; i < 5; ++i) o.step(c);
  CHECK(o.st().loss_scale == 0.25f);
  CHECK(o.st().skipped_steps == 5);
  CHECK(o.st().step == 3);
}

TEST_CASE("AdamW: LR schedule values (warmup, cosine, linear, constant) and the device-held LR") {
  kernels::AdamWConfig c;
  c.lr = 1.f;
  c.min_lr = 0.1f;
  c.warmup_steps = 4;
  c.total_steps = 14;
  c.schedule = kernels::LrSchedule::cosine;
  CHECK(kernels::lr_at(c, 0) == doctest::Approx(0.25));
  CHECK(kernels::lr_at(c, 3) == doctest::Approx(1.0));
  CHECK(kernels::lr_at(c, 4) == doctest::Approx(1.0));
  CHECK(kernels::lr_at(c, 9) == doctest::Approx(0.1 + 0.9 * 0.5));
  CHECK(kernels::lr_at(c, 14) == doctest::Approx(0.1));
  CHECK(kernels::lr_at(c, 100) == doctest::Approx(0.1));
  c.schedule = kernels::LrSchedule::linear;
  CHECK(kernels::lr_at(c, 9) == doctest::Approx(0.55));
  c.schedule = kernels::LrSchedule::constant;
  CHECK(kernels::lr_at(c, 9) == doctest::Approx(1.0));
  c.schedule = kernels::LrSchedule::cosine;
  Opt o(10, 10, 34);
  for (int i = 0; i < 6; ++i) {
    o.step(c);
    CHECK(o.st().lr == doctest::Approx(kernels::lr_at(c, i)));
  }
}

TEST_CASE("AdamW: every CPU kernel variant gives the twin's bits (norm, state, master, working copy)") {
  const auto variants = testing::cpu_kernel_variants();
  if (variants.size() < 2) {
    MESSAGE("this CPU has no AVX2 with FMA: only the twin runs here");
    return;
  }
  // Sizes: below one vector, vector tails, several norm chunks (16384) with a tail;
  // decay_end inside a vector.
  for (const std::int64_t n : {std::int64_t(7), std::int64_t(1000), std::int64_t(40000)})
    for (const DType wt : {DType::f32, DType::bf16, DType::f16}) {
      CAPTURE(n);
      INFO("work ", dtype_name(wt));
      std::vector<std::vector<std::uint8_t>> runs;
      for (const CpuKernels variant : variants) {
        const testing::CpuKernelsScope scope(variant);
        Opt o(n, n * 3 / 5 + 1, 70);
        Tensor work = Tensor::zeros({n}, wt);
        kernels::AdamWConfig c;
        c.lr = 0.01f;
        c.weight_decay = 0.1f;
        c.max_grad_norm = 0.5f;
        for (int step = 0; step < 3; ++step) {
          o.grad = Tensor::from_floats(testing::random_floats(std::size_t(n), 80 + std::uint64_t(step), -3, 3), {n});
          o.step(c, wt == DType::f32 ? nullptr : &work);
        }
        std::vector<std::uint8_t> all;
        for (const Tensor* t : {&o.master, &o.m, &o.v, &o.state, &work}) {
          const auto* b = static_cast<const std::uint8_t*>(t->raw());
          all.insert(all.end(), b, b + t->nbytes());
        }
        runs.push_back(std::move(all));
      }
      for (std::size_t v = 1; v < runs.size(); ++v) {
        std::size_t first = 0;
        while (first < runs[0].size() && runs[0][first] == runs[v][first]) ++first;
        INFO("variant ", cpu_kernels_name(variants[v]), ": first differing byte ", first, " of ", runs[0].size());
        CHECK(runs[v] == runs[0]);
      }
    }
}
