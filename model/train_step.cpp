#include "model/train_step.hpp"

#include "engine/counter_rng.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/error.hpp"
#include "engine/nvtx.hpp"
#include "kernels/ops.hpp"
#include "model/gradient_buckets.hpp"

namespace mf::model {

namespace {
// Starts/stops a named phase on the timer when there is one.
// Every phase is also an NVTX range (per layer, forward and backward), so
// Nsight shows the step's structure; on a replayed graph the ranges appear at
// capture time.
struct Phase {
  Phase(EventTimer* t, std::string name, cudaStream_t s)
      : t_(t), name_(std::move(name)), s_(s), range_(name_.c_str()) {
    if (t_) t_->start(name_, s_);
  }
  ~Phase() {
    if (t_) t_->stop(name_, s_);
  }
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;
  EventTimer* t_;
  std::string name_;
  cudaStream_t s_;
  NvtxRange range_;
};

Tensor make(const Shape& s, DType t, Device d, cudaStream_t st, Layout l = Layout::plain) {
  return Tensor::zeros(s, t, d, l, st);
}
}  // namespace

TrainStep::TrainStep(const TrainConfig& cfg, Device device, cudaStream_t stream)
    : cfg_(cfg), device_(device), dtype_(activation_dtype(cfg.precision)) {
  cfg_.model.validate();
  MF_CHECK(cfg_.micro_batch >= 1, "train: micro-batch size must be >= 1, found {}", cfg_.micro_batch);
  MF_CHECK(cfg_.accum_steps >= 1, "train: accumulation steps must be >= 1, found {}", cfg_.accum_steps);
  MF_CHECK(cfg_.class_weights.empty() || int(cfg_.class_weights.size()) == cfg_.model.classes,
           "train: {} class weights given for {} classes", cfg_.class_weights.size(), cfg_.model.classes);
  MF_CHECK(cfg_.label_smoothing >= 0.f && cfg_.label_smoothing <= 1.f,
           "train: label smoothing must be in [0, 1], found {}", cfg_.label_smoothing);
  MF_CHECK(std::isfinite(cfg_.mixup_alpha) && cfg_.mixup_alpha >= 0.f,
           "train: mixup_alpha must be finite and >= 0 (0: off), found {}", cfg_.mixup_alpha);
  MF_CHECK(cfg_.model.class_head() || (cfg_.label_smoothing == 0.f && cfg_.class_weights.empty()),
           "train: label smoothing and class weights apply to the class head, which loss.type = {} does not have",
           loss_type_name(cfg_.model.loss));
  MF_CHECK(cfg_.mixup_alpha == 0.f || cfg_.model.loss == LossType::softmax,
           "augment.mixup_alpha: mixup mixes class targets, which loss.type = {} does not have; use it with the softmax "
           "loss", loss_type_name(cfg_.model.loss));
  cfg_.optim.dynamic_loss_scale = cfg_.precision == Precision::fp16;
  set_current(device);

  const ModelConfig& mc = cfg_.model;
  const std::int64_t B = cfg_.micro_batch, K = cfg_.accum_steps;
  params_ = std::make_unique<ParamBuffer>(mc, dtype_, device, stream);
  params_->init(cfg_.seed, stream);
  frozen_params_ = params_->matching(cfg_.freeze, "train.freeze");
  if (!frozen_params_.empty()) {
    Tensor mask = Tensor::zeros({params_->size()}, DType::u8);
    for (const ParamInfo* p : frozen_params_)
      std::fill_n(static_cast<std::uint8_t*>(mask.raw()) + p->offset, p->numel, std::uint8_t(1));
    frozen_ = mask.to(device, stream);
  }
  MF_CHECK(cfg_.world_size >= 1 && cfg_.world_rank >= 0 && cfg_.world_rank < cfg_.world_size,
           "TrainStep: rank {} of {} processes", cfg_.world_rank, cfg_.world_size);
  MF_CHECK(cfg_.world_size == 1 ||
               (cfg_.gather && (cfg_.reduce_in_order || (cfg_.allreduce_start && cfg_.allreduce_finish))),
           "TrainStep: data parallelism needs gather (and allreduce_start/finish for the fast reduction)");
  if (cfg_.world_size > 1 && !cfg_.reduce_in_order)
    buckets_ = std::make_unique<GradientBuckets>(params_->params(), params_->size(), cfg_.bucket_elems);
  if (K > 1 || cfg_.world_size > 1) grad_scratch_ = make({params_->size()}, DType::f32, device, stream);
  if (cfg_.world_size > 1 && cfg_.reduce_in_order)
    gathered_ = make({cfg_.world_size * params_->size()}, DType::f32, device, stream);
  for (const ParamInfo& p : params_->params())
    if (p.kind == ParamKind::running_mean || p.kind == ParamKind::running_var)
      stat_ranges_.emplace_back(p.offset, p.numel);

  in_x_ = make({K * B, mc.in_mels, mc.in_frames, 1}, dtype_, device, stream, Layout::nhwc);
  in_labels_ = make({K * B}, DType::i32, device, stream);
  in_leak_ = make({K * B}, DType::f32, device, stream);
  const int C = mc.classes;
  if (mc.arch == Arch::cnn) {
    stack_ = std::make_unique<CnnStack>(mc, B, dtype_, device, stream);
  } else {
    for (int i = 0; i < mc.blocks(); ++i) {
      const Shape s{B, mc.out_h(i), mc.out_w(i), mc.channels[std::size_t(i)]};
      block_out_.push_back(make(s, dtype_, device, stream, Layout::nhwc));
      block_pool_code_.push_back(make(s, DType::u8, device, stream, Layout::nhwc));
      dblock_out_.push_back(make(s, dtype_, device, stream, Layout::nhwc));
    }
    const int D = mc.dense;
    fc_out_ = make({B, D}, dtype_, device, stream);
    dfc_out_ = make({B, D}, dtype_, device, stream);
    if (mc.dropout > 0.f) {
      fc_dropped_ = make({B, D}, dtype_, device, stream);
      dfc_dropped_ = make({B, D}, dtype_, device, stream);
    }
  }
  if (mc.embedding > 0) {
    emb_ = make({B, mc.embedding}, dtype_, device, stream);
    demb_ = make({B, mc.embedding}, dtype_, device, stream);
  }
  if (mc.class_head()) {
    logits_ = make({B, mc.head_outputs()}, dtype_, device, stream);
    dlogits_ = make({B, mc.head_outputs()}, dtype_, device, stream);
  }
  if (mc.loss == LossType::softmaxproto) {  // angleproto's share, added to the class head's
    demb_proto_ = make({B, mc.features()}, dtype_, device, stream);
    proto_sums_ = make({kernels::kLossSums}, DType::f32, device, stream);
    proto_counts_ = make({kernels::kLossCounts}, DType::i32, device, stream);
  }
  if ((mc.loss == LossType::am_softmax || mc.loss == LossType::aam_softmax) && device.is_cuda())
    margin_scratch_ = make({kernels::margin_softmax_scratch_elems(B, C, mc.features())}, DType::f32, device, stream);
  if (loss_is_prototypical(mc.loss) && device.is_cuda() && cfg_.per_class >= 2)
    proto_scratch_ = make({kernels::angleproto_scratch_elems(B / cfg_.per_class, mc.features())}, DType::f32, device,
                          stream);
  if (loss_is_prototypical(mc.loss))
    MF_CHECK(cfg_.per_class >= 2 && B % cfg_.per_class == 0 && B / cfg_.per_class >= 2,
             "loss.type = {}: each micro-batch must hold per_class (data.per_class >= 2) segments of each of at "
             "least 2 classes; found micro-batch {} and per_class {}", loss_type_name(mc.loss), B, cfg_.per_class);
  if (!cfg_.class_weights.empty())
    class_weight_ = Tensor::from_floats(cfg_.class_weights, {C}).to(device, stream);
  const std::int64_t seg = mc.in_mels * mc.in_frames;
  MF_CHECK(cfg_.augment.noise_count * seg == std::int64_t(cfg_.augment_noise.size()),
           "train: augmentation noise: {} values for {} segments of {} x {}", cfg_.augment_noise.size(),
           cfg_.augment.noise_count, mc.in_mels, mc.in_frames);
  if (cfg_.augment.noise_count > 0)
    noise_ = Tensor::from_floats(cfg_.augment_noise, {cfg_.augment.noise_count, mc.in_mels, mc.in_frames})
                 .to(device, stream);
  if (cfg_.mixup_alpha > 0.f) {  // mixup's outputs: once here, nothing per step
    mix_x_ = make({B, mc.in_mels, mc.in_frames, 1}, dtype_, device, stream, Layout::nhwc);
    mix_labels_b_ = make({B}, DType::i32, device, stream);
    mix_lam_ = make({B}, DType::f32, device, stream);
    if (mc.leak_head) mix_leak_ = make({B}, DType::f32, device, stream);
  }
  sums_ = make({kernels::kLossSums}, DType::f32, device, stream);
  // The confusion matrix only with the softmax loss (leak_loss writes it).
  // Speaker sets go without (thousands of classes: C*C counts): the
  // cosine-margin losses, and softmaxproto,
  // whose class head runs leak_loss with counts [kLossCounts] (no matrix).
  counts_ = make({kernels::kLossCounts + (mc.loss == LossType::softmax ? std::int64_t(C) * C : 0)}, DType::i32,
                 device, stream);
  step_loss_ = make({1}, DType::f32, device, stream);
  opt_state_ = make({std::int64_t(sizeof(kernels::AdamWState))}, DType::u8, device, stream);
  opt_scratch_ = make({std::int64_t(kernels::adamw_scratch_bytes())}, DType::u8, device, stream);
  kernels::AdamWState s0;
  s0.loss_scale = cfg_.precision == Precision::fp16 ? cfg_.initial_loss_scale : 1.f;
  set_optimizer_state(s0, stream);
}

TrainStep::~TrainStep() {
  if (graph_exec_) MF_CUDA_CHECK_PRINT(cudaGraphExecDestroy(graph_exec_));
  if (graph_) MF_CUDA_CHECK_PRINT(cudaGraphDestroy(graph_));
}

kernels::AdamWState TrainStep::optimizer_state(cudaStream_t stream) const {
  kernels::AdamWState s;
  Tensor h = device_.is_cuda() ? opt_state_.to(Device::cpu(), stream) : opt_state_;
  std::memcpy(&s, h.raw(), sizeof(s));
  return s;
}

void TrainStep::set_optimizer_state(const kernels::AdamWState& s, cudaStream_t stream) {
  Tensor h = Tensor::empty({std::int64_t(sizeof(s))}, DType::u8);
  std::memcpy(h.raw(), &s, sizeof(s));
  opt_state_.copy_from(h, stream);
  if (device_.is_cuda()) MF_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void TrainStep::load_state(const Tensor& master, const Tensor& m, const Tensor& v, const kernels::AdamWState& s,
                           cudaStream_t stream) {
  params_->master().copy_from(master, stream);
  params_->m().copy_from(m, stream);
  params_->v().copy_from(v, stream);
  params_->refresh_work(stream);
  set_optimizer_state(s, stream);
}

void TrainStep::micro_batch(int j, cudaStream_t stream) {
  const ModelConfig& mc = cfg_.model;
  ParamBuffer& pb = *params_;
  const std::int64_t B = cfg_.micro_batch;
  Tensor& work = pb.work();
  const bool parallel = cfg_.world_size > 1 && cfg_.reduce_in_order;  // the ordered reduction
  // The step's micro-batch this is (TrainConfig::world_rank): its draws follow it.
  const std::int64_t m = std::int64_t(j) * cfg_.world_size + cfg_.world_rank;
  Tensor& g = j == 0 && !parallel ? pb.grad() : grad_scratch_;
  auto* st = static_cast<kernels::AdamWState*>(opt_state_.raw());
  Tensor x = in_x_.slice(j * B, (j + 1) * B);
  const Tensor labels = in_labels_.slice(j * B, (j + 1) * B);
  Tensor leak = in_leak_.slice(j * B, (j + 1) * B);
  const std::uint64_t augment_seed = splitmix64_finalize(cfg_.seed ^ 0x6175676d656e74ull);  // "augment"
  const bool replay_stats = cfg_.world_size > 1 && !stat_ranges_.empty();
  if (replay_stats) hold_running_stats(stream);
  if (cfg_.augment.any()) {  // training batches only: forward_eval never comes here
    Phase ph(timer_, "augment", stream);
    kernels::AugmentArgs ad = cfg_.augment;
    ad.batch = B;
    ad.mels = mc.in_mels;
    ad.frames = mc.in_frames;
    ad.seed = augment_seed;  // not dropout's draws
    ad.stream = std::uint32_t(m);
    ad.first_sample = m * B;
    ops::augment(x, &st->iteration, ad, ad.noise_count ? &noise_ : nullptr, stream);
  }
  const bool mix = cfg_.mixup_alpha > 0.f;
  if (mix) {  // after the augmentation; the step then reads the mixed batch and soft targets
    Phase ph(timer_, "mixup", stream);
    kernels::MixupArgs md;
    md.batch = B;
    md.elems = mc.in_mels * mc.in_frames;
    md.alpha = cfg_.mixup_alpha;
    md.seed = splitmix64_finalize(augment_seed);  // not augment's draws
    md.stream = std::uint32_t(m);
    md.first_sample = m * B;
    ops::mixup(x, labels, &st->iteration, md, mix_x_, mix_labels_b_, mix_lam_, mc.leak_head ? &leak : nullptr,
               mc.leak_head ? &mix_leak_ : nullptr, stream);
    x = mix_x_;
    if (mc.leak_head) leak = mix_leak_;
  }

  if (mc.input_norm) {  // in place: x is the step's own buffer (the input slice or mixup's output)
    Phase ph(timer_, "input_norm", stream);
    ops::instance_norm(x, x, stream);
  }

  // Forward: the trunk, then the embedding layer when there is one.
  const DropoutContext drop{cfg_.seed, std::uint32_t(m), &st->iteration};
  const Tensor* features = nullptr;
  if (stack_) {
    Phase ph(timer_, "fwd.layers", stream);
    features = &stack_->forward(pb, x, drop, stream);
  } else {
    features = &leakcnn_forward(x, drop, stream);
  }
  if (mc.embedding > 0) {
    Phase ph(timer_, "fwd.embedding", stream);
    ops::dense_forward(*features, pb.view(work, "embedding.weight"), pb.view(work, "embedding.bias"), false, emb_,
                       stream);
  }
  const Tensor& emb = mc.embedding > 0 ? emb_ : *features;
  Tensor& dtrunk = stack_ ? stack_->dfeatures() : dfc_out_;  // the trunk's output gradient
  Tensor& demb = mc.embedding > 0 ? demb_ : dtrunk;

  // The loss and the heads' backward, down to demb.
  loss_and_heads(emb, labels, leak, g, demb, mix, stream);
  for (const ParamInfo& p : pb.params())
    if (p.head) gradients_final(p.name, stream);

  // Backward.
  if (mc.embedding > 0) {
    Phase ph(timer_, "bwd.embedding", stream);
    Tensor gw = pb.view(g, "embedding.weight"), gb = pb.view(g, "embedding.bias");
    ops::dense_backward(*features, pb.view(work, "embedding.weight"), emb_, demb_, false, gw, gb, &dtrunk, stream);
  }
  gradients_final("embedding", stream);
  if (stack_) {
    Phase ph(timer_, "bwd.layers", stream);
    stack_->backward(pb, x, g, drop, stream, [&](std::string_view layer) { gradients_final(layer, stream); });
  } else {
    leakcnn_backward(x, g, drop, stream);
  }
  if (replay_stats) replay_running_stats(stream);
  if (parallel) {
    combine_gathered(j, stream);
  } else if (j > 0) {
    Phase ph(timer_, "accumulate", stream);
    ops::accumulate(grad_scratch_, pb.grad(), stream);
  }
}

// The running statistics' values (stat_ranges_, in order) from the master
// buffer, and back; on a GPU through host memory (a few hundred floats).
std::vector<float> TrainStep::read_running_stats(cudaStream_t stream) const {
  const Tensor& master = params_->master();
  std::vector<float> out;
  for (const auto& [off, n] : stat_ranges_) {
    const Tensor part = master.slice(off, off + n);
    const Tensor host = part.is_cuda() ? part.to(Device::cpu(), stream) : part;  // complete when it returns
    out.insert(out.end(), host.data<float>(), host.data<float>() + n);
  }
  return out;
}

void TrainStep::write_running_stats(std::span<const float> values, cudaStream_t stream) {
  Tensor& master = params_->master();
  std::size_t i = 0;
  for (const auto& [off, n] : stat_ranges_) {
    Tensor part = master.slice(off, off + n);
    part.copy_from(Tensor::from_floats(values.subspan(i, std::size_t(n)), {n}), stream);  // staged before it returns
    i += std::size_t(n);
  }
}

void TrainStep::hold_running_stats(cudaStream_t stream) {
  held_stats_ = read_running_stats(stream);
  write_running_stats(std::vector<float>(held_stats_.size(), 0.f), stream);
}

void TrainStep::replay_running_stats(cudaStream_t stream) {
  // This micro-batch's terms (momentum x its batch statistics), every rank's.
  const std::vector<float> mine = read_running_stats(stream);
  const auto len = std::int64_t(mine.size());
  Tensor all = Tensor::empty({len * cfg_.world_size}, DType::f32);
  cfg_.gather(Tensor::from_floats(mine, {len}), all, stream);
  // The forward's update, r = momentum * s + (1 - momentum) * r (each product
  // rounded, then the sum: the CPU twin and the CUDA kernel alike), rank after
  // rank: its first product is the gathered term itself.
  const float keep = 1.f - kBatchNormMomentum;
  const float* terms = all.data<float>();
  std::vector<float> r = held_stats_;
  for (std::size_t i = 0; i < r.size(); ++i)
    for (int k = 0; k < cfg_.world_size; ++k) r[i] = terms[std::size_t(k) * mine.size() + i] + keep * r[i];
  write_running_stats(r, stream);
}

void TrainStep::combine_gathered(int j, cudaStream_t stream) {
  const std::int64_t n = params_->size();
  {
    Phase ph(timer_, "gather", stream);
    cfg_.gather(grad_scratch_, gathered_, stream);
  }
  Phase ph(timer_, "accumulate", stream);
  Tensor& grad = params_->grad();
  for (int r = 0; r < cfg_.world_size; ++r) {
    // The step's micro-batch j * world_size + r: the first is the step's
    // gradient as it stands (one process's backward writes it there), the
    // others are added to it.
    const Tensor row = gathered_.slice(r * n, (r + 1) * n);
    if (j == 0 && r == 0) {
      grad.copy_from(row, stream);
    } else {
      ops::accumulate(row, grad, stream);
    }
  }
}

void TrainStep::loss_and_heads(const Tensor& emb, const Tensor& labels, const Tensor& leak, Tensor& g, Tensor& demb,
                               bool mix, cudaStream_t stream) {
  const ModelConfig& mc = cfg_.model;
  ParamBuffer& pb = *params_;
  Tensor& work = pb.work();
  auto* st = static_cast<kernels::AdamWState*>(opt_state_.raw());
  const std::int64_t B = cfg_.micro_batch;
  // The step's micro-batches over all processes: each one's loss is a share of the step's.
  const float grad_scale = 1.f / float(cfg_.accum_steps * cfg_.world_size);
  Phase ph(timer_, "loss", stream);
  if (mc.loss == LossType::am_softmax || mc.loss == LossType::aam_softmax) {
    kernels::MarginSoftmaxArgs d;
    d.batch = B;
    d.dim = int(mc.features());
    d.classes = mc.classes;
    d.type = mc.loss == LossType::am_softmax ? kernels::MarginType::am : kernels::MarginType::aam;
    d.scale = cfg_.margin_scale;
    d.margin = cfg_.margin;
    d.grad_scale = grad_scale;
    Tensor gw = pb.view(g, "loss.weight");
    Tensor* scratch = margin_scratch_.defined() && margin_scratch_.numel() > 0 ? &margin_scratch_ : nullptr;
    ops::margin_softmax_loss(emb, pb.view(work, "loss.weight"), labels, d, demb, gw, sums_, counts_, &st->loss_scale,
                             &step_loss_, scratch, stream);
    return;
  }
  // The prototypical losses' (w, b): f32, from the master copy (like batch
  // norm's statistics, never in the working dtype).
  const ParamInfo* pw = loss_is_prototypical(mc.loss) ? &pb.info("loss.w") : nullptr;
  kernels::AngleProtoArgs pd;
  if (pw) {
    pd.per_class = cfg_.per_class;
    pd.classes = int(B / cfg_.per_class);
    pd.dim = int(mc.features());
    pd.grad_scale = grad_scale;
  }
  Tensor* pscratch = proto_scratch_.defined() && proto_scratch_.numel() > 0 ? &proto_scratch_ : nullptr;
  if (mc.loss == LossType::angleproto) {
    Tensor gwb = g.slice(pw->offset, pw->offset + 2);
    ops::angleproto_loss(emb, pb.master().slice(pw->offset, pw->offset + 2), pd, demb, gwb, sums_, counts_,
                         &st->loss_scale, &step_loss_, pscratch, stream);
    return;
  }
  // The class head (softmax, softmaxproto): logits, the fused loss, the heads' backward.
  Tensor hw = pb.head_weight(work), hb = pb.head_bias(work);
  ops::dense_forward(emb, hw, hb, false, logits_, stream);
  kernels::ClassLeakLossArgs ld;
  ld.batch = B;
  ld.classes = mc.classes;
  ld.label_smoothing = cfg_.label_smoothing;
  ld.class_loss_weight = cfg_.class_loss_weight;
  ld.leak_loss_weight = cfg_.leak_loss_weight;
  ld.grad_scale = grad_scale;
  ld.leak_head = mc.leak_head;  // without it the leak targets are not read
  const Tensor* class_weight = class_weight_.defined() && class_weight_.numel() ? &class_weight_ : nullptr;
  ops::class_leak_loss(logits_, labels, ld, dlogits_, sums_, counts_, mc.leak_head ? &leak : nullptr, class_weight,
                       mix ? &mix_labels_b_ : nullptr, mix ? &mix_lam_ : nullptr, &st->loss_scale, &step_loss_, stream);
  Tensor ghw = pb.head_weight(g), ghb = pb.head_bias(g);
  ops::dense_backward(emb, hw, logits_, dlogits_, false, ghw, ghb, &demb, stream);
  if (mc.loss == LossType::softmaxproto) {  // plus angleproto on the same embeddings (its own metric sums)
    Tensor gwb = g.slice(pw->offset, pw->offset + 2);
    ops::angleproto_loss(emb, pb.master().slice(pw->offset, pw->offset + 2), pd, demb_proto_, gwb, proto_sums_,
                         proto_counts_, &st->loss_scale, nullptr, pscratch, stream);
    ops::accumulate(demb_proto_, demb, stream);
  }
}

const Tensor& TrainStep::leakcnn_forward(const Tensor& x, const DropoutContext& drop, cudaStream_t stream) {
  const ModelConfig& mc = cfg_.model;
  ParamBuffer& pb = *params_;
  Tensor& work = pb.work();
  const std::int64_t B = cfg_.micro_batch;
  for (int i = 0; i < mc.blocks(); ++i) {
    const std::string blk = fmt::format("blocks.{}.conv.", i);
    Phase ph(timer_, fmt::format("fwd.block{}", i), stream);
    ops::conv_relu_pool_forward(i == 0 ? x : block_out_[std::size_t(i - 1)], pb.view(work, blk + "weight"),
                                pb.view(work, blk + "bias"), mc.pools[std::size_t(i)], block_out_[std::size_t(i)],
                                &block_pool_code_[std::size_t(i)], stream);
  }
  const Tensor flat = block_out_.back().reshape({B, mc.flat_features()});
  {
    Phase ph(timer_, "fwd.fc", stream);
    ops::dense_forward(flat, pb.view(work, "fc.weight"), pb.view(work, "fc.bias"), true, fc_out_, stream);
  }
  if (mc.dropout <= 0.f) return fc_out_;
  ops::dropout_forward(fc_out_, drop.counter, mc.dropout, drop.seed, drop.stream, fc_dropped_, stream);
  return fc_dropped_;
}

void TrainStep::leakcnn_backward(const Tensor& x, Tensor& g, const DropoutContext& drop, cudaStream_t stream) {
  const ModelConfig& mc = cfg_.model;
  ParamBuffer& pb = *params_;
  Tensor& work = pb.work();
  const std::int64_t B = cfg_.micro_batch;
  const int L = mc.blocks();
  Tensor* dfc = &dfc_out_;
  if (mc.dropout > 0.f) {
    ops::dropout_backward(dfc_out_, drop.counter, mc.dropout, drop.seed, drop.stream, dfc_dropped_, stream);
    dfc = &dfc_dropped_;
  }
  const Tensor flat = block_out_.back().reshape({B, mc.flat_features()});
  Tensor dflat = dblock_out_.back().reshape({B, mc.flat_features()});
  Tensor gfw = pb.view(g, "fc.weight"), gfb = pb.view(g, "fc.bias");
  {
    Phase ph(timer_, "bwd.fc", stream);
    ops::dense_backward(flat, pb.view(work, "fc.weight"), fc_out_, *dfc, true, gfw, gfb, &dflat, stream);
  }
  gradients_final("fc", stream);
  for (int i = L - 1; i >= 0; --i) {
    const std::string blk = fmt::format("blocks.{}.conv.", i);
    Tensor gw = pb.view(g, blk + "weight"), gb = pb.view(g, blk + "bias");
    Phase ph(timer_, fmt::format("bwd.block{}", i), stream);
    ops::conv_relu_pool_backward(i == 0 ? x : block_out_[std::size_t(i - 1)], pb.view(work, blk + "weight"),
                                 dblock_out_[std::size_t(i)], block_pool_code_[std::size_t(i)], mc.pools[std::size_t(i)],
                                 gw, gb, i == 0 ? nullptr : &dblock_out_[std::size_t(i - 1)], stream);
    gradients_final(blk, stream);  // "blocks.<i>.conv.": the block's parameters
  }
}

void TrainStep::start_sum(std::int64_t begin, std::int64_t end, cudaStream_t stream) {
  Tensor bucket = params_->grad().slice(begin, end);
  cfg_.allreduce_start(bucket, stream);
}

void TrainStep::gradients_final(std::string_view prefix, cudaStream_t stream) {
  // With several micro-batches a step, the last one's gradient is added to
  // the others only after its backward: every bucket then starts in run_step.
  if (!buckets_ || cfg_.accum_steps > 1) return;
  buckets_->ready(prefix, [&](std::int64_t b, std::int64_t e) { start_sum(b, e, stream); });
}

void TrainStep::run_step(cudaStream_t stream) {
  if (buckets_) buckets_->begin();
  for (int j = 0; j < cfg_.accum_steps; ++j) micro_batch(j, stream);
  ParamBuffer& pb = *params_;
  if (buckets_) {  // dist.reduce = fast: the buckets not started during the backward, then the wait
    Phase ph(timer_, "allreduce", stream);
    buckets_->finish([&](std::int64_t b, std::int64_t e) { start_sum(b, e, stream); });
    cfg_.allreduce_finish(stream);
  }
  Tensor* work = dtype_ == DType::f32 ? nullptr : &pb.work();
  Phase ph(timer_, "optimizer", stream);
  ops::adamw_step(pb.master(), pb.grad(), pb.m(), pb.v(), opt_state_, cfg_.optim, pb.decay_end(), work,
                  frozen_params_.empty() ? nullptr : &frozen_, opt_scratch_, stream);
}

void TrainStep::step(const Tensor& x, const Tensor& labels, const Tensor& leak, cudaStream_t stream) {
  check_shape(x, in_x_.shape(), "TrainStep::step", "x");
  check_shape(labels, in_labels_.shape(), "TrainStep::step", "labels");
  check_shape(leak, in_leak_.shape(), "TrainStep::step", "leak");
  check_same_device({&x, &labels, &leak, &in_x_}, "TrainStep::step");
  if (x.dtype() == dtype_) in_x_.copy_from(x, stream);
  else ops::cast(x, in_x_, stream);
  in_labels_.copy_from(labels, stream);
  in_leak_.copy_from(leak, stream);
  step(stream);
}

void TrainStep::step(cudaStream_t stream) {
  // Not with data parallelism: the exchanges wait for the other ranks on the host.
  const bool use_graph = device_.is_cuda() && cfg_.cuda_graph && stream != nullptr && cfg_.world_size == 1;
  if (!use_graph || eager_steps_ == 0) {
    // The first GPU step runs eagerly: it creates the cuBLASLt plans and
    // workspace, which must not happen inside a capture.
    run_step(stream);
    ++eager_steps_;
    return;
  }
  if (!graph_exec_) {
    EventTimer* const timer = timer_;  // no timing events inside the graph
    timer_ = nullptr;
    MF_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      run_step(stream);
    } catch (...) {
      cudaGraph_t g = nullptr;
      cudaStreamEndCapture(stream, &g);
      if (g) cudaGraphDestroy(g);
      timer_ = timer;
      throw;
    }
    timer_ = timer;
    MF_CUDA_CHECK(cudaStreamEndCapture(stream, &graph_));
    MF_CUDA_CHECK(cudaGraphInstantiate(&graph_exec_, graph_, 0));
  }
  MF_CUDA_CHECK(cudaGraphLaunch(graph_exec_, stream));
}

EvalOutput TrainStep::forward_eval(const Tensor& xin, cudaStream_t stream) {
  const ModelConfig& mc = cfg_.model;
  MF_CHECK(xin.ndim() == 4 && xin.size(1) == mc.in_mels && mc.takes_frames(xin.size(2)) && xin.size(3) == 1,
           "forward_eval: x must be [B, {}, {}, 1] (nhwc; other frame counts only for a stack ending in global or "
           "attentive pooling), found {}", mc.in_mels, mc.in_frames, xin.str());
  const std::int64_t B = xin.size(0);
  ParamBuffer& pb = *params_;
  Tensor& work = pb.work();
  Tensor x = xin;
  if (xin.dtype() != dtype_ || mc.input_norm) {  // never normalise the caller's tensor in place
    x = Tensor::empty(xin.shape(), dtype_, device_, Layout::nhwc, stream);
    if (xin.dtype() != dtype_) ops::cast(xin, x, stream);
    else x.copy_from(xin, stream);
  }
  if (mc.input_norm) ops::instance_norm(x, x, stream);
  Tensor h;
  if (stack_) {
    h = stack_->forward_eval(pb, x, stream);
  } else {
    Tensor a = x;
    for (int i = 0; i < mc.blocks(); ++i) {
      const std::string blk = fmt::format("blocks.{}.conv.", i);
      Tensor y = Tensor::empty({B, mc.out_h(i), mc.out_w(i), mc.channels[std::size_t(i)]}, dtype_, device_,
                               Layout::nhwc, stream);
      ops::conv_relu_pool_forward(a, pb.view(work, blk + "weight"), pb.view(work, blk + "bias"),
                                  mc.pools[std::size_t(i)], y, nullptr, stream);
      a = y;
    }
    h = Tensor::empty({B, mc.dense}, dtype_, device_, Layout::plain, stream);
    ops::dense_forward(a.reshape({B, mc.flat_features()}), pb.view(work, "fc.weight"), pb.view(work, "fc.bias"),
                       true, h, stream);
  }
  EvalOutput out;
  out.embedding = h;
  if (mc.embedding > 0) {
    out.embedding = Tensor::empty({B, mc.embedding}, dtype_, device_, Layout::plain, stream);
    ops::dense_forward(h, pb.view(work, "embedding.weight"), pb.view(work, "embedding.bias"), false, out.embedding,
                       stream);
  }
  if (!mc.class_head()) return out;  // a metric loss: embeddings only
  Tensor logits = Tensor::empty({B, mc.head_outputs()}, dtype_, device_, Layout::plain, stream);
  ops::dense_forward(out.embedding, pb.head_weight(work), pb.head_bias(work), false, logits, stream);
  out.probs = Tensor::empty({B, mc.classes}, DType::f32, device_, Layout::plain, stream);
  if (mc.leak_head) out.leak_prob = Tensor::empty({B}, DType::f32, device_, Layout::plain, stream);
  ops::head_probs(logits, out.probs, mc.leak_head ? &out.leak_prob : nullptr, stream);
  return out;
}

StepMetrics TrainStep::read_metrics(cudaStream_t stream, bool reset) {
  // Device-to-host copies on `stream` (synchronizing it once the copies are queued).
  Tensor sh = device_.is_cuda() ? sums_.to(Device::cpu(), stream) : sums_;
  const float* s = sh.data<float>();
  StepMetrics m;
  m.has_leak = cfg_.model.leak_head;
  m.micro_batches = std::int64_t(s[3]);
  const double n = m.micro_batches > 0 ? double(m.micro_batches) : 1.0;
  m.class_loss = s[0] / n;
  m.leak_loss = s[1] / n;
  m.loss = s[2] / n;
  Tensor ch = device_.is_cuda() ? counts_.to(Device::cpu(), stream) : counts_;
  const auto* ci = ch.data<std::int32_t>();
  m.samples = ci[0];
  m.class_correct = ci[1];
  m.leak_correct = ci[2];
  const int C = cfg_.model.classes;
  if (counts_.numel() > kernels::kLossCounts)
    m.confusion.assign(ci + kernels::kLossCounts, ci + kernels::kLossCounts + C * C);
  if (proto_sums_.defined() && proto_sums_.numel()) {  // softmaxproto: the total includes angleproto's loss
    Tensor ph = device_.is_cuda() ? proto_sums_.to(Device::cpu(), stream) : proto_sums_;
    m.proto_loss = ph.data<float>()[2] / n;
    m.loss += m.proto_loss;
    if (reset) proto_sums_.fill_bytes(0, stream);
  }
  const kernels::AdamWState st = optimizer_state(stream);
  m.loss_scale = st.loss_scale;
  m.grad_norm = st.grad_norm;
  m.lr = st.lr;
  m.iteration = st.iteration;
  m.step = st.step;
  m.skipped_steps = st.skipped_steps;
  m.last_found_inf = st.found_inf != 0;
  if (reset) {
    sums_.fill_bytes(0, stream);
    counts_.fill_bytes(0, stream);
  }
  return m;
}

}  // namespace mf::model
