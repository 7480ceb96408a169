// Fuzz target: the run configuration as `melforge train --config FILE --set
// key=value ...` builds it (model::load_toml_string, apply_override for each
// --set, validate), then the property the run directory relies on: the
// resolved TOML written to RUN_DIR/config.toml (to_toml) loads back, validates
// and resolves to the same text (checkpoints store it and eval reloads it).
//
// Then the model the configuration describes (model.arch leakcnn, cnn with
// its [[model.layers]] tables, or a preset; loss.type, model.embedding,
// model.heads), as `melforge train` builds it for its data
// (train::model_config, which validates it) for a few small inputs (8 x 8,
// 40 x 13, 64 x 64 mels x frames); when it is valid and small (parameters,
// activations and multiply-adds capped to keep executions fast): its
// parameters (model::ParamBuffer on the CPU in f32, initialised, holding every
// cnn_param_specs entry) and, for a CNN stack, model::CnnStack's inference
// forward (forward_eval) of 1 and 2 zero segments and a training forward and
// backward of 2. An mf::Error from model_config is a fine answer; one from
// building or running a model that validated is a finding, and the features
// (and gradients) must have the shape trunk_features() says and be finite.
//
// Input: TOML text; the lines after a line that is exactly "--set" are --set
// assignments, one per line (fuzz/seeds/run_config/ has examples).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "engine/error.hpp"
#include "engine/parallel.hpp"
#include "engine/tensor.hpp"
#include "fuzz/fuzz_support.hpp"
#include "model/cnn_layers.hpp"
#include "model/cnn_params.hpp"
#include "model/cnn_stack.hpp"
#include "model/model_config.hpp"
#include "model/param_buffer.hpp"
#include "model/run_config.hpp"
#include "train/run_setup.hpp"

namespace {
constexpr const char* kTarget = "run_config";

void split(std::string_view in, std::string& toml, std::vector<std::string>& sets) {
  std::size_t pos = 0;
  bool in_sets = false;
  while (pos <= in.size()) {
    std::size_t nl = in.find('\n', pos);
    if (nl == std::string_view::npos) nl = in.size();
    const std::string_view line = in.substr(pos, nl - pos);
    if (!in_sets && line == "--set") {
      in_sets = true;
    } else if (in_sets) {
      if (!line.empty()) sets.emplace_back(line);
    } else {
      toml.append(line);
      toml.push_back('\n');
    }
    pos = nl + 1;
  }
}

// Caps on the models built (per segment): beyond them only validation runs.
constexpr std::int64_t kMaxParams = 2'000'000;
constexpr std::int64_t kMaxActivations = 1'000'000;
constexpr std::int64_t kMaxMacs = 20'000'000;

struct Cost {
  std::int64_t activations = 0, macs = 0;
};

// Activations and multiply-adds of one segment through the stack (upper bounds).
Cost stack_cost(const mf::model::ModelConfig& mc) {
  using mf::model::LayerType;
  const std::vector<mf::model::ActShape> shapes = mf::model::cnn_shapes(mc.layers, mc.in_mels, mc.in_frames);
  mf::model::ActShape in{true, mc.in_mels, mc.in_frames, 1};
  Cost c;
  for (std::size_t i = 0; i < mc.layers.size(); ++i) {
    const mf::model::CnnLayer& l = mc.layers[i];
    const std::int64_t full = std::int64_t((in.h - 1) / l.stride + 1) * ((in.w - 1) / l.stride + 1) * l.cout;
    switch (l.type) {
      case LayerType::conv:
        c.macs += full * in.c * l.k * l.k;
        c.activations += 3 * full;
        break;
      case LayerType::residual:
        c.macs += full * (10 * in.c + 9 * l.cout + 2 * mf::model::se_hidden(l.cout, l.se > 0 ? l.se : 1));
        c.activations += 8 * full;
        break;
      case LayerType::attentive_stats_pool:
        c.macs += in.features() * (l.attention > 0 ? l.attention : in.c) + in.features();
        c.activations += in.features();
        break;
      case LayerType::dense: c.macs += in.features() * l.units; break;
      case LayerType::global_avg_pool:
      case LayerType::dropout: c.macs += in.features(); break;
    }
    c.activations += shapes[i].features();
    in = shapes[i];
  }
  return c;
}

void check_features(const mf::Tensor& f, std::int64_t n, const mf::model::ModelConfig& mc) {
  FUZZ_CHECK(f.ndim() == 2 && f.size(0) == n && f.size(1) == mc.trunk_features(), kTarget);
  for (const float v : f.to_floats()) FUZZ_CHECK(std::isfinite(v), kTarget);
}

// The CNN stack's forwards (and a training step's backward) on zero segments.
void run_stack(const mf::model::ModelConfig& mc, mf::model::ParamBuffer& pb) {
  const mf::Device cpu = mf::Device::cpu();
  for (const std::int64_t n : {1, 2}) {
    mf::model::CnnStack stack(mc, n, mf::DType::f32, cpu);
    const mf::Tensor x = mf::Tensor::zeros({n, mc.in_mels, mc.in_frames, 1}, mf::DType::f32, cpu, mf::Layout::nhwc);
    check_features(stack.forward_eval(pb, x, nullptr), n, mc);
    if (n == 1) continue;
    static const std::int32_t counter = 1;
    mf::model::DropoutContext drop;
    drop.seed = 7;
    drop.counter = &counter;
    check_features(stack.forward(pb, x, drop, nullptr), n, mc);
    stack.dfeatures().fill(1.f);
    stack.backward(pb, x, pb.grad(), drop, nullptr);
    for (const float v : pb.grad().to_floats()) FUZZ_CHECK(std::isfinite(v), kTarget);
  }
}

// The model of the configuration for data of mels x frames and `classes`.
void check_model(const mf::model::RunConfig& cfg, int mels, int frames, int classes) {
  mf::model::ModelConfig mc;
  try {
    mc = mf::train::model_config(cfg, mels, frames, classes);  // validates
  } catch (const mf::Error&) {
    return;
  }
  std::int64_t params = 0;
  std::vector<mf::model::ParamInfo> specs;
  if (mc.arch == mf::model::Arch::cnn) {
    specs = mf::model::cnn_param_specs(mc);
    for (const mf::model::ParamInfo& p : specs) {
      FUZZ_CHECK(p.numel >= 1 && p.numel == mf::shape_numel(p.shape), kTarget);
      params += p.numel;
    }
    const Cost c = stack_cost(mc);
    if (params > kMaxParams || c.activations > kMaxActivations || c.macs > kMaxMacs) return;
  } else {
    params = mc.flat_features() * mc.dense;
    for (int b = 0; b < mc.blocks(); ++b)
      params += std::int64_t(mc.channels[std::size_t(b)]) * mc.in_channels(b) * mc.kernel * mc.kernel;
    if (params > kMaxParams || std::int64_t(mels) * frames * mc.channels.front() > kMaxActivations) return;
  }
  params += mc.features() * (mc.head_outputs() + mc.classes) + mc.trunk_features() * mc.embedding;
  if (params > 2 * kMaxParams) return;
  mf::model::ParamBuffer pb(mc, mf::DType::f32, mf::Device::cpu());
  pb.init(1);
  for (const mf::model::ParamInfo& p : specs) {
    const mf::model::ParamInfo& q = pb.info(p.name);  // throws when missing: a finding below
    FUZZ_CHECK(q.shape == p.shape && q.kind == p.kind, kTarget);
  }
  for (const float v : pb.master().to_floats()) FUZZ_CHECK(std::isfinite(v), kTarget);
  if (mc.arch == mf::model::Arch::cnn) run_stack(mc, pb);
}

// The configuration's model for a few input sizes; model.heads = auto resolved
// to class+leak with the softmax loss (data with leak targets) and to class
// with a metric loss (which refuses the leak head); 4 classes unless
// model.num_classes says (at most 300, past softmax's limit of 256).
void check_models(const mf::model::RunConfig& validated) {
  mf::model::RunConfig cfg = validated;
  if (cfg.heads == mf::model::Heads::automatic)
    cfg.heads = cfg.loss_type == mf::model::LossType::softmax ? mf::model::Heads::class_and_leak : mf::model::Heads::class_only;
  const int classes = cfg.num_classes > 0 ? int(std::min<std::int64_t>(cfg.num_classes, 300)) : 4;
  const int sizes[][2] = {{8, 8}, {40, 13}, {64, 64}};
  for (const auto& s : sizes) {
    try {
      check_model(cfg, s[0], s[1], classes);
    } catch (const mf::Error& e) {
      std::fprintf(stderr, "fuzz run_config: the %d x %d model validated but building or running it threw: %s\n",
                   s[0], s[1], e.what());
      std::abort();
    }
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mf::fuzz::quiet();
  static const bool one_thread = (mf::set_cpu_threads(1), true);  // executions comparable, no thread pool churn
  (void)one_thread;
  std::string toml;
  std::vector<std::string> sets;
  split(std::string_view(reinterpret_cast<const char*>(data), size), toml, sets);
  std::string resolved;
  try {
    mf::model::RunConfig cfg;
    mf::model::load_toml_string(cfg, toml, "fuzz.toml");
    for (const std::string& s : sets) mf::model::apply_override(cfg, s);
    mf::model::validate(cfg);
    resolved = mf::model::to_toml(cfg);
  } catch (const mf::Error&) {
    return 0;
  } catch (...) {
    mf::fuzz::fail_uncaught(kTarget);
  }
  // A configuration that validated must round-trip through config.toml.
  try {
    mf::model::RunConfig again;
    mf::model::load_toml_string(again, resolved, "resolved config.toml");
    mf::model::validate(again);
    FUZZ_CHECK(mf::model::to_toml(again) == resolved, kTarget);
    check_models(again);
  } catch (const mf::Error& e) {
    std::fprintf(stderr, "fuzz run_config: the resolved configuration does not load back: %s\n--- resolved:\n%s\n",
                 e.what(), resolved.c_str());
    std::abort();
  } catch (...) {
    mf::fuzz::fail_uncaught(kTarget);
  }
  return 0;
}
