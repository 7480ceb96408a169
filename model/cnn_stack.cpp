#include "model/cnn_stack.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "engine/counter_rng.hpp"
#include "engine/cuda_entry.hpp"
#include "engine/error.hpp"
#include "kernels/attentive_pool.hpp"
#include "kernels/batch_norm.hpp"
#include "kernels/conv2d.hpp"
#include "kernels/ops.hpp"

namespace mf::model {

namespace {

Shape act_shape(std::int64_t n, const ActShape& s) {
  return s.spatial ? Shape{n, s.h, s.w, s.c} : Shape{n, s.c};
}
Layout act_layout(const ActShape& s) { return s.spatial ? Layout::nhwc : Layout::plain; }

// Whether a conv layer is LeakCNN's kind, which the fused op runs.
bool conv_is_fused(const CnnLayer& l) {
  return l.stride == 1 && l.bias && l.relu && !l.batch_norm && l.pool <= 2;
}

// A batch norm's saved batch statistics (training).
struct BnSaved {
  Tensor mean, invstd;
};

// Named views of the parameters: working weights, master statistics, gradients.
struct Params {
  ParamBuffer& pb;
  Tensor* conv_scratch = nullptr;  // conv2d_backward's dw/db partials (GPU), made once
  Tensor w(const std::string& name) const { return pb.view(pb.work(), name); }
  Tensor stat(const std::string& name) const { return pb.view(pb.master(), name); }
};

}  // namespace

// One layer: its shapes and the buffers of one forward (and, in training, of
// its backward). Tensors that a layer does not need stay undefined; some alias
// others (a conv without pool and batch norm outputs its conv result).
struct CnnStack::Node {
  CnnLayer l;
  ActShape in, out;
  std::string pre;  // "layers.<i>"
  std::uint64_t dropout_seed = 0;
  bool fused = false, project = false, first = false;
  Tensor y, dy;  // output and its gradient
  // conv: z conv output, a after batch norm, code the pool's winners
  Tensor z, a, code, dz, da;
  // residual: t1 conv1, a1 bn1+relu, t2 conv2, b2 bn2 (with SE), p projection,
  // s projection after BN, g1 pooled, f1 fc1, gl fc2 (gate logits)
  Tensor t1, a1, t2, b2, p, s, g1, f1, gl;
  Tensor dt1, da1, dt2, db2, dp, dx2, dgl, df1, dg1, dtmp;
  Tensor saved, dxs;  // attentive pool: what the backward needs; dx when the layer is first
  BnSaved bn, bn1, bn2, bnd;
};

namespace {

using Node = CnnStack::Node;

struct Alloc {
  std::int64_t n;
  DType dtype;
  Device device;
  cudaStream_t stream;
  bool train;
  bool fold = false;  // inference with batch norm folded into the convs: no pre-BN conv outputs
  Tensor act(const ActShape& s) const { return Tensor::zeros(act_shape(n, s), dtype, device, act_layout(s), stream); }
  Tensor f32(std::int64_t c) const { return Tensor::zeros({c}, DType::f32, device, Layout::plain, stream); }
  BnSaved bn(int c) const { return train ? BnSaved{f32(c), f32(c)} : BnSaved{}; }
};

void alloc_conv(Node& nd, const Alloc& al) {
  const CnnLayer& l = nd.l;
  const ActShape full{true, (nd.in.h - 1) / l.stride + 1, (nd.in.w - 1) / l.stride + 1, l.cout};
  if (nd.fused) {
    nd.y = al.act(nd.out);
    if (al.train) {
      nd.dy = al.act(nd.out);
      nd.code = Tensor::zeros(act_shape(al.n, nd.out), DType::u8, al.device, Layout::nhwc, al.stream);
    }
    return;
  }
  nd.z = l.batch_norm && al.fold ? Tensor() : al.act(full);
  nd.a = l.batch_norm ? al.act(full) : nd.z;
  nd.y = l.pool > 1 ? al.act(nd.out) : nd.a;
  nd.bn = l.batch_norm ? al.bn(l.cout) : BnSaved{};
  if (!al.train) return;
  nd.dy = al.act(nd.out);
  nd.da = l.pool > 1 ? al.act(full) : nd.dy;
  nd.dz = l.batch_norm ? al.act(full) : nd.da;
  if (l.pool > 1) nd.code = Tensor::zeros(act_shape(al.n, nd.out), DType::u8, al.device, Layout::nhwc, al.stream);
}

void alloc_residual(Node& nd, const Alloc& al) {
  const CnnLayer& l = nd.l;
  const ActShape pooled{false, 1, 1, l.cout}, hidden{false, 1, 1, se_hidden(l.cout, std::max(l.se, 1))};
  nd.t1 = al.fold ? Tensor() : al.act(nd.out);
  nd.a1 = al.act(nd.out);
  nd.t2 = al.fold && l.se > 0 ? Tensor() : al.act(nd.out);
  nd.y = al.act(nd.out);
  nd.bn1 = al.bn(l.cout);
  nd.bn2 = al.bn(l.cout);
  if (nd.project) {
    nd.p = al.fold ? Tensor() : al.act(nd.out);
    nd.s = al.act(nd.out);
    nd.bnd = al.bn(l.cout);
  }
  if (l.se > 0) {
    nd.b2 = al.act(nd.out);
    nd.g1 = al.act(pooled);
    nd.f1 = al.act(hidden);
    nd.gl = al.act(pooled);
  }
  if (!al.train) return;
  nd.dy = al.act(nd.out);
  nd.dt1 = al.act(nd.out);
  nd.da1 = al.act(nd.out);
  nd.dt2 = al.act(nd.out);
  if (nd.project) {
    nd.dp = al.act(nd.out);
    if (!nd.first) nd.dx2 = al.act(nd.in);
  }
  if (l.se > 0) {
    nd.db2 = al.act(nd.out);
    nd.dgl = al.act(pooled);
    nd.df1 = al.act(hidden);
    nd.dg1 = al.act(pooled);
    nd.dtmp = al.act(nd.out);
  }
}

void alloc_node(Node& nd, const Alloc& al) {
  switch (nd.l.type) {
    case LayerType::conv: alloc_conv(nd, al); return;
    case LayerType::residual: alloc_residual(nd, al); return;
    case LayerType::attentive_stats_pool: {
      const int a = nd.l.attention > 0 ? nd.l.attention : nd.in.c;
      if (al.train)
        nd.saved = Tensor::zeros({kernels::attentive_pool_saved_elems(al.n, nd.in.w, nd.in.c, a, nd.l.stats)},
                                 DType::f32, al.device, Layout::plain, al.stream);
      if (al.train && nd.first) nd.dxs = al.act(nd.in);
      break;
    }
    case LayerType::global_avg_pool:
    case LayerType::dense:
    case LayerType::dropout: break;
  }
  nd.y = al.act(nd.out);
  if (al.train) nd.dy = al.act(nd.out);
}

// Batch norm forward: training (batch statistics, running ones updated) or
// inference (running statistics).
void bn_forward(const Params& P, const std::string& name, const Tensor& x, BnSaved& saved, const Tensor* residual,
                bool relu, Tensor& y, bool train, Tensor* scratch, cudaStream_t st) {
  Tensor rm = P.stat(name + ".running_mean"), rv = P.stat(name + ".running_var");
  if (train)
    ops::batch_norm_train_forward(x, P.w(name + ".weight"), P.w(name + ".bias"), rm, rv, kBatchNormEps, kBatchNormMomentum,
                                  relu, saved.mean, saved.invstd, y, residual, scratch, st);
  else
    ops::batch_norm_eval_forward(x, P.w(name + ".weight"), P.w(name + ".bias"), rm, rv, kBatchNormEps, relu, y, residual,
                                 st);
}

void bn_backward(const Params& P, Tensor& g, const std::string& name, const Tensor& x, const BnSaved& saved,
                 const Tensor* y, Tensor& dy, bool relu, Tensor& dx, Tensor* scratch, cudaStream_t st) {
  Tensor dgamma = P.pb.view(g, name + ".weight"), dbeta = P.pb.view(g, name + ".bias");
  ops::batch_norm_backward(x, P.w(name + ".weight"), saved.mean, saved.invstd, dy, relu, dx, dgamma, dbeta, y,
                           scratch, st);
}

void conv_forward(Node& nd, const Params& P, const Tensor& x, bool train, Tensor* scratch, cudaStream_t st) {
  const CnnLayer& l = nd.l;
  const Tensor w = P.w(nd.pre + ".conv.weight");
  const Tensor b = l.bias ? P.w(nd.pre + ".conv.bias") : Tensor();
  if (nd.fused) {
    ops::conv_relu_pool_forward(x, w, b, l.pool, nd.y, train ? &nd.code : nullptr, st);
    return;
  }
  ops::conv2d_forward(x, w, l.stride, l.relu && !l.batch_norm, nd.z, l.bias ? &b : nullptr, st);
  if (l.batch_norm) bn_forward(P, nd.pre + ".bn", nd.z, nd.bn, nullptr, l.relu, nd.a, train, scratch, st);
  if (l.pool > 1) ops::max_pool_forward(nd.a, l.pool, nd.y, train ? &nd.code : nullptr, st);
}

void conv_backward(Node& nd, const Params& P, const Tensor& x, Tensor* dx, Tensor& g, Tensor* scratch,
                   cudaStream_t st) {
  const CnnLayer& l = nd.l;
  const Tensor w = P.w(nd.pre + ".conv.weight");
  Tensor gw = P.pb.view(g, nd.pre + ".conv.weight");
  Tensor gb = l.bias ? P.pb.view(g, nd.pre + ".conv.bias") : Tensor();
  if (nd.fused) {
    ops::conv_relu_pool_backward(x, w, nd.dy, nd.code, l.pool, gw, gb, dx, st);
    return;
  }
  if (l.pool > 1) ops::max_pool_backward(nd.dy, nd.code, l.pool, nd.da, st);
  if (l.batch_norm) bn_backward(P, g, nd.pre + ".bn", nd.z, nd.bn, &nd.a, nd.da, l.relu, nd.dz, scratch, st);
  const bool relu_here = l.relu && !l.batch_norm;
  ops::conv2d_backward(x, w, nd.dz, l.stride, relu_here, gw, relu_here ? &nd.z : nullptr, dx,
                       l.bias ? &gb : nullptr, P.conv_scratch, st);
}

// Squeeze-excitation after bn2 (nd.b2): the gate, the shortcut added, ReLU.
void se_forward(Node& nd, const Params& P, const Tensor* shortcut, cudaStream_t st) {
  const std::string& pre = nd.pre;
  ops::global_avg_pool_forward(nd.b2, nd.g1, st);
  ops::dense_forward(nd.g1, P.w(pre + ".se.fc1.weight"), P.w(pre + ".se.fc1.bias"), true, nd.f1, st);
  ops::dense_forward(nd.f1, P.w(pre + ".se.fc2.weight"), P.w(pre + ".se.fc2.bias"), false, nd.gl, st);
  ops::channel_gate_forward(nd.b2, nd.gl, true, nd.y, shortcut, st);
}

void residual_forward(Node& nd, const Params& P, const Tensor& x, bool train, Tensor* scratch, cudaStream_t st) {
  const CnnLayer& l = nd.l;
  const std::string& pre = nd.pre;
  ops::conv2d_forward(x, P.w(pre + ".conv1.weight"), l.stride, false, nd.t1, nullptr, st);
  bn_forward(P, pre + ".bn1", nd.t1, nd.bn1, nullptr, true, nd.a1, train, scratch, st);
  ops::conv2d_forward(nd.a1, P.w(pre + ".conv2.weight"), 1, false, nd.t2, nullptr, st);
  const Tensor* shortcut = &x;
  if (nd.project) {
    ops::conv2d_forward(x, P.w(pre + ".downsample.0.weight"), l.stride, false, nd.p, nullptr, st);
    bn_forward(P, pre + ".downsample.1", nd.p, nd.bnd, nullptr, false, nd.s, train, scratch, st);
    shortcut = &nd.s;
  }
  if (l.se == 0) {
    bn_forward(P, pre + ".bn2", nd.t2, nd.bn2, shortcut, true, nd.y, train, scratch, st);
    return;
  }
  bn_forward(P, pre + ".bn2", nd.t2, nd.bn2, nullptr, false, nd.b2, train, scratch, st);
  se_forward(nd, P, shortcut, st);
}

void residual_backward(Node& nd, const Params& P, const Tensor& x, Tensor* dx, Tensor& g, Tensor* scratch,
                       cudaStream_t st) {
  const CnnLayer& l = nd.l;
  const std::string& pre = nd.pre;
  const ParamBuffer& pb = P.pb;
  // The output's ReLU masks dy in place; dy is then the shortcut's gradient.
  if (l.se == 0) {
    bn_backward(P, g, pre + ".bn2", nd.t2, nd.bn2, &nd.y, nd.dy, true, nd.dt2, scratch, st);
  } else {
    ops::channel_gate_backward(nd.b2, nd.gl, nd.dy, true, nd.db2, nd.dgl, &nd.y, st);
    Tensor g2w = pb.view(g, pre + ".se.fc2.weight"), g2b = pb.view(g, pre + ".se.fc2.bias");
    ops::dense_backward(nd.f1, P.w(pre + ".se.fc2.weight"), nd.gl, nd.dgl, false, g2w, g2b, &nd.df1, st);
    Tensor g1w = pb.view(g, pre + ".se.fc1.weight"), g1b = pb.view(g, pre + ".se.fc1.bias");
    ops::dense_backward(nd.g1, P.w(pre + ".se.fc1.weight"), nd.f1, nd.df1, true, g1w, g1b, &nd.dg1, st);
    ops::global_avg_pool_backward(nd.dg1, nd.dtmp, st);
    ops::accumulate(nd.dtmp, nd.db2, st);
    bn_backward(P, g, pre + ".bn2", nd.t2, nd.bn2, nullptr, nd.db2, false, nd.dt2, scratch, st);
  }
  Tensor gw2 = pb.view(g, pre + ".conv2.weight");
  ops::conv2d_backward(nd.a1, P.w(pre + ".conv2.weight"), nd.dt2, 1, false, gw2, nullptr, &nd.da1, nullptr,
                       P.conv_scratch, st);
  bn_backward(P, g, pre + ".bn1", nd.t1, nd.bn1, &nd.a1, nd.da1, true, nd.dt1, scratch, st);
  Tensor gw1 = pb.view(g, pre + ".conv1.weight");
  ops::conv2d_backward(x, P.w(pre + ".conv1.weight"), nd.dt1, l.stride, false, gw1, nullptr, dx, nullptr,
                       P.conv_scratch, st);
  if (nd.project) {
    bn_backward(P, g, pre + ".downsample.1", nd.p, nd.bnd, nullptr, nd.dy, false, nd.dp, scratch, st);
    Tensor gwd = pb.view(g, pre + ".downsample.0.weight");
    ops::conv2d_backward(x, P.w(pre + ".downsample.0.weight"), nd.dp, l.stride, false, gwd,
                         nullptr, dx ? &nd.dx2 : nullptr, nullptr, P.conv_scratch, st);
    if (dx) ops::accumulate(nd.dx2, *dx, st);
  } else if (dx) {
    ops::accumulate(nd.dy, *dx, st);
  }
}

// Inference with each batch norm that follows a conv (and has no residual
// input) folded into that conv (kernels/fold_batch_norm.hpp): one conv2d with
// w' = w * s and b' = beta + (b - mean) * s in place of conv2d + batch norm.
// The folded weights are made per forward_eval call from the current
// parameters (training changes them every step), the size of the conv's own.
struct Folded {
  Tensor w, b;
};

Folded fold(const Params& P, const std::string& conv, bool bias, const std::string& bn, cudaStream_t st) {
  const Tensor w = P.w(conv + ".weight");
  const Tensor b = bias ? P.w(conv + ".bias") : Tensor();
  Folded f{Tensor::empty(w.shape(), w.dtype(), w.device(), w.layout(), st),
           Tensor::empty({w.size(0)}, w.dtype(), w.device(), Layout::plain, st)};
  ops::fold_batch_norm(w, P.w(bn + ".weight"), P.w(bn + ".bias"), P.stat(bn + ".running_mean"),
                       P.stat(bn + ".running_var"), kBatchNormEps, f.w, f.b, bias ? &b : nullptr, st);
  return f;
}

// Whether forward_eval folds a batch norm of this node.
bool node_folds(const Node& nd) {
  return nd.l.type == LayerType::residual || (nd.l.type == LayerType::conv && nd.l.batch_norm);
}

// conv + batch norm (+ ReLU) -> one conv2d with the ReLU, then the pool.
void conv_forward_folded(Node& nd, const Params& P, const Tensor& x, cudaStream_t st) {
  const CnnLayer& l = nd.l;
  const Folded f = fold(P, nd.pre + ".conv", l.bias, nd.pre + ".bn", st);
  ops::conv2d_forward(x, f.w, l.stride, l.relu, nd.a, &f.b, st);
  if (l.pool > 1) ops::max_pool_forward(nd.a, l.pool, nd.y, nullptr, st);
}

// conv1+bn1 (ReLU) and the projection downsample.0+.1 folded; bn2 folded into
// conv2 only with SE (its output goes to the gate); without SE bn2 keeps its
// one pass of batch norm, the shortcut's add and ReLU.
void residual_forward_folded(Node& nd, const Params& P, const Tensor& x, cudaStream_t st) {
  const CnnLayer& l = nd.l;
  const std::string& pre = nd.pre;
  {
    const Folded f1 = fold(P, pre + ".conv1", false, pre + ".bn1", st);
    ops::conv2d_forward(x, f1.w, l.stride, true, nd.a1, &f1.b, st);
  }
  const Tensor* shortcut = &x;
  if (nd.project) {
    const Folded fd = fold(P, pre + ".downsample.0", false, pre + ".downsample.1", st);
    ops::conv2d_forward(x, fd.w, l.stride, false, nd.s, &fd.b, st);
    shortcut = &nd.s;
  }
  if (l.se == 0) {
    ops::conv2d_forward(nd.a1, P.w(pre + ".conv2.weight"), 1, false, nd.t2, nullptr, st);
    bn_forward(P, pre + ".bn2", nd.t2, nd.bn2, shortcut, true, nd.y, false, nullptr, st);
    return;
  }
  const Folded f2 = fold(P, pre + ".conv2", false, pre + ".bn2", st);
  ops::conv2d_forward(nd.a1, f2.w, 1, false, nd.b2, &f2.b, st);
  se_forward(nd, P, shortcut, st);
}

Tensor flat(const Tensor& t) { return t.reshape({t.size(0), t.numel() / std::max<std::int64_t>(t.size(0), 1)}); }

void node_forward(Node& nd, const Params& P, const Tensor& x, bool train, const DropoutContext& drop,
                  Tensor* scratch, cudaStream_t st) {
  const CnnLayer& l = nd.l;
  switch (l.type) {
    case LayerType::conv: conv_forward(nd, P, x, train, scratch, st); return;
    case LayerType::residual: residual_forward(nd, P, x, train, scratch, st); return;
    case LayerType::global_avg_pool: ops::global_avg_pool_forward(x, nd.y, st); return;
    case LayerType::attentive_stats_pool:
      ops::attentive_pool_forward(x, P.w(nd.pre + ".linear.weight"), P.w(nd.pre + ".linear.bias"),
                                  P.w(nd.pre + ".attention"), l.stats, nd.y, train ? &nd.saved : nullptr, st);
      return;
    case LayerType::dense:
      ops::dense_forward(flat(x), P.w(nd.pre + ".fc.weight"), P.w(nd.pre + ".fc.bias"), l.relu, nd.y, st);
      return;
    case LayerType::dropout:
      if (train && l.p > 0.f)
        ops::dropout_forward(x, drop.counter, l.p, nd.dropout_seed ^ drop.seed, drop.stream, nd.y, st);
      else
        nd.y.copy_from(x, st);
      return;
  }
}

void node_backward(Node& nd, const Params& P, const Tensor& x, Tensor* dx, Tensor& g, const DropoutContext& drop,
                   Tensor* scratch, cudaStream_t st) {
  const CnnLayer& l = nd.l;
  const ParamBuffer& pb = P.pb;
  switch (l.type) {
    case LayerType::conv: conv_backward(nd, P, x, dx, g, scratch, st); return;
    case LayerType::residual: residual_backward(nd, P, x, dx, g, scratch, st); return;
    case LayerType::global_avg_pool:
      if (dx) ops::global_avg_pool_backward(nd.dy, *dx, st);
      return;
    case LayerType::attentive_stats_pool: {
      Tensor gw = pb.view(g, nd.pre + ".linear.weight"), gb = pb.view(g, nd.pre + ".linear.bias");
      Tensor gv = pb.view(g, nd.pre + ".attention");
      ops::attentive_pool_backward(x, P.w(nd.pre + ".linear.weight"), P.w(nd.pre + ".linear.bias"),
                                   P.w(nd.pre + ".attention"), nd.saved, nd.dy, l.stats, dx ? *dx : nd.dxs, gw, gb,
                                   gv, st);
      return;
    }
    case LayerType::dense: {
      Tensor gw = pb.view(g, nd.pre + ".fc.weight"), gb = pb.view(g, nd.pre + ".fc.bias");
      Tensor dxf = dx ? flat(*dx) : Tensor();
      ops::dense_backward(flat(x), P.w(nd.pre + ".fc.weight"), nd.y, nd.dy, l.relu, gw, gb, dx ? &dxf : nullptr,
                          st);
      return;
    }
    case LayerType::dropout:
      if (!dx) return;
      if (l.p > 0.f)
        ops::dropout_backward(nd.dy, drop.counter, l.p, nd.dropout_seed ^ drop.seed, drop.stream, *dx, st);
      else
        dx->copy_from(nd.dy, st);
      return;
  }
}

std::vector<std::unique_ptr<Node>> make_nodes(const ModelConfig& cfg, const Alloc& al) {
  const std::vector<ActShape> shapes = cnn_shapes(cfg.layers, cfg.in_mels, cfg.in_frames);
  std::vector<std::unique_ptr<Node>> nodes;
  ActShape in{true, cfg.in_mels, cfg.in_frames, 1};
  for (std::size_t i = 0; i < cfg.layers.size(); ++i) {
    auto nd = std::make_unique<Node>();
    nd->l = cfg.layers[i];
    nd->in = in;
    nd->out = shapes[i];
    nd->pre = fmt::format("layers.{}", i);
    nd->first = i == 0;
    nd->fused = nd->l.type == LayerType::conv && conv_is_fused(nd->l);
    nd->project = nd->l.type == LayerType::residual && residual_projects(nd->l, in.c);
    nd->dropout_seed = splitmix64_hash(0x64726f706f7574ull + i);  // "dropout" + layer
    alloc_node(*nd, al);
    nodes.push_back(std::move(nd));
    in = shapes[i];
  }
  return nodes;
}

// The largest conv2d backward scratch any layer needs (GPU only).
std::int64_t conv_scratch_elems(const std::vector<std::unique_ptr<Node>>& nodes, std::int64_t n) {
  std::int64_t e = 0;
  auto take = [&](const ActShape& in, int cout, int k, int stride) {
    kernels::Conv2dDims d;
    d.n = n;
    d.h = in.h;
    d.w = in.w;
    d.cin = in.c;
    d.cout = cout;
    d.k = k;
    d.stride = stride;
    e = std::max(e, MF_CUDA_ENTRY(kernels::conv2d_scratch_elems)(d));
  };
  for (const auto& nd : nodes) {
    const CnnLayer& l = nd->l;
    if (l.type == LayerType::conv && !nd->fused) take(nd->in, l.cout, l.k, l.stride);
    if (l.type != LayerType::residual) continue;
    take(nd->in, l.cout, 3, l.stride);
    take(ActShape{true, nd->out.h, nd->out.w, l.cout}, l.cout, 3, 1);
    if (nd->project) take(nd->in, l.cout, 1, l.stride);
  }
  return e;
}

// The largest batch-norm scratch any layer needs (GPU only; the CPU twin needs none).
std::int64_t bn_scratch_elems(const std::vector<std::unique_ptr<Node>>& nodes, std::int64_t n) {
  std::int64_t e = 0;
  for (const auto& nd : nodes) {
    const bool bn = nd->l.type == LayerType::residual || (nd->l.type == LayerType::conv && nd->l.batch_norm);
    if (bn) {
      const ActShape& o = nd->l.pool > 1 && nd->l.type == LayerType::conv
                              ? ActShape{true, (nd->in.h - 1) / nd->l.stride + 1, (nd->in.w - 1) / nd->l.stride + 1,
                                         nd->l.cout}
                              : nd->out;
      e = std::max(e, kernels::batch_norm_scratch_elems(n * o.h * o.w, o.c));
    }
  }
  return e;
}

}  // namespace

CnnStack::CnnStack(const ModelConfig& cfg, std::int64_t batch, DType dtype, Device device, cudaStream_t stream)
    : cfg_(cfg), batch_(batch), dtype_(dtype), device_(device) {
  MF_CHECK(cfg_.arch == Arch::cnn, "CnnStack: the model is not a CNN stack ({})", cfg_.str());
  cfg_.validate();
  MF_CHECK(batch >= 1, "CnnStack: batch must be >= 1, found {}", batch);
  nodes_ = make_nodes(cfg_, Alloc{batch, dtype, device, stream, true});
  const std::int64_t d = cfg_.trunk_features();
  features_ = nodes_.back()->y.reshape({batch, d});
  dfeatures_ = nodes_.back()->dy.reshape({batch, d});
  if (device.is_cuda()) {
    const std::int64_t e = bn_scratch_elems(nodes_, batch);
    if (e > 0) bn_scratch_ = Tensor::zeros({e}, DType::f32, device, Layout::plain, stream);
    const std::int64_t c = conv_scratch_elems(nodes_, batch);
    if (c > 0) conv_scratch_ = Tensor::zeros({c}, DType::f32, device, Layout::plain, stream);
  }
}

CnnStack::~CnnStack() = default;

Tensor& CnnStack::dfeatures() { return dfeatures_; }

const Tensor& CnnStack::forward(ParamBuffer& pb, const Tensor& x, const DropoutContext& drop, cudaStream_t stream) {
  check_shape(x, {batch_, cfg_.in_mels, cfg_.in_frames, 1}, "CnnStack::forward", "x");
  const Params P{pb};
  Tensor* scratch = bn_scratch_.defined() && bn_scratch_.numel() ? &bn_scratch_ : nullptr;
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    node_forward(*nodes_[i], P, i == 0 ? x : nodes_[i - 1]->y, true, drop, scratch, stream);
  return features_;
}

void CnnStack::backward(ParamBuffer& pb, const Tensor& x, Tensor& g, const DropoutContext& drop, cudaStream_t stream,
                        const std::function<void(std::string_view layer)>& layer_done) {
  const Params P{pb, conv_scratch_.defined() && conv_scratch_.numel() ? &conv_scratch_ : nullptr};
  Tensor* scratch = bn_scratch_.defined() && bn_scratch_.numel() ? &bn_scratch_ : nullptr;
  for (std::size_t i = nodes_.size(); i-- > 0;) {
    Tensor* dx = i == 0 ? nullptr : &nodes_[i - 1]->dy;
    node_backward(*nodes_[i], P, i == 0 ? x : nodes_[i - 1]->y, dx, g, drop, scratch, stream);
    if (layer_done) layer_done(nodes_[i]->pre);
  }
}

Tensor CnnStack::forward_eval(const ParamBuffer& pb, const Tensor& x, cudaStream_t stream) const {
  MF_CHECK(x.ndim() == 4 && x.size(1) == cfg_.in_mels && cfg_.takes_frames(x.size(2)) && x.size(3) == 1,
           "CnnStack::forward_eval: x must be [N, {}, {}, 1] (nhwc; other frame counts only when the stack ends in "
           "global or attentive pooling), found {}", cfg_.in_mels, cfg_.in_frames, x.str());
  const std::int64_t n = x.size(0);
  ModelConfig at = cfg_;  // the layers' shapes at this input's frames
  at.in_frames = int(x.size(2));
  std::vector<std::unique_ptr<Node>> nodes = make_nodes(at, Alloc{n, dtype_, device_, stream, false, fold_bn_});
  const Params P{const_cast<ParamBuffer&>(pb)};  // inference reads only: no statistic is updated
  const DropoutContext none;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    Node& nd = *nodes[i];
    const Tensor& in = i == 0 ? x : nodes[i - 1]->y;
    if (!fold_bn_ || !node_folds(nd)) node_forward(nd, P, in, false, none, nullptr, stream);
    else if (nd.l.type == LayerType::conv) conv_forward_folded(nd, P, in, stream);
    else residual_forward_folded(nd, P, in, stream);
  }
  return nodes.back()->y.reshape({n, cfg_.trunk_features()});
}

}  // namespace mf::model
