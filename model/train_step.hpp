// TrainStep: the training step of a model (LeakCNN, or a CNN stack run by
// model/cnn_stack.hpp) on one device (the CPU backend or one
// GPU) with fixed shapes: forward, fused loss, backward and the fused AdamW
// update, over k accumulated micro-batches, with no host synchronization; on a
// GPU the whole step is captured once as a CUDA graph and replayed.
//
// The trainer's view:
//   TrainConfig cfg;  cfg.model = ...; cfg.precision = Precision::bf16;
//   cfg.micro_batch = 1024; cfg.accum_steps = 1; cfg.optim.lr = 1e-3; ...
//   TrainStep ts(cfg, Device::cuda(0), stream);     // allocates everything, inits params from cfg.seed
//   ts.step(x, labels, leak, stream);               // x [k*B, mels, frames, 1] nhwc (any float
//                                                   // dtype; cast in), labels i32 [k*B], leak f32 [k*B]
//   // or write the batch straight into ts.input_x()/input_labels()/input_leak() and ts.step(stream)
//   StepMetrics m = ts.read_metrics(stream);        // one sync per log interval; resets the sums
//   EvalOutput e = ts.forward_eval(xv, stream);     // class probabilities [B, C], leak probability [B]
//                                                   // (none when !cfg.model.leak_head: the leak input
//                                                   // is then allocated and filled but never read)
//   checkpoints: ts.params().master()/m()/v() (flat f32, named views via params().view) +
//                ts.optimizer_state() (AdamWState: step, iteration, loss scale, ...) + cfg.seed
//                (the dropout RNG is a hash of seed and iteration: no other RNG state);
//                restore with ts.load_state(master, m, v, state).
// Determinism: the same config, seed and batches give bit-identical weights
// (CPU backend: for any thread count; GPU: on the same GPU and library versions).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <span>
#include <string_view>
#include <vector>

#include "engine/tensor.hpp"
#include "engine/timer.hpp"
#include "kernels/adamw.hpp"
#include "kernels/augment.hpp"
#include "model/model_config.hpp"
#include "model/cnn_stack.hpp"
#include "model/param_buffer.hpp"

namespace mf::model {

class GradientBuckets;

struct TrainConfig {
  ModelConfig model;
  Precision precision = Precision::fp32;
  std::int64_t micro_batch = 64;  // B, samples per micro-batch
  int accum_steps = 1;            // k micro-batches per optimizer step
  kernels::AdamWConfig optim;     // dynamic_loss_scale is forced on for fp16, off otherwise
  float initial_loss_scale = 65536.f;  // fp16 only (2^16)
  float label_smoothing = 0.f;
  std::vector<float> class_weights;    // empty: unweighted
  float class_loss_weight = 1.f;
  float leak_loss_weight = 1.f;
  bool cuda_graph = true;         // capture the step once and replay it (GPU only)
  std::uint64_t seed = 0;         // parameter init, dropout and augmentation
  // Augmentation of each training micro-batch as it enters the step
  // (kernels/augment.hpp; batch, mels, frames, seed, stream and first_sample
  // are set by the step). Noise segments: [n, mels, frames] f32, host memory
  // (copied to the device once); empty with augment.noise_count = 0.
  kernels::AugmentArgs augment;
  std::vector<float> augment_noise;
  // mixup of each training micro-batch after the augmentation
  // (kernels/mixup.hpp): Beta(alpha, alpha) weights, soft class and leak
  // targets in the loss; 0 = off.
  float mixup_alpha = 0;
  // The metric losses (model.loss): AM/AAM-softmax's margin m and scale s
  // (kernels/margin_softmax.hpp); the prototypical losses' segments per class
  // in each micro-batch (M consecutive rows per class: data.per_class).
  float margin = 0.2f;
  float margin_scale = 30.f;  // s, not the fp16 loss scale (initial_loss_scale)
  int per_class = 0;
  // train.freeze: parameter names or prefixes (name_matches) that get no
  // update (no AdamW step, no weight decay, moments kept at zero) and whose
  // gradients leave the norm and the clip; empty: everything trains.
  // Batch norm's running statistics are not trained by AdamW: they follow
  // the batches whatever this says (PyTorch's requires_grad = False alike).
  std::vector<std::string> freeze;
  // Data parallelism (train/, dist/): this process is rank `world_rank` of
  // `world_size`, and runs accum_steps micro-batches of every step. Its local
  // micro-batch j is the step's micro-batch m = j * world_size + world_rank:
  // the augmentation, mixup and dropout draws follow m, as in one process
  // running all world_size * accum_steps micro-batches. With world_size > 1,
  // `gather` (required) writes every rank's values of `mine` (f32) into
  // `all` (world_size x as many, on mine's device), rank after rank, complete
  // in `stream`'s order when it returns (dist::Collectives::allgather).
  // With `reduce_in_order` (dist.reduce = ordered) the step
  // gathers every micro-batch's gradient and adds them in m's order, the
  // order one process accumulates in, so every rank holds that process's
  // bits; otherwise (fast) each rank adds up its own micro-batches and the
  // library sums that over the ranks, in its own order, bucket by bucket
  // (model/gradient_buckets.hpp: at most bucket_elems values each):
  // `allreduce_start` (required then) starts a bucket's sum, from the
  // backward as soon as the bucket's gradients are final (with one
  // micro-batch per step; with several, after the last one's accumulation),
  // and `allreduce_finish` waits for all of them before the optimizer
  // (dist::Collectives::allreduce_sum_start/finish). Batch norm's running statistics are replayed in m's order either
  // way (each micro-batch's update gathered, then applied in turn), so every
  // rank keeps one process's statistics. On a GPU the step then runs
  // eagerly (no graph capture: the exchanges wait for the other ranks).
  int world_rank = 0, world_size = 1;
  bool reduce_in_order = true;
  std::function<void(const Tensor& mine, Tensor& all, cudaStream_t stream)> gather;
  std::function<void(Tensor& bucket, cudaStream_t stream)> allreduce_start;
  std::function<void(cudaStream_t stream)> allreduce_finish;
  std::int64_t bucket_elems = std::int64_t(1) << 20;
};

struct StepMetrics {
  bool has_leak = true;            // the model has the leak head; else leak_loss and leak_correct are 0, not metrics
  std::int64_t micro_batches = 0;  // since the last reset
  double class_loss = 0, leak_loss = 0, loss = 0;  // means over those micro-batches
  double proto_loss = 0;  // softmaxproto: the angular prototypical part (included in loss)
  std::int64_t samples = 0, class_correct = 0, leak_correct = 0;
  std::vector<std::int64_t> confusion;  // [true C][predicted C]
  // Optimizer state now (not reset): last step's values.
  float loss_scale = 1.f, grad_norm = 0.f, lr = 0.f;
  std::int64_t iteration = 0, step = 0, skipped_steps = 0;
  bool last_found_inf = false;
};

struct EvalOutput {
  Tensor embedding;  // [B, E] in the working dtype: the features the heads / metric loss read
  Tensor probs;      // f32 [B, C]; undefined with a metric loss (no class head)
  Tensor leak_prob;  // f32 [B]; undefined when the model has no leak head
};

class TrainStep {
 public:
  TrainStep(const TrainConfig& cfg, Device device, cudaStream_t stream = nullptr);
  ~TrainStep();
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  const TrainConfig& config() const { return cfg_; }
  Device device() const { return device_; }
  DType dtype() const { return dtype_; }
  std::int64_t batch() const { return cfg_.micro_batch * cfg_.accum_steps; }  // samples per step

  // One optimizer step on k*B samples. Copies (casting x when its dtype differs)
  // into the step's own input buffers, then runs/replays the step.
  void step(const Tensor& x, const Tensor& labels, const Tensor& leak, cudaStream_t stream);
  // One optimizer step on what input_x()/input_labels()/input_leak() hold.
  void step(cudaStream_t stream);
  Tensor& input_x() { return in_x_; }            // [k*B, mels, frames, 1] nhwc, dtype()
  Tensor& input_labels() { return in_labels_; }  // i32 [k*B]
  Tensor& input_leak() { return in_leak_; }      // f32 [k*B]

  // Inference on any batch size with the current working weights (no dropout).
  EvalOutput forward_eval(const Tensor& x, cudaStream_t stream);

  // Reads the device-held metrics (one synchronization) and, with reset, zeroes
  // the sums and counts for the next interval (the optimizer state is kept).
  StepMetrics read_metrics(cudaStream_t stream, bool reset = true);

  ParamBuffer& params() { return *params_; }
  const ParamBuffer& params() const { return *params_; }
  // The parameters cfg.freeze names (layout order; empty: none).
  const std::vector<const ParamInfo*>& frozen_params() const { return frozen_params_; }
  // The device-held optimizer state (synchronous read / write).
  kernels::AdamWState optimizer_state(cudaStream_t stream = nullptr) const;
  void set_optimizer_state(const kernels::AdamWState& s, cudaStream_t stream = nullptr);
  // Restores a checkpoint: flat f32 master, m, v (the layout's size, any
  // device) and the optimizer state; refreshes the working copy. Synchronous.
  void load_state(const Tensor& master, const Tensor& m, const Tensor& v, const kernels::AdamWState& s,
                  cudaStream_t stream = nullptr);

  bool graph_captured() const { return graph_exec_ != nullptr; }
  // Per-phase timing (benchmarks, profiling): with a timer set, eager steps
  // record, per micro-batch and in this order: "augment", "mixup",
  // "input_norm" (each only when on); the trunk's forward ("fwd.block<i>" and
  // "fwd.fc" for LeakCNN, "fwd.layers" for a CNN stack); "fwd.embedding"
  // (model.embedding > 0); "loss" (the heads' forward, the loss and the heads'
  // backward); "bwd.embedding"; the trunk's backward ("bwd.fc", "bwd.block<i>"
  // or "bwd.layers"); "accumulate" (micro-batches after the first); then once
  // per step "optimizer". A null timer records nothing; graph replays are not
  // split into phases.
  void set_phase_timer(EventTimer* t) { timer_ = t; }

 private:
  void run_step(cudaStream_t stream);  // the captured body
  // dist.reduce = fast: the parameters `prefix` names have their step's
  // gradient (GradientBuckets::ready); starts the buckets that are complete.
  void gradients_final(std::string_view prefix, cudaStream_t stream);
  void start_sum(std::int64_t begin, std::int64_t end, cudaStream_t stream);
  void micro_batch(int j, cudaStream_t stream);
  // world_size > 1: every rank's gradient of local micro-batch j, added into
  // the step's gradient in the order of the step's micro-batches.
  void combine_gathered(int j, cudaStream_t stream);
  // world_size > 1 with batch norm: before a micro-batch, keeps the running
  // statistics and zeroes them (the forward then leaves momentum x the batch
  // statistics there, exactly the term its update adds); after it, gathers
  // every rank's terms and applies them to the kept statistics in the order
  // of the step's micro-batches, with the forward's own float expression.
  void hold_running_stats(cudaStream_t stream);
  void replay_running_stats(cudaStream_t stream);
  std::vector<float> read_running_stats(cudaStream_t stream) const;
  void write_running_stats(std::span<const float> values, cudaStream_t stream);
  // The loss of the embeddings `emb` [B, E] (loss.type) and the heads'
  // backward: parameter gradients into g, emb's gradient into demb.
  void loss_and_heads(const Tensor& emb, const Tensor& labels, const Tensor& leak, Tensor& g, Tensor& demb, bool mix,
                      cudaStream_t stream);
  // LeakCNN's layers before the heads (conv blocks, fc, dropout): the forward
  // returns the heads' input; the backward runs from dfc_out_ into the
  // gradient buffer g.
  const Tensor& leakcnn_forward(const Tensor& x, const DropoutContext& drop, cudaStream_t stream);
  void leakcnn_backward(const Tensor& x, Tensor& g, const DropoutContext& drop, cudaStream_t stream);

  TrainConfig cfg_;
  Device device_;
  DType dtype_;
  std::unique_ptr<ParamBuffer> params_;
  Tensor grad_scratch_;  // micro-batches after the first (k > 1)
  Tensor gathered_;      // dist.reduce = ordered: every rank's gradient of one micro-batch
  std::unique_ptr<GradientBuckets> buckets_;  // dist.reduce = fast with world_size > 1
  // Batch norm's running statistics in the master buffer (offset, count), and
  // their values held across a micro-batch (data parallelism).
  std::vector<std::pair<std::int64_t, std::int64_t>> stat_ranges_;
  std::vector<float> held_stats_;
  Tensor in_x_, in_labels_, in_leak_;
  std::unique_ptr<CnnStack> stack_;        // model.arch = cnn (else null and the LeakCNN buffers below)
  // LeakCNN's buffers (empty for a CNN stack). Per conv block: its output,
  // its max-pool winner codes and its output's gradient.
  std::vector<Tensor> block_out_, block_pool_code_, dblock_out_;
  // The fc layer's output (after its ReLU) and that after dropout (allocated
  // only with model.dropout > 0), and their gradients.
  Tensor fc_out_, fc_dropped_, dfc_out_, dfc_dropped_;
  Tensor logits_, dlogits_;  // the heads' logits [B, C(+1)] and their gradient
  Tensor emb_, demb_;  // the embedding layer's output and gradient (model.embedding > 0)
  // softmaxproto: angleproto's embedding gradient and its own metric sums
  Tensor demb_proto_, proto_sums_, proto_counts_;
  // The metric losses' CUDA scratch (made once: nothing is allocated in a captured step)
  Tensor margin_scratch_, proto_scratch_;
  Tensor class_weight_;
  Tensor noise_;  // augmentation noise segments, f32 [n, mels, frames] (empty: none)
  // mixup's outputs for the micro-batch (allocated once; empty with mixup off):
  // the mixed input, the partners' labels, the weights, the mixed leak targets.
  Tensor mix_x_, mix_labels_b_, mix_lam_, mix_leak_;
  Tensor sums_, counts_, step_loss_;
  Tensor opt_state_, opt_scratch_;
  // train.freeze: u8 [params size], 1 on every element of a frozen parameter
  // (undefined when nothing is frozen; AdamW then takes no mask).
  Tensor frozen_;
  std::vector<const ParamInfo*> frozen_params_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t graph_exec_ = nullptr;
  int eager_steps_ = 0;
  EventTimer* timer_ = nullptr;
};

}  // namespace mf::model
