#include "model/cnn_params.hpp"

#include <fmt/format.h>

namespace mf::model {

namespace {

struct SpecList {
  std::vector<ParamInfo> v;

  void add(std::string name, ParamKind kind, Shape shape, Shape torch_shape, std::int64_t fan_in) {
    ParamInfo p;
    p.name = std::move(name);
    p.kind = kind;
    p.numel = shape_numel(shape);
    p.shape = std::move(shape);
    p.torch_shape = std::move(torch_shape);
    p.fan_in = fan_in;
    v.push_back(std::move(p));
  }
  void conv(const std::string& pre, int cin, int cout, int k, bool bias) {
    const std::int64_t fan = std::int64_t(cin) * k * k;
    add(pre + ".weight", ParamKind::conv_weight, {cout, k, k, cin}, {cout, cin, k, k}, fan);
    if (bias) add(pre + ".bias", ParamKind::bias, {cout}, {cout}, fan);
  }
  void batch_norm(const std::string& pre, int c) {
    add(pre + ".weight", ParamKind::norm_weight, {c}, {c}, 1);
    add(pre + ".bias", ParamKind::norm_bias, {c}, {c}, 1);
    add(pre + ".running_mean", ParamKind::running_mean, {c}, {c}, 1);
    add(pre + ".running_var", ParamKind::running_var, {c}, {c}, 1);
  }
  void linear(const std::string& pre, std::int64_t in, std::int64_t out) {
    add(pre + ".weight", ParamKind::linear_weight, {out, in}, {out, in}, in);
    add(pre + ".bias", ParamKind::bias, {out}, {out}, in);
  }
};

}  // namespace

std::vector<ParamInfo> cnn_param_specs(const ModelConfig& cfg) {
  const std::vector<ActShape> shapes = cnn_shapes(cfg.layers, cfg.in_mels, cfg.in_frames);
  SpecList s;
  ActShape in{true, cfg.in_mels, cfg.in_frames, 1};
  for (std::size_t i = 0; i < cfg.layers.size(); ++i) {
    const CnnLayer& l = cfg.layers[i];
    const std::string pre = fmt::format("layers.{}", i);
    switch (l.type) {
      case LayerType::conv:
        s.conv(pre + ".conv", in.c, l.cout, l.k, l.bias);
        if (l.batch_norm) s.batch_norm(pre + ".bn", l.cout);
        break;
      case LayerType::residual:
        s.conv(pre + ".conv1", in.c, l.cout, 3, false);
        s.batch_norm(pre + ".bn1", l.cout);
        s.conv(pre + ".conv2", l.cout, l.cout, 3, false);
        s.batch_norm(pre + ".bn2", l.cout);
        if (l.se > 0) {
          s.linear(pre + ".se.fc1", l.cout, se_hidden(l.cout, l.se));
          s.linear(pre + ".se.fc2", se_hidden(l.cout, l.se), l.cout);
        }
        if (residual_projects(l, in.c)) {
          s.conv(pre + ".downsample.0", in.c, l.cout, 1, false);
          s.batch_norm(pre + ".downsample.1", l.cout);
        }
        break;
      case LayerType::attentive_stats_pool: {
        const int a = l.attention > 0 ? l.attention : in.c;
        s.linear(pre + ".linear", in.c, a);
        s.add(pre + ".attention", ParamKind::linear_weight, {a}, {a, 1}, a);
        break;
      }
      case LayerType::dense: s.linear(pre + ".fc", in.features(), l.units); break;
      case LayerType::global_avg_pool:
      case LayerType::dropout: break;
    }
    in = shapes[i];
  }
  return s.v;
}

}  // namespace mf::model
