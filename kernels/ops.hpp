// The dispatch point: one function per op taking Tensors. It checks shapes,
// dtypes and devices, then runs the CPU twin or the CUDA kernel according to
// the tensors' device. model/ calls kernels only through here.
//
// Every op takes its arguments in one order:
//   1. inputs: tensors (a tensor the op reads and updates in place, such as dy
//      masked by a ReLU, running statistics or AdamW's moments, is an input),
//      then settings (scalars, or the kernel's *Args / *Dims struct);
//   2. outputs (`Tensor&`, overwritten unless the comment says +=);
//   3. optional tensors: `const Tensor*` (inputs) then `Tensor*` (outputs),
//      null when absent, never an undefined Tensor standing for "absent";
//   4. scratch (`Tensor*`, null: allocated per call where the op allows it;
//      adamw_step's is required, `Tensor&`);
//   5. the stream, `cudaStream_t stream = nullptr`, the only default.
// One documented exception: `loss_scale` (`const float*`) and `counter`
// (`const std::int32_t*`) stay raw pointers, in the slot a tensor would take.
// They are single fields of AdamWState (held as a u8 tensor, see adamw.hpp)
// that kernels read on the device when they run (so CUDA graphs see the
// current value); a Tensor cannot view a field at a byte offset of another
// dtype, and adding such a reinterpreting view for two scalars would be the
// one unchecked cast in engine/tensor.hpp.
#pragma once

#include <cuda_runtime_api.h>

#include "engine/tensor.hpp"
#include "kernels/adamw.hpp"
#include "kernels/augment.hpp"
#include "kernels/loss.hpp"
#include "kernels/mixup.hpp"
#include "kernels/angleproto.hpp"
#include "kernels/margin_softmax.hpp"

namespace mf::ops {

// dst = src converted to dst's dtype (same shape, same device).
void cast(const Tensor& src, Tensor& dst, cudaStream_t stream = nullptr);

// Fused conv + bias + ReLU + max pool (kernels/conv_relu_pool.hpp has the
// layouts). x [N,H,W,Cin] nhwc; w [Cout,k,k,Cin]; b [Cout]; y [N,H/p,W/p,Cout];
// code (u8, same shape as y) null when no backward follows.
void conv_relu_pool_forward(const Tensor& x, const Tensor& w, const Tensor& b, int pool, Tensor& y,
                            Tensor* code, cudaStream_t stream = nullptr);
// dx may be null (first layer); dw and db are f32 and overwritten.
void conv_relu_pool_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& code, int pool,
                             Tensor& dw, Tensor& db, Tensor* dx, cudaStream_t stream = nullptr);

// File-level voting (kernels/file_vote.hpp has the rules). class_in [F*L*S, C]
// and leak_in [F*L*S] f32 (probabilities, or logits when `logits`); outputs
// file_probs [F, C] f32, file_class [F] i32, file_leak_prob [F] f32,
// file_leak [F] i32, all on the inputs' device. One launch for all files.
// A model without the leak head: leak_in, file_leak_prob and file_leak all
// null; the class vote is the same.
void file_vote(const Tensor& class_in, std::int64_t files, std::int64_t longs, std::int64_t shorts,
               float threshold, bool logits, Tensor& file_probs, Tensor& file_class, const Tensor* leak_in,
               Tensor* file_leak_prob, Tensor* file_leak, cudaStream_t stream = nullptr);

// ---- training step ops (kernels/dense.hpp, loss.hpp, adamw.hpp, dropout.hpp) ----

// y [M,N] = x [M,K] w[N,K]^T + b[N] (+ReLU). x, w, b, y share dtype and device.
void dense_forward(const Tensor& x, const Tensor& w, const Tensor& b, bool relu, Tensor& y,
                   cudaStream_t stream = nullptr);
// dw [N,K] and db [N] f32 (overwritten); dx [M,K] may be null. With relu, dy is
// overwritten by dy * (y > 0).
void dense_backward(const Tensor& x, const Tensor& w, const Tensor& y, Tensor& dy, bool relu, Tensor& dw,
                    Tensor& db, Tensor* dx, cudaStream_t stream = nullptr);

// The fused loss of the heads (kernels/loss.hpp). logits/dlogits [B, C+1]
// ([B, C] when !opts.leak_head); labels i32 [B]; sums f32 [kLossSums]; counts
// i32 [kLossCounts + C*C] (the confusion matrix counted) or [kLossCounts] (no
// matrix), any C either way; the mode is taken from counts' size
// (opts.confusion is set here). Optional: leak f32 [B] (required with the leak
// head, not read without it); class_weight f32 [C]; labels_b i32 [B] and lam
// f32 [B], mixup's soft class targets (loss.hpp), both given or both null
// (null: the hard labels, bit for bit as before); loss_scale a float in the
// tensors' memory (device pointer on GPU; null: 1); step_loss f32 [1].
void class_leak_loss(const Tensor& logits, const Tensor& labels, const kernels::ClassLeakLossArgs& opts,
                     Tensor& dlogits, Tensor& sums, Tensor& counts, const Tensor* leak, const Tensor* class_weight,
                     const Tensor* labels_b, const Tensor* lam, const float* loss_scale, Tensor* step_loss,
                     cudaStream_t stream = nullptr);
// probs f32 [B, C], leak_prob f32 [B] from logits [B, C+1]; with leak_prob
// null (a model without the leak head) probs from logits [B, C].
void head_probs(const Tensor& logits, Tensor& probs, Tensor* leak_prob, cudaStream_t stream = nullptr);

// The fused AdamW step over flat f32 buffers [n] (kernels/adamw.hpp): master,
// m, v and state (u8 [sizeof(AdamWState)]) are updated in place; work (the
// bf16/f16 working copy, written) may be null (fp32: the master is the working
// copy); frozen (u8 [n], nonzero where the element is frozen: train.freeze)
// may be null (nothing frozen); scratch u8 [adamw_scratch_bytes()], required.
void adamw_step(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, Tensor& state,
                const kernels::AdamWConfig& cfg, std::int64_t decay_end, Tensor* work, const Tensor* frozen,
                Tensor& scratch, cudaStream_t stream = nullptr);
// dst += src, any float dtype (same shape, dtype and device), summed in f32
// and rounded once (for f32: one f32 addition per element). Gradient
// accumulation over micro-batches and the residual blocks' gradient sums.
void accumulate(const Tensor& src, Tensor& dst, cudaStream_t stream = nullptr);

// Dropout with the counter-based mask (kernels/dropout.hpp); counter: an i32 in
// the tensors' memory. backward applies the same mask to dy.
void dropout_forward(const Tensor& x, const std::int32_t* counter, float p, std::uint64_t seed,
                     std::uint32_t stream_id, Tensor& y, cudaStream_t stream = nullptr);
void dropout_backward(const Tensor& dy, const std::int32_t* counter, float p, std::uint64_t seed,
                      std::uint32_t stream_id, Tensor& dx, cudaStream_t stream = nullptr);

// Data augmentation of a micro-batch in place (kernels/augment.hpp: time shift,
// gain, background noise, SpecAugment masks). x [batch, mels, frames] or
// [batch, mels, frames, 1] (the step's nhwc input), f32/bf16/f16, matching d's
// batch, mels and frames; counter: an i32 in x's memory (read only when
// d.any(), may be null otherwise); noise f32 [noise_count, mels, frames] (or
// any shape holding at least that many values) on x's device, null when
// noise_count is 0. Does nothing when d.any() is false.
void augment(Tensor& x, const std::int32_t* counter, const kernels::AugmentArgs& d, const Tensor* noise,
             cudaStream_t stream = nullptr);

// mixup of a micro-batch (kernels/mixup.hpp), out of place: x [batch, ...]
// (f32/bf16/f16, d.elems values per sample) -> x_out (same shape, dtype and
// device, another buffer); labels i32 [batch] -> labels_b i32 [batch] (the
// partners' labels) and lam f32 [batch]; leak f32 [batch] -> leak_out f32
// [batch] (both null without the leak head); counter: an i32 in x's memory.
// d.batch must match x; d.alpha > 0 and finite.
void mixup(const Tensor& x, const Tensor& labels, const std::int32_t* counter, const kernels::MixupArgs& d,
           Tensor& x_out, Tensor& labels_b, Tensor& lam, const Tensor* leak, Tensor* leak_out,
           cudaStream_t stream = nullptr);

// ---- the CNN stack's ops (model/cnn_stack.hpp): kernels/conv2d.hpp,
// batch_norm.hpp, pooling.hpp, attentive_pool.hpp. Activations are nhwc
// [N, H, W, C] in the working dtype T (f32, bf16 or f16); parameters in T;
// statistics and parameter gradients f32; accumulation in f32. Each op is
// deterministic (fixed-order reductions, no floating-point atomics) and its
// CPU twin gives the same bits for any thread count.

// conv2d: y = act(conv(x, w) + b), k x k (k odd), stride 1 or 2, zero padding
// k/2. x [N, H, W, Cin]; w [Cout, k, k, Cin] (OHWI); b [Cout] or null (no
// bias); y [N, OH, OW, Cout] with OH = (H - 1) / stride + 1 (PyTorch's
// floor((H + 2*(k/2) - k) / stride) + 1), OW likewise.
void conv2d_forward(const Tensor& x, const Tensor& w, int stride, bool relu, Tensor& y, const Tensor* b,
                    cudaStream_t stream = nullptr);
// dw f32 [Cout, k, k, Cin] overwritten; dx [N, H, W, Cin] or null (the first
// layer); db f32 [Cout] (or null: no bias) overwritten. With relu, dy is
// first overwritten by dy * (y > 0), y being the forward's output (read only
// with relu, may be null without). scratch: f32 with >=
// kernels::conv2d_scratch_elems(dims) elements on x's device, or null: the CPU
// ignores it; on a GPU a null scratch is allocated per call (inside a graph
// capture, as a node of the graph).
void conv2d_backward(const Tensor& x, const Tensor& w, Tensor& dy, int stride, bool relu, Tensor& dw,
                     const Tensor* y, Tensor* dx, Tensor* db, Tensor* scratch, cudaStream_t stream = nullptr);

// Batch normalisation over N, H, W per channel (the last dim C of x, any rank
// >= 2), with an optional residual add and ReLU after the affine:
//   y = act(gamma * (x - mean) * invstd + beta + residual).
// Training: mean and the biased variance of this batch, invstd =
// 1 / sqrt(var + eps); save_mean and save_invstd f32 [C] keep them for the
// backward; running_mean/var f32 [C] updated in place as PyTorch does
// (r = (1 - momentum) * r + momentum * s, the unbiased variance for
// running_var; M = N*H*W >= 2). residual: same shape and dtype as x, or null.
// scratch: f32 with >= kernels::batch_norm_scratch_elems(M, C) elements on
// x's device (the GPU's per-chunk partials), or null: the CPU needs none; on
// a GPU a null scratch is allocated per call, refused while the stream is
// being captured into a CUDA graph (pass one allocated before the capture).
void batch_norm_train_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                              Tensor& running_var, float eps, float momentum, bool relu, Tensor& save_mean,
                              Tensor& save_invstd, Tensor& y, const Tensor* residual, Tensor* scratch,
                              cudaStream_t stream = nullptr);
// Inference with the running statistics (same epilogue).
void batch_norm_eval_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                             const Tensor& running_var, float eps, bool relu, Tensor& y, const Tensor* residual,
                             cudaStream_t stream = nullptr);
// The training forward's backward. With relu, dy is first overwritten by
// dy * (y > 0) (then dy is also the residual's gradient). dx (x's shape and
// dtype), dgamma and dbeta (f32 [C], overwritten). y is read only with relu
// (may be null without). scratch: as for the training forward.
void batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd,
                         Tensor& dy, bool relu, Tensor& dx, Tensor& dgamma, Tensor& dbeta, const Tensor* y,
                         Tensor* scratch, cudaStream_t stream = nullptr);

// Max pool p x p, stride p, floor (kernels/conv_relu_pool.hpp's rules, without
// the ReLU): x [N, H, W, C] -> y [N, H/p, W/p, C]; code u8 (y's shape) the
// winner's position in its window, or null when no backward follows.
void max_pool_forward(const Tensor& x, int pool, Tensor& y, Tensor* code, cudaStream_t stream = nullptr);
// dx [N, H, W, C] overwritten (zero where no window's winner).
void max_pool_backward(const Tensor& dy, const Tensor& code, int pool, Tensor& dx, cudaStream_t stream = nullptr);
// Mean over H and W: x [N, H, W, C] -> y [N, C]; backward dx = dy / (H*W).
void global_avg_pool_forward(const Tensor& x, Tensor& y, cudaStream_t stream = nullptr);
void global_avg_pool_backward(const Tensor& dy, Tensor& dx, cudaStream_t stream = nullptr);
// Squeeze-excitation's channel gate with the residual block's epilogue:
//   y = act(x * sigmoid(g) + residual), x [N, H, W, C], g [N, C] (logits),
// residual x's shape or null.
void channel_gate_forward(const Tensor& x, const Tensor& g, bool relu, Tensor& y, const Tensor* residual,
                          cudaStream_t stream = nullptr);
// With relu, dy is first overwritten by dy * (y > 0) (y read only with relu,
// may be null without). dx (x's shape), dg [N, C] (g's dtype) = sum over H, W
// of dy * x, times sigmoid'(g).
void channel_gate_backward(const Tensor& x, const Tensor& g, Tensor& dy, bool relu, Tensor& dx, Tensor& dg,
                           const Tensor* y, cudaStream_t stream = nullptr);
// Batch norm folded into the conv before it, for inference
// (kernels/fold_batch_norm.hpp): s = gamma / sqrt(running_var + eps),
// w_out = w * s[co], b_out = beta + (b - running_mean) * s (b = 0 when null),
// so conv2d(x, w_out, b_out) = batch_norm_eval(conv2d(x, w, b)). w [Cout, k,
// k, Cin], b, gamma, beta [Cout] in T; running stats f32 [Cout]; w_out (w's
// shape) and b_out [Cout] in T: caller buffers, overwritten (computed in
// f32, rounded to T on store).
void fold_batch_norm(const Tensor& w, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                     const Tensor& running_var, float eps, Tensor& w_out, Tensor& b_out, const Tensor* b,
                     cudaStream_t stream = nullptr);

// Self-attentive (statistics) pooling over time (kernels/attentive_pool.hpp):
// x [N, H, W, C] (H mels, W frames) is averaged over H, then
// e_t = v . tanh(w x_t + b), alpha = softmax_t(e), mu = sum_t alpha_t x_t and,
// with stats, sigma = sqrt(max(sum_t alpha_t x_t^2 - mu^2, 1e-5)):
// y [N, C] (mu) or [N, 2C] (mu, sigma). w [A, C], b [A], v [A]; saved f32
// [kernels::attentive_pool_saved_elems(...)] keeps what the backward needs.
void attentive_pool_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& v, bool stats,
                            Tensor& y, Tensor* saved, cudaStream_t stream = nullptr);
// dx (x's shape and dtype); dw, db, dv f32, overwritten.
// saved is the forward's (its workspace regions are written here too).
void attentive_pool_backward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& v, const Tensor& saved,
                             const Tensor& dy, bool stats, Tensor& dx, Tensor& dw, Tensor& db, Tensor& dv,
                             cudaStream_t stream = nullptr);

// ---- speaker verification's ops (issue 20): kernels/margin_softmax.hpp,
// angleproto.hpp, instance_norm.hpp. Embeddings [B, D] in the working dtype
// T; parameter gradients f32; f32 (or wider) accumulation; deterministic.
// The metric outputs follow class_leak_loss's contract (kernels/loss.hpp): sums f32
// [kLossSums] (+= the loss into the class-loss and total slots, += 1
// micro-batch), counts i32 [kLossCounts + C*C] (+= samples, correct, and the
// confusion matrix when the loss has classes), step_loss f32 [1] or null (=
// the loss); gradients are d(loss)/d(input) * (*loss_scale) * grad_scale.

// Cosine-margin softmax (AM-softmax and AAM-softmax / ArcFace, voxceleb_trainer's
// amsoftmax and aamsoftmax): cos[b][c] = <emb_b / |emb_b|, w_c / |w_c|>
// (F.normalize, eps 1e-12); the target logit becomes s * (cos - m) (am) or
// s * phi with phi = cos(theta + m), and cos - m sin(m) where theta + m > pi
// (aam); the others s * cos; cross-entropy over C classes, mean over B.
// emb [B, D], weight [C, D] (T); labels i32 [B]; demb [B, D] (T) and dweight
// f32 [C, D] overwritten. Accuracy and the confusion matrix use the argmax of
// the plain cosine; counts may be [kLossCounts] (no confusion matrix, for many
// speakers). kernels::MarginSoftmaxArgs carries the type, s, m, grad_scale.
// scratch: f32 with >= kernels::margin_softmax_scratch_elems(B, C, D) elements
// on emb's device, or null: the CPU ignores it; on a GPU a null scratch is
// allocated per call, refused while the stream is being captured into a CUDA
// graph (pass one allocated before the capture).
void margin_softmax_loss(const Tensor& emb, const Tensor& weight, const Tensor& labels,
                         const kernels::MarginSoftmaxArgs& d, Tensor& demb, Tensor& dweight, Tensor& sums,
                         Tensor& counts, const float* loss_scale, Tensor* step_loss, Tensor* scratch,
                         cudaStream_t stream = nullptr);

// Angular prototypical loss (voxceleb_trainer's angleproto): emb [N*M, D] (T)
// holds M >= 2 consecutive segments of each of N classes (N >= 2); per class
// the query is its first segment and the prototype the mean of the other M-1;
// logits[i][j] = w * cos(query_i, prototype_j) + b with w clamped to >= 1e-6;
// cross-entropy with target i, mean over N. wb f32 [2] = (w, b) in the
// tensors' memory (the learnable scale and bias; the caller keeps them f32);
// demb [N*M, D] (T) and dwb f32 [2] overwritten. Accuracy counts argmax_j ==
// i (no confusion matrix: counts may be [kLossCounts]; longer counts keep
// their tail untouched). scratch: f32 with >= kernels::angleproto_scratch_elems(N, D)
// elements on emb's device, or null: as margin_softmax_loss's.
void angleproto_loss(const Tensor& emb, const Tensor& wb, const kernels::AngleProtoArgs& d, Tensor& demb,
                     Tensor& dwb, Tensor& sums, Tensor& counts, const float* loss_scale, Tensor* step_loss,
                     Tensor* scratch, cudaStream_t stream = nullptr);

// Instance normalisation of each mel band over time, per segment
// (PyTorch's InstanceNorm1d(n_mels) on [B, mels, frames], eps 1e-5, no
// affine, biased variance): x [B, mels, frames, 1] or [B, mels, frames] (T)
// -> y (same shape, may be x itself: in place). Inference and training alike
// (the input needs no gradient).
void instance_norm(const Tensor& x, Tensor& y, cudaStream_t stream = nullptr);

// Speaker-verification trial scores (kernels/trial_scores.hpp): scores[t] =
// <emb[pairs[t][0]], emb[pairs[t][1]]>, the cosine when the caller has
// L2-normalised the rows. emb f32 [F, E], pairs i32 [T, 2], scores f32 [T]
// (overwritten); f32 sums in a fixed order (run-to-run identical). An index
// out of [0, F) is an error naming the trial on the CPU and NaN on the GPU
// (the device cannot report it: check host-side before uploading).
void trial_scores(const Tensor& emb, const Tensor& pairs, Tensor& scores, cudaStream_t stream = nullptr);

}  // namespace mf::ops
