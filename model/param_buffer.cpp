#include "model/param_buffer.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "engine/counter_rng.hpp"
#include "engine/error.hpp"
#include "kernels/ops.hpp"
#include "model/cnn_params.hpp"
#include "model/torch_layout.hpp"

namespace mf::model {

namespace {
std::int64_t pad8(std::int64_t x) { return (x + 7) / 8 * 8; }
}  // namespace

bool param_decays(ParamKind k) {
  return k == ParamKind::conv_weight || k == ParamKind::fc_weight || k == ParamKind::linear_weight;
}

bool param_trainable(ParamKind k) { return k != ParamKind::running_mean && k != ParamKind::running_var; }

bool name_matches(std::string_view name, std::string_view entry) {
  if (entry.empty() || name.substr(0, entry.size()) != entry) return false;
  return name.size() == entry.size() || entry.back() == '.' || name[entry.size()] == '.';
}

namespace {
// LeakCNN's parameters in its module's order (bench/leakcnn_torch.py).
std::vector<ParamInfo> leakcnn_param_specs(const ModelConfig& cfg) {
  std::vector<ParamInfo> v;
  auto add = [&](std::string name, ParamKind kind, Shape shape, Shape tshape, std::int64_t fan_in) {
    ParamInfo p{std::move(name), kind, shape, std::move(tshape), 0, shape_numel(shape), fan_in, false};
    v.push_back(std::move(p));
  };
  const int k = cfg.kernel, D = cfg.dense;
  const std::int64_t F = cfg.flat_features();
  for (int i = 0; i < cfg.blocks(); ++i) {
    const int ci = cfg.in_channels(i), co = cfg.channels[std::size_t(i)];
    add(fmt::format("blocks.{}.conv.weight", i), ParamKind::conv_weight, {co, k, k, ci}, {co, ci, k, k},
        std::int64_t(ci) * k * k);
    add(fmt::format("blocks.{}.conv.bias", i), ParamKind::bias, {co}, {co}, std::int64_t(ci) * k * k);
  }
  add("fc.weight", ParamKind::fc_weight, {D, F}, {D, F}, F);
  add("fc.bias", ParamKind::bias, {D}, {D}, F);
  return v;
}

// What follows the trunk (D features): the embedding layer, then the class
// head (+ leak head) and the metric loss's parameters (model/model_config.hpp).
void add_head_specs(const ModelConfig& cfg, std::vector<ParamInfo>& v) {
  auto add = [&](std::string name, ParamKind kind, Shape shape, Shape tshape, std::int64_t fan_in,
                 float init = 0.f) {
    ParamInfo p{std::move(name), kind, shape, std::move(tshape), 0, shape_numel(shape), fan_in, false, init};
    p.head = p.name.rfind("embedding.", 0) != 0;
    v.push_back(std::move(p));
  };
  const std::int64_t T = cfg.trunk_features(), E = cfg.features(), C = cfg.classes;
  if (cfg.embedding > 0) {
    add("embedding.weight", ParamKind::linear_weight, {E, T}, {E, T}, T);
    add("embedding.bias", ParamKind::bias, {E}, {E}, T);
  }
  if (cfg.class_head()) {
    add("class_head.weight", ParamKind::linear_weight, {C, E}, {C, E}, E);
    if (cfg.leak_head) add("leak_head.weight", ParamKind::linear_weight, {1, E}, {1, E}, E);
    add("class_head.bias", ParamKind::bias, {C}, {C}, E);
    if (cfg.leak_head) add("leak_head.bias", ParamKind::bias, {1}, {1}, E);
  }
  if (cfg.loss == LossType::am_softmax || cfg.loss == LossType::aam_softmax)
    add("loss.weight", ParamKind::linear_weight, {C, E}, {C, E}, E);
  if (loss_is_prototypical(cfg.loss)) {  // voxceleb_trainer's angleproto init: w = 10, b = -5
    add("loss.w", ParamKind::constant, {1}, {1}, 1, 10.f);
    add("loss.b", ParamKind::constant, {1}, {1}, 1, -5.f);
  }
}
}  // namespace

ParamLayout param_layout(const ModelConfig& cfg) {
  cfg.validate();
  std::vector<ParamInfo> specs = cfg.arch == Arch::cnn ? cnn_param_specs(cfg) : leakcnn_param_specs(cfg);
  add_head_specs(cfg, specs);
  // Three groups, each in the module's order: decayed weights, the other
  // trainable parameters, then the running statistics. Each offset is padded
  // to 8 elements except the leak head's, which directly follows the class
  // head's so that the two heads are one dense layer, and loss.b, which
  // follows loss.w (the angular prototypical loss reads them as one [2]).
  ParamLayout layout;
  std::int64_t off = 0;
  for (int group = 0; group < 3; ++group) {
    for (ParamInfo p : specs) {
      const int g = param_decays(p.kind) ? 0 : param_trainable(p.kind) ? 1 : 2;
      if (g != group) continue;
      if (p.name.rfind("leak_head.", 0) != 0 && p.name != "loss.b") off = pad8(off);
      p.offset = off;
      p.decay = param_decays(p.kind);
      off += p.numel;
      layout.params.push_back(std::move(p));
    }
    if (group == 0) layout.decay_end = off;
  }
  layout.size = pad8(off);
  // Master, gradient and two moments take 16 bytes a parameter: beyond the
  // bound, a setting (or a damaged checkpoint) asks for gigabytes, not a model.
  MF_CHECK(layout.size <= kMaxParameters,
           "model: {} parameters, expected at most {} (2^28): check model.channels, model.dense, model.layers, "
           "model.embedding and the input size ({} x {})", layout.size, kMaxParameters, cfg.in_mels, cfg.in_frames);
  return layout;
}

ParamBuffer::ParamBuffer(const ModelConfig& cfg, DType work_dtype, Device device, cudaStream_t stream)
    : cfg_(cfg), work_dtype_(work_dtype), device_(device) {
  MF_CHECK(dtype_is_float(work_dtype), "ParamBuffer: working dtype must be f32, bf16 or f16, found {}",
           dtype_name(work_dtype));
  ParamLayout layout = param_layout(cfg_);
  params_ = std::move(layout.params);
  size_ = layout.size;
  decay_end_ = layout.decay_end;
  master_ = Tensor::zeros({size_}, DType::f32, device, Layout::plain, stream);
  grad_ = Tensor::zeros({size_}, DType::f32, device, Layout::plain, stream);
  m_ = Tensor::zeros({size_}, DType::f32, device, Layout::plain, stream);
  v_ = Tensor::zeros({size_}, DType::f32, device, Layout::plain, stream);
  work_ = work_dtype == DType::f32 ? master_ : Tensor::zeros({size_}, work_dtype, device, Layout::plain, stream);
}

const ParamInfo& ParamBuffer::info(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return p;
  MF_THROW("ParamBuffer: no parameter named '{}'", name);
}

std::vector<const ParamInfo*> ParamBuffer::matching(const std::vector<std::string>& entries,
                                                    std::string_view key) const {
  std::vector<const ParamInfo*> out;
  for (const ParamInfo& p : params_)
    for (const std::string& e : entries)
      if (name_matches(p.name, e)) {
        out.push_back(&p);
        break;
      }
  for (const std::string& e : entries) {
    const bool any = std::any_of(params_.begin(), params_.end(), [&](const ParamInfo& p) {
      return name_matches(p.name, e);
    });
    if (any) continue;
    std::vector<std::string> modules;
    for (const ParamInfo& p : params_) {
      const std::string m = p.name.substr(0, p.name.rfind('.'));
      if (std::find(modules.begin(), modules.end(), m) == modules.end()) modules.push_back(m);
    }
    MF_THROW("{}: '{}' names no parameter of the model; its modules: {} (an entry is a parameter's name or a "
             "prefix of names ending at a dot)", key, e, fmt::join(modules, ", "));
  }
  return out;
}

std::int64_t ParamBuffer::count() const {
  std::int64_t n = 0;
  for (const auto& p : params_) n += p.numel;
  return n;
}

Tensor ParamBuffer::view(const Tensor& flat, const std::string& name) const {
  MF_CHECK(flat.ndim() == 1 && flat.size(0) == size_, "ParamBuffer::view: {} is not a flat buffer of {} elements",
           flat.str(), size_);
  const ParamInfo& p = info(name);
  return flat.slice(p.offset, p.offset + p.numel).reshape(p.shape);
}

Tensor ParamBuffer::head_weight(const Tensor& flat) const {
  const ParamInfo& p = info("class_head.weight");
  const int H = cfg_.head_outputs();
  const std::int64_t D = cfg_.features();
  return flat.slice(p.offset, p.offset + H * D).reshape({H, D});
}

Tensor ParamBuffer::head_bias(const Tensor& flat) const {
  const ParamInfo& p = info("class_head.bias");
  return flat.slice(p.offset, p.offset + cfg_.head_outputs());
}

void ParamBuffer::init(std::uint64_t seed, cudaStream_t stream) {
  std::vector<float> host(std::size_t(size_), 0.f);
  for (std::size_t pi = 0; pi < params_.size(); ++pi) {
    const ParamInfo& p = params_[pi];
    if (p.kind == ParamKind::norm_weight || p.kind == ParamKind::running_var) {
      std::fill_n(host.begin() + p.offset, p.numel, 1.f);
      continue;
    }
    if (p.kind == ParamKind::norm_bias || p.kind == ParamKind::running_mean) continue;  // zeros
    if (p.kind == ParamKind::constant) {
      std::fill_n(host.begin() + p.offset, p.numel, p.init_value);
      continue;
    }
    const double bound = 1.0 / std::sqrt(double(p.fan_in));
    std::vector<float> torch_order(std::size_t(p.numel));
    const std::uint64_t base = splitmix64_hash(seed ^ splitmix64_hash(0x5eed0000ull + pi));
    for (std::int64_t i = 0; i < p.numel; ++i) {
      const double u = unit_double(splitmix64_hash(base + std::uint64_t(i)));
      torch_order[std::size_t(i)] = float(-bound + 2.0 * bound * u);
    }
    const std::vector<float> ours = from_torch_layout(cfg_, p, torch_order);
    std::copy(ours.begin(), ours.end(), host.begin() + p.offset);
  }
  Tensor h = Tensor::from_floats(host, {size_});
  master_.copy_from(h, stream);
  grad_.fill_bytes(0, stream);
  m_.fill_bytes(0, stream);
  v_.fill_bytes(0, stream);
  refresh_work(stream);
  if (device_.is_cuda()) MF_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void ParamBuffer::refresh_work(cudaStream_t stream) {
  if (work_dtype_ != DType::f32) ops::cast(master_, work_, stream);
}

}  // namespace mf::model
