// The log-mel model's layers as ONNX nodes (onnx/export_parts.hpp), one
// function per layer type, each the op sequence of its PyTorch module.
#include <cmath>

#include <fmt/format.h>

#include "engine/error.hpp"
#include "kernels/attentive_pool.hpp"
#include "kernels/instance_norm.hpp"
#include "model/cnn_stack.hpp"
#include "onnx/export_parts.hpp"

namespace mf::onnx_export {

namespace {

using I64s = std::vector<std::int64_t>;

std::int64_t conv_out(std::int64_t n, int k, int stride) {
  return n < 0 ? -1 : (n + 2 * (k / 2) - k) / stride + 1;
}

// A conv's weights with the batch norm after it folded in, in float64 then
// rounded once: s = gamma / sqrt(var + eps), W' = W s, b' = beta + (b - mean) s.
struct ConvWeights {
  std::vector<float> w, b;
  int cout = 0, cin = 0, k = 0;
};

ConvWeights conv_weights(const TorchWeights& tw, const std::string& conv, const std::string& bn, int cin, int cout,
                         int k, bool bias) {
  ConvWeights r;
  r.cout = cout, r.cin = cin, r.k = k;
  r.w = tw.get(conv + ".weight", {cout, cin, k, k}).values;
  r.b = bias ? tw.get(conv + ".bias", {cout}).values : std::vector<float>(std::size_t(cout), 0.f);
  if (bn.empty()) return r;
  const auto& gamma = tw.get(bn + ".weight", {cout}).values;
  const auto& beta = tw.get(bn + ".bias", {cout}).values;
  const auto& mean = tw.get(bn + ".running_mean", {cout}).values;
  const auto& var = tw.get(bn + ".running_var", {cout}).values;
  const std::size_t per = std::size_t(cin) * std::size_t(k) * std::size_t(k);
  for (std::size_t o = 0; o < std::size_t(cout); ++o) {
    const double s = double(gamma[o]) / std::sqrt(double(var[o]) + double(model::kBatchNormEps));
    for (std::size_t j = 0; j < per; ++j) r.w[o * per + j] = float(double(r.w[o * per + j]) * s);
    r.b[o] = float(double(beta[o]) + (double(r.b[o]) - double(mean[o])) * s);
  }
  return r;
}

Activation emit_conv(GraphBuilder& g, const std::string& name, const ConvWeights& cw, int stride, const Activation& x) {
  MF_CHECK(x.spatial && x.c == cw.cin, "ONNX export: {}: expects {} input channels, the input has {}", name, cw.cin,
           x.c);
  const std::int64_t p = cw.k / 2;
  const std::string w = g.floats(name + ".weight", {cw.cout, cw.cin, cw.k, cw.k}, cw.w);
  const std::string b = g.floats(name + ".bias", {cw.cout}, cw.b);
  const std::vector<Attr> attrs = {
      {"kernel_shape", I64s{cw.k, cw.k}}, {"pads", I64s{p, p, p, p}}, {"strides", I64s{stride, stride}}};
  return {g.node("Conv", {x.name, w, b}, name, attrs), true, cw.cout, conv_out(x.h, cw.k, stride),
          conv_out(x.w, cw.k, stride)};
}

Activation relu(GraphBuilder& g, Activation x, const std::string& name) {
  x.name = g.node("Relu", {x.name}, name);
  return x;
}

Activation max_pool(GraphBuilder& g, Activation x, int pool, const std::string& name) {
  if (pool <= 1) return x;
  x.name = g.node("MaxPool", {x.name}, name, {{"kernel_shape", I64s{pool, pool}}, {"strides", I64s{pool, pool}}});
  x.h /= pool;
  x.w = x.w < 0 ? -1 : x.w / pool;
  return x;
}

Activation emit_conv_layer(GraphBuilder& g, const model::CnnLayer& l, const std::string& pre, const TorchWeights& w,
                           Activation x) {
  const ConvWeights cw = conv_weights(w, pre + ".conv", l.batch_norm ? pre + ".bn" : "", int(x.c), l.cout, l.k, l.bias);
  Activation y = emit_conv(g, pre + ".conv", cw, l.stride, x);
  if (l.relu) y = relu(g, y, pre + ".relu");
  return max_pool(g, y, l.pool, pre + ".pool");
}

// Squeeze-excitation: x * sigmoid(fc2(relu(fc1(mean over H, W)))) per channel.
Activation emit_se(GraphBuilder& g, const model::CnnLayer& l, const std::string& pre, const TorchWeights& w,
                   const Activation& x) {
  Activation m{g.node("ReduceMean", {x.name}, pre + ".se.mean", {{"axes", I64s{2, 3}}, {"keepdims", std::int64_t(0)}}),
               false, x.c, 1, 1};
  Activation h = emit_linear(g, pre + ".se.fc1", w, m, model::se_hidden(l.cout, l.se), true);
  Activation s = emit_linear(g, pre + ".se.fc2", w, h, l.cout, false);
  const std::string gate = g.node("Sigmoid", {s.name}, pre + ".se.gate");
  const std::string gate4 = g.node("Unsqueeze", {gate, g.ints(pre + ".se.axes", {2, 3})}, pre + ".se.gate4");
  Activation y = x;
  y.name = g.node("Mul", {x.name, gate4}, pre + ".se.scaled");
  return y;
}

Activation emit_residual(GraphBuilder& g, const model::CnnLayer& l, const std::string& pre, const TorchWeights& w,
                         const Activation& x) {
  const int cin = int(x.c);
  Activation a = emit_conv(g, pre + ".conv1", conv_weights(w, pre + ".conv1", pre + ".bn1", cin, l.cout, 3, false),
                           l.stride, x);
  a = relu(g, a, pre + ".relu1");
  a = emit_conv(g, pre + ".conv2", conv_weights(w, pre + ".conv2", pre + ".bn2", l.cout, l.cout, 3, false), 1, a);
  if (l.se > 0) a = emit_se(g, l, pre, w, a);
  Activation shortcut = x;
  if (model::residual_projects(l, cin))
    shortcut = emit_conv(g, pre + ".downsample",
                         conv_weights(w, pre + ".downsample.0", pre + ".downsample.1", cin, l.cout, 1, false), l.stride,
                         x);
  Activation y = a;
  y.name = g.node("Add", {a.name, shortcut.name}, pre + ".add");
  return relu(g, y, pre + ".relu");
}

// Self-attentive pooling over time of the mean over mels (bench/cnn_stack_torch.py's AttentiveStatsPool).
Activation emit_attentive(GraphBuilder& g, const model::CnnLayer& l, const std::string& pre, const TorchWeights& w,
                          const Activation& x) {
  const std::int64_t C = x.c, A = l.attention > 0 ? l.attention : C;
  const std::string xm =
      g.node("ReduceMean", {x.name}, pre + ".mean_mels", {{"axes", I64s{2}}, {"keepdims", std::int64_t(0)}});
  const std::string xt = g.node("Transpose", {xm}, pre + ".time_major", {{"perm", I64s{0, 2, 1}}});  // [N, W, C]
  const auto& lw = w.get(pre + ".linear.weight", {A, C}).values;
  std::vector<float> lwt(std::size_t(C * A));  // [C, A] for MatMul
  for (std::int64_t a = 0; a < A; ++a)
    for (std::int64_t c = 0; c < C; ++c) lwt[std::size_t(c * A + a)] = lw[std::size_t(a * C + c)];
  const std::string proj = g.node("MatMul", {xt, g.floats(pre + ".linear.weight_t", {C, A}, lwt)}, pre + ".linear");
  const std::string biased =
      g.node("Add", {proj, g.floats(pre + ".linear.bias", {A}, w.get(pre + ".linear.bias", {A}).values)},
             pre + ".linear.biased");
  const std::string h = g.node("Tanh", {biased}, pre + ".tanh");
  const std::string e = g.node(
      "MatMul", {h, g.floats(pre + ".attention", {A, 1}, w.get(pre + ".attention", {A, 1}).values)}, pre + ".scores");
  const std::string alpha = g.node("Softmax", {e}, pre + ".alpha", {{"axis", std::int64_t(1)}});  // over time
  const std::string axis1 = g.ints(pre + ".time_axis", {1});
  const std::string mu = g.node("ReduceSum", {g.node("Mul", {alpha, xt}, pre + ".weighted"), axis1}, pre + ".mu",
                                {{"keepdims", std::int64_t(0)}});
  if (!l.stats) return {mu, false, C, 1, 1};
  const std::string sq = g.node("Mul", {xt, xt}, pre + ".squared");
  const std::string m2 = g.node("ReduceSum", {g.node("Mul", {alpha, sq}, pre + ".weighted_sq"), axis1},
                                pre + ".second_moment", {{"keepdims", std::int64_t(0)}});
  const std::string var = g.node("Sub", {m2, g.node("Mul", {mu, mu}, pre + ".mu_sq")}, pre + ".var");
  const std::string floor = g.scalar(pre + ".var_floor", kernels::kAttentivePoolVarFloor);
  const std::string sigma = g.node("Sqrt", {g.node("Max", {var, floor}, pre + ".var_clamped")}, pre + ".sigma");
  return {g.node("Concat", {mu, sigma}, pre + ".stats", {{"axis", std::int64_t(1)}}), false, 2 * C, 1, 1};
}

}  // namespace

TorchWeights::TorchWeights(const std::vector<model::NamedArray>& arrays) {
  for (const auto& a : arrays) by_name_[a.name] = &a;
}

const model::NamedArray& TorchWeights::get(const std::string& name, const std::vector<std::int64_t>& shape) const {
  auto it = by_name_.find(name);
  MF_CHECK(it != by_name_.end(), "ONNX export: the model has no tensor '{}'", name);
  const model::NamedArray& a = *it->second;
  MF_CHECK(std::vector<std::int64_t>(a.shape.begin(), a.shape.end()) == shape,
           "ONNX export: tensor '{}' has shape [{}], expected [{}]", name, fmt::join(a.shape, ", "),
           fmt::join(shape, ", "));
  return a;
}

Activation emit_input(GraphBuilder& g, const std::string& logmel, const model::ModelConfig& m, std::int64_t frames) {
  std::string x = logmel;
  if (m.input_norm) {
    const std::vector<float> ones(std::size_t(m.in_mels), 1.f), zeros(std::size_t(m.in_mels), 0.f);
    x = g.node("InstanceNormalization",
               {x, g.floats("input_norm.scale", {m.in_mels}, ones), g.floats("input_norm.bias", {m.in_mels}, zeros)},
               "input_norm", {{"epsilon", kernels::kInstanceNormEps}});
  }
  return {g.node("Unsqueeze", {x, g.ints("input.channel_axis", {1})}, "input.nchw"), true, 1, m.in_mels, frames};
}

Activation emit_linear(GraphBuilder& g, const std::string& prefix, const TorchWeights& w, const Activation& x,
                       std::int64_t out, bool relu_after) {
  MF_CHECK(!x.spatial, "ONNX export: {}: a linear layer needs a flat input", prefix);
  const std::string W = g.floats(prefix + ".weight", {out, x.c}, w.get(prefix + ".weight", {out, x.c}).values);
  const std::string b = g.floats(prefix + ".bias", {out}, w.get(prefix + ".bias", {out}).values);
  Activation y{g.node("Gemm", {x.name, W, b}, prefix + ".linear", {{"transB", std::int64_t(1)}}), false, out, 1, 1};
  return relu_after ? relu(g, y, prefix + ".relu") : y;
}

Activation flatten_nhwc(GraphBuilder& g, const Activation& x, const std::string& name) {
  if (!x.spatial) return x;
  MF_CHECK(x.w > 0, "ONNX export: {}: flattening needs a fixed number of frames", name);
  const std::string t = g.node("Transpose", {x.name}, name + ".nhwc", {{"perm", I64s{0, 2, 3, 1}}});
  return {g.node("Flatten", {t}, name, {{"axis", std::int64_t(1)}}), false, x.c * x.h * x.w, 1, 1};
}

Activation emit_leakcnn_trunk(GraphBuilder& g, const model::ModelConfig& m, const TorchWeights& w, Activation x) {
  for (int b = 0; b < m.blocks(); ++b) {
    const std::string pre = fmt::format("blocks.{}", b);
    const int cout = m.channels[std::size_t(b)];
    x = emit_conv(g, pre + ".conv", conv_weights(w, pre + ".conv", "", int(x.c), cout, m.kernel, true), 1, x);
    x = max_pool(g, relu(g, x, pre + ".relu"), m.pools[std::size_t(b)], pre + ".pool");
  }
  // LeakCNN's fc reads PyTorch's NCHW flatten (c, h, w): torch.flatten(x, 1).
  Activation flat{g.node("Flatten", {x.name}, "flatten", {{"axis", std::int64_t(1)}}), false, x.c * x.h * x.w, 1, 1};
  return emit_linear(g, "fc", w, flat, m.dense, true);  // dropout: identity at inference
}

Activation emit_stack_layer(GraphBuilder& g, const model::CnnLayer& l, int i, const TorchWeights& w, Activation x) {
  const std::string pre = fmt::format("layers.{}", i);
  const bool needs_spatial = l.type == model::LayerType::conv || l.type == model::LayerType::residual ||
                             l.type == model::LayerType::global_avg_pool ||
                             l.type == model::LayerType::attentive_stats_pool;
  MF_CHECK(!needs_spatial || x.spatial, "ONNX export: model.layers[{}] ({}) needs a spatial input", i,
           model::layer_type_name(l.type));
  switch (l.type) {
    case model::LayerType::conv: return emit_conv_layer(g, l, pre, w, x);
    case model::LayerType::residual: return emit_residual(g, l, pre, w, x);
    case model::LayerType::global_avg_pool:
      return {g.node("ReduceMean", {x.name}, pre + ".mean", {{"axes", I64s{2, 3}}, {"keepdims", std::int64_t(0)}}),
              false, x.c, 1, 1};
    case model::LayerType::attentive_stats_pool: return emit_attentive(g, l, pre, w, x);
    case model::LayerType::dense:
      return emit_linear(g, pre + ".fc", w, flatten_nhwc(g, x, pre + ".flatten"), l.units, l.relu);
    case model::LayerType::dropout: return x;  // identity at inference
  }
  MF_THROW("ONNX export: model.layers[{}] has a layer type ({}) with no ONNX mapping", i, int(l.type));
}

}  // namespace mf::onnx_export
