// The dispatch point: one function per op taking Tensors. It checks shapes,
// dtypes and devices, then runs the CPU twin or the CUDA kernel according to
// the tensors' device. model/ calls kernels only through here.
#pragma once

#include <cuda_runtime_api.h>

#include "engine/tensor.hpp"
#include "kernels/adamw.hpp"
#include "kernels/augment.hpp"
#include "kernels/loss.hpp"
#include "kernels/mixup.hpp"

namespace mf::ops {

// dst = src converted to dst's dtype (same shape, same device).
void cast(const Tensor& src, Tensor& dst, cudaStream_t stream = nullptr);

// Fused conv + bias + ReLU + max pool (kernels/conv_relu_pool.hpp has the
// layouts). x [N,H,W,Cin] nhwc; w [Cout,k,k,Cin]; b [Cout]; y [N,H/p,W/p,Cout];
// code (u8, same shape as y) may be undefined when no backward follows.
void conv_relu_pool_forward(const Tensor& x, const Tensor& w, const Tensor& b, int pool, Tensor& y,
                            Tensor* code, cudaStream_t stream = nullptr);
// dx may be null (first layer); dw and db are f32 and overwritten.
void conv_relu_pool_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& code,
                             int pool, Tensor* dx, Tensor& dw, Tensor& db, cudaStream_t stream = nullptr);

// File-level voting (kernels/file_vote.hpp has the rules). class_in [F*L*S, C]
// and leak_in [F*L*S] f32 (probabilities, or logits when `logits`); outputs
// file_probs [F, C] f32, file_class [F] i32, file_leak_prob [F] f32,
// file_leak [F] i32, all on the inputs' device. One launch for all files.
// A model without the leak head: leak_in, file_leak_prob and file_leak all
// undefined; the class vote is the same.
void file_vote(const Tensor& class_in, const Tensor& leak_in, std::int64_t files, std::int64_t longs,
               std::int64_t shorts, float threshold, bool logits, Tensor& file_probs, Tensor& file_class,
               Tensor& file_leak_prob, Tensor& file_leak, cudaStream_t stream = nullptr);

// ---- training step ops (kernels/dense.hpp, loss.hpp, adamw.hpp, dropout.hpp) ----

// y [M,N] = x [M,K] w[N,K]^T + b[N] (+ReLU). x, w, b, y share dtype and device.
void dense_forward(const Tensor& x, const Tensor& w, const Tensor& b, bool relu, Tensor& y,
                   cudaStream_t stream = nullptr);
// dw [N,K] and db [N] f32 (overwritten); dx [M,K] may be null. With relu, dy is
// overwritten by dy * (y > 0).
void dense_backward(const Tensor& x, const Tensor& w, const Tensor& y, Tensor& dy, bool relu, Tensor* dx,
                    Tensor& dw, Tensor& db, cudaStream_t stream = nullptr);

// The fused loss of the heads (kernels/loss.hpp). logits/dlogits [B, C+1]
// ([B, C] when !opts.leak_head); labels i32 [B]; leak f32 [B] (not read, may be
// undefined, without the leak head); class_weight f32 [C] or null; loss_scale:
// a float in the tensors' memory (device pointer on GPU) or null; sums f32
// [kLossSums]; counts i32 [kLossCounts + C*C]; step_loss f32 [1] or null.
// labels_b i32 [B] and lam f32 [B]: mixup's soft class targets (loss.hpp),
// both given or both null (null: the hard labels, bit for bit as before).
void leak_loss(const Tensor& logits, const Tensor& labels, const Tensor& leak, const Tensor* class_weight,
               const float* loss_scale, const kernels::LeakLossDims& opts, Tensor& dlogits, Tensor& sums,
               Tensor& counts, Tensor* step_loss, cudaStream_t stream = nullptr, const Tensor* labels_b = nullptr,
               const Tensor* lam = nullptr);
// probs f32 [B, C], leak_prob f32 [B] from logits [B, C+1]; with leak_prob
// undefined (a model without the leak head) probs from logits [B, C].
void head_probs(const Tensor& logits, Tensor& probs, Tensor& leak_prob, cudaStream_t stream = nullptr);

// The fused AdamW step over flat f32 buffers [n] (kernels/adamw.hpp). work may
// be null (fp32: the master is the working copy); state is u8
// [sizeof(AdamWState)]; scratch u8 [adamw_scratch_bytes()].
void adamw_step(const kernels::AdamWConfig& cfg, std::int64_t decay_end, Tensor& master, const Tensor& grad,
                Tensor& m, Tensor& v, Tensor* work, Tensor& state, Tensor& scratch,
                cudaStream_t stream = nullptr);
// dst += src (f32, same shape).
void accumulate(const Tensor& src, Tensor& dst, cudaStream_t stream = nullptr);

// Dropout with the counter-based mask (kernels/dropout.hpp); counter: an i32 in
// the tensors' memory. backward applies the same mask to dy.
void dropout_forward(const Tensor& x, Tensor& y, float p, std::uint64_t seed, std::uint32_t stream_id,
                     const std::int32_t* counter, cudaStream_t stream = nullptr);
void dropout_backward(const Tensor& dy, Tensor& dx, float p, std::uint64_t seed, std::uint32_t stream_id,
                      const std::int32_t* counter, cudaStream_t stream = nullptr);

// Data augmentation of a micro-batch in place (kernels/augment.hpp: time shift,
// gain, background noise, SpecAugment masks). x [batch, mels, frames] or
// [batch, mels, frames, 1] (the step's nhwc input), f32/bf16/f16, matching d's
// batch, mels and frames; noise f32 [noise_count, mels, frames] in x's memory,
// null when noise_count is 0; counter: an i32 in x's memory (read only when
// d.any()). Does nothing when d.any() is false.
void augment(Tensor& x, const kernels::AugmentDims& d, const float* noise, const std::int32_t* counter,
             cudaStream_t stream = nullptr);

// mixup of a micro-batch (kernels/mixup.hpp), out of place: x [batch, ...]
// (f32/bf16/f16, d.elems values per sample) -> x_out (same shape, dtype and
// device, another buffer); labels i32 [batch] -> labels_b i32 [batch] (the
// partners' labels) and lam f32 [batch]; leak f32 [batch] -> leak_out f32
// [batch] (both undefined without the leak head); counter: an i32 in x's
// memory. d.batch must match x; d.alpha > 0 and finite.
void mixup(const Tensor& x, const Tensor& labels, const Tensor& leak, const kernels::MixupDims& d,
           const std::int32_t* counter, Tensor& x_out, Tensor& labels_b, Tensor& lam, Tensor& leak_out,
           cudaStream_t stream = nullptr);

}  // namespace mf::ops
