// The fused AdamW step (kernels/adamw.hpp), CPU twin: one step against a
// float64 evaluation of torch.optim.AdamW with gradient clipping and a loss
// scale; weight decay only on [0, decay_end); a non-finite gradient skips the
// step and backs the FP16 loss scale off; the scale's growth and floor; the
// learning-rate schedules and the LR the state holds; the AVX-512 loops give
// the twin's bits; frozen elements (train.freeze) keep their bits and stay
// out of the norm. The CUDA kernel against this twin: test_adamw_gpu.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/parallel.hpp"
#include "kernels/adamw.hpp"
#include "kernels/adamw_lab.hpp"
#include "kernels/ops.hpp"
#include "tests/support/testing.hpp"

using namespace mf;

namespace {
struct Opt {
  std::int64_t n, decay_end;
  Tensor master, grad, m, v, state, scratch;
  const Tensor* frozen = nullptr;  // u8 [n] mask, or none
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
    ops::adamw_step(master, grad, m, v, state, c, decay_end, work, frozen, scratch);
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

TEST_CASE("AdamW: frozen elements keep their bits and stay out of the norm, the clip and the non-finite check") {
  // Frozen: [100, 300) (decayed weights) and [700, 800) (biases), one holding
  // a huge gradient and one an Inf. The others must get exactly the bits of a
  // run without the mask whose frozen gradients are zero (PyTorch's
  // clip_grad_norm_ over the parameters that require a gradient).
  const std::int64_t n = 1000, de = 600;
  Tensor frozen = Tensor::zeros({n}, DType::u8);
  auto* fz = static_cast<std::uint8_t*>(frozen.raw());
  for (std::int64_t i = 0; i < n; ++i) fz[i] = (i >= 100 && i < 300) || (i >= 700 && i < 800);
  for (const DType wt : {DType::f32, DType::bf16}) {
    INFO("work ", dtype_name(wt));
    Opt a(n, de, 90), b(n, de, 90);
    a.frozen = &frozen;
    for (std::int64_t i = 0; i < n; ++i)
      if (fz[i]) b.grad.data<float>()[i] = 0.f;
    a.grad.data<float>()[150] = 1e30f;
    a.grad.data<float>()[750] = std::numeric_limits<float>::infinity();
    Tensor wa = Tensor::zeros({n}, wt), wb = Tensor::zeros({n}, wt);
    wa.fill_bytes(0x5a);
    const std::vector<std::uint8_t> work0(static_cast<const std::uint8_t*>(wa.raw()),
                                          static_cast<const std::uint8_t*>(wa.raw()) + wa.nbytes());
    kernels::AdamWConfig c;
    c.lr = 0.01f;
    c.weight_decay = 0.1f;
    c.max_grad_norm = 1.f;
    const auto p0 = a.master.to_floats();
    for (int step = 0; step < 3; ++step) {
      a.step(c, wt == DType::f32 ? nullptr : &wa);
      b.step(c, wt == DType::f32 ? nullptr : &wb);
    }
    CHECK(a.st().step == 3);  // the Inf is frozen: no step was skipped
    CHECK(a.st().skipped_steps == 0);
    CHECK(a.st().grad_norm == b.st().grad_norm);
    CHECK(a.st().grad_norm < 1e3f);  // the huge frozen gradient is not in the norm
    const auto pa = a.master.to_floats(), pb = b.master.to_floats(), ma = a.m.to_floats(), va = a.v.to_floats();
    const auto mb = b.m.to_floats(), vb = b.v.to_floats();
    const auto* wab = static_cast<const std::uint8_t*>(wa.raw());
    const auto* wbb = static_cast<const std::uint8_t*>(wb.raw());
    const std::size_t es = dtype_size(wt);
    int frozen_diff = 0, free_diff = 0, free_moved = 0;
    for (std::size_t i = 0; i < std::size_t(n); ++i) {
      if (fz[i]) {
        frozen_diff += std::memcmp(&pa[i], &p0[i], 4) != 0 || ma[i] != 0.f || va[i] != 0.f;
        if (wt != DType::f32) frozen_diff += std::memcmp(wab + i * es, work0.data() + i * es, es) != 0;
      } else {
        free_diff += std::memcmp(&pa[i], &pb[i], 4) != 0 || std::memcmp(&ma[i], &mb[i], 4) != 0 ||
                     std::memcmp(&va[i], &vb[i], 4) != 0;
        if (wt != DType::f32) free_diff += std::memcmp(wab + i * es, wbb + i * es, es) != 0;
        free_moved += pa[i] != p0[i];
      }
    }
    CHECK(frozen_diff == 0);
    CHECK(free_diff == 0);
    CHECK(free_moved == n - 300);
  }
}

TEST_CASE("AdamW: a frozen mask gives the same bits for any thread count") {
  const std::int64_t n = 70000;
  Tensor frozen = Tensor::zeros({n}, DType::u8);
  auto* fz = static_cast<std::uint8_t*>(frozen.raw());
  for (std::int64_t i = 0; i < n; ++i) fz[i] = (i / 777) % 3 == 1;
  std::vector<std::vector<float>> runs;
  for (const int threads : {1, 2, 3}) {
    set_cpu_threads(threads);
    Opt o(n, n / 2, 95);
    o.frozen = &frozen;
    kernels::AdamWConfig c;
    c.max_grad_norm = 0.5f;
    for (int step = 0; step < 2; ++step) o.step(c);
    runs.push_back(o.master.to_floats());
    runs.back().push_back(o.st().grad_norm);
  }
  set_cpu_threads(0);
  CHECK(runs[1] == runs[0]);
  CHECK(runs[2] == runs[0]);
}
