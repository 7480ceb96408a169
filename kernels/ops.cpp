#include "kernels/ops.hpp"

#include <cmath>

#include "engine/cuda_entry.hpp"
#include "kernels/cast.hpp"
#include "kernels/file_vote.hpp"
#include "kernels/dense.hpp"
#include "kernels/dropout.hpp"
#include "kernels/conv_relu_pool.hpp"

namespace mf::ops {

void cast(const Tensor& src, Tensor& dst, cudaStream_t stream) {
  check_shape(dst, src.shape(), "cast", "dst");
  check_same_device({&src, &dst}, "cast");
  auto fn = src.is_cuda() ? MF_CUDA_ENTRY(kernels::cast_cuda) : kernels::cast_cpu;
  fn(src.raw(), src.dtype(), dst.raw(), dst.dtype(), src.numel(), stream);
}

void file_vote(const Tensor& class_in, std::int64_t files, std::int64_t longs, std::int64_t shorts,
               float threshold, bool logits, Tensor& file_probs, Tensor& file_class, const Tensor* leak_in,
               Tensor* file_leak_prob, Tensor* file_leak, cudaStream_t stream) {
  MF_CHECK(files >= 0 && longs > 0 && shorts > 0,
           "file_vote: expected files >= 0 and long/short segment counts > 0, found F={} L={} S={}", files, longs,
           shorts);
  MF_CHECK(class_in.ndim() == 2, "file_vote: class_in must be [segments, classes], found {}", class_in.str());
  const std::int64_t n = files * longs * shorts, c = class_in.size(1);
  MF_CHECK(c >= 1 && c <= kernels::kFileVoteMaxClasses, "file_vote: expected 1..{} classes, found {}",
           kernels::kFileVoteMaxClasses, c);
  check_shape(class_in, {n, c}, "file_vote", "class_in");
  check_shape(file_probs, {files, c}, "file_vote", "file_probs");
  check_shape(file_class, {files}, "file_vote", "file_class");
  check_dtype(class_in, DType::f32, "file_vote", "class_in");
  check_dtype(file_probs, DType::f32, "file_vote", "file_probs");
  check_dtype(file_class, DType::i32, "file_vote", "file_class");
  check_same_device({&class_in, &file_probs, &file_class}, "file_vote");
  const bool leak = leak_in != nullptr;
  const auto given = [](const Tensor* t) { return t ? "given" : "null"; };
  MF_CHECK(leak == (file_leak_prob != nullptr) && leak == (file_leak != nullptr),
           "file_vote: leak_in, file_leak_prob and file_leak must all be given (a model with the leak head) or all "
           "be null (without it), found {}, {} and {}", given(leak_in), given(file_leak_prob), given(file_leak));
  if (leak) {
    check_shape(*leak_in, {n}, "file_vote", "leak_in");
    check_shape(*file_leak_prob, {files}, "file_vote", "file_leak_prob");
    check_shape(*file_leak, {files}, "file_vote", "file_leak");
    check_dtype(*leak_in, DType::f32, "file_vote", "leak_in");
    check_dtype(*file_leak_prob, DType::f32, "file_vote", "file_leak_prob");
    check_dtype(*file_leak, DType::i32, "file_vote", "file_leak");
    check_same_device({&class_in, leak_in, file_leak_prob, file_leak}, "file_vote");
  }
  const kernels::FileVoteArgs d{files, longs, shorts, int(c), threshold, logits};
  auto fn = class_in.is_cuda() ? MF_CUDA_ENTRY(kernels::file_vote_cuda) : kernels::file_vote_cpu;
  fn(static_cast<const float*>(class_in.raw()), leak ? static_cast<const float*>(leak_in->raw()) : nullptr,
     static_cast<float*>(file_probs.raw()), static_cast<std::int32_t*>(file_class.raw()),
     leak ? static_cast<float*>(file_leak_prob->raw()) : nullptr,
     leak ? static_cast<std::int32_t*>(file_leak->raw()) : nullptr, d, stream);
}

// ---- training step ops ----

void dense_forward(const Tensor& x, const Tensor& w, const Tensor& b, bool relu, Tensor& y,
                   cudaStream_t stream) {
  constexpr const char* op = "dense_forward";
  MF_CHECK(x.ndim() == 2 && w.ndim() == 2, "{}: x must be [M, K] and w [N, K], found x {} and w {}", op,
           x.str(), w.str());
  check_float_dtype(x, op, "x");
  const std::int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  check_shape(w, {N, K}, op, "w");
  check_shape(b, {N}, op, "b");
  check_shape(y, {M, N}, op, "y");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&w, &b, &y}) check_dtype(*t, x.dtype(), op, "w, b and y (the dtype of x)");
  check_same_device({&x, &w, &b, &y}, op);
  const kernels::DenseDims d{M, int(K), int(N), relu};
  auto fn = x.is_cuda() ? MF_CUDA_ENTRY(kernels::dense_forward_cuda) : kernels::dense_forward_cpu;
  fn(d, x.dtype(), x.raw(), w.raw(), b.raw(), y.raw(), stream);
}

void dense_backward(const Tensor& x, const Tensor& w, const Tensor& y, Tensor& dy, bool relu, Tensor& dw,
                    Tensor& db, Tensor* dx, cudaStream_t stream) {
  constexpr const char* op = "dense_backward";
  MF_CHECK(x.ndim() == 2 && w.ndim() == 2, "{}: x must be [M, K] and w [N, K], found x {} and w {}", op,
           x.str(), w.str());
  check_float_dtype(x, op, "x");
  const std::int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  check_shape(w, {N, K}, op, "w");
  check_shape(y, {M, N}, op, "y");
  check_shape(dy, {M, N}, op, "dy");
  check_shape(dw, {N, K}, op, "dw");
  check_shape(db, {N}, op, "db");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&w, &y, &dy}) check_dtype(*t, x.dtype(), op, "w, y and dy (the dtype of x)");
  check_dtype(dw, DType::f32, op, "dw");
  check_dtype(db, DType::f32, op, "db");
  check_same_device({&x, &w, &y, &dy, &dw, &db}, op);
  if (dx) {
    check_shape(*dx, {M, K}, op, "dx");
    check_dtype(*dx, x.dtype(), op, "dx");
    check_same_device({&x, dx}, op);
  }
  const kernels::DenseDims d{M, int(K), int(N), relu};
  auto fn = x.is_cuda() ? MF_CUDA_ENTRY(kernels::dense_backward_cuda) : kernels::dense_backward_cpu;
  fn(d, x.dtype(), x.raw(), w.raw(), y.raw(), dy.raw(), dx ? dx->raw() : nullptr, dw.data<float>(),
     db.data<float>(), stream);
}

void class_leak_loss(const Tensor& logits, const Tensor& labels, const kernels::ClassLeakLossArgs& opts,
                     Tensor& dlogits, Tensor& sums, Tensor& counts, const Tensor* leak, const Tensor* class_weight,
                     const Tensor* labels_b, const Tensor* lam, const float* loss_scale, Tensor* step_loss,
                     cudaStream_t stream) {
  constexpr const char* op = "class_leak_loss";
  const int H = opts.leak_head ? 1 : 0;  // the leak column
  MF_CHECK(logits.ndim() == 2 && logits.size(1) >= 1 + H, "{}: logits must be [B, C{}] with C >= 1 classes, found {}",
           op, opts.leak_head ? "+1" : "", logits.str());
  check_float_dtype(logits, op, "logits");
  const std::int64_t B = logits.size(0);
  const int C = int(logits.size(1) - H);
  MF_CHECK(opts.classes == C, "{}: {} classes configured ({}), logits {} hold {}", op, opts.classes,
           opts.leak_head ? "and the leak head" : "no leak head", logits.str(), C);
  MF_CHECK(opts.batch == B, "{}: batch {} configured, logits {} hold {}", op, opts.batch, logits.str(), B);
  MF_CHECK(opts.label_smoothing >= 0.f && opts.label_smoothing <= 1.f,
           "{}: label smoothing must be in [0, 1], found {}", op, opts.label_smoothing);
  check_shape(labels, {B}, op, "labels");
  check_dtype(labels, DType::i32, op, "labels");
  if (opts.leak_head) {  // else not read: may be null
    MF_CHECK(leak != nullptr, "{}: leak (f32 [B], the leak targets) must be given with the leak head, found null", op);
    check_shape(*leak, {B}, op, "leak");
    check_dtype(*leak, DType::f32, op, "leak");
    check_same_device({&logits, leak}, op);
  }
  check_shape(dlogits, logits.shape(), op, "dlogits");
  check_dtype(dlogits, logits.dtype(), op, "dlogits");
  check_shape(sums, {kernels::kLossSums}, op, "sums");
  check_dtype(sums, DType::f32, op, "sums");
  // counts: with the confusion matrix or without (kernels/loss.hpp).
  const std::int64_t full = kernels::kLossCounts + std::int64_t(C) * C;
  MF_CHECK(counts.ndim() == 1 && (counts.size(0) == kernels::kLossCounts || counts.size(0) == full),
           "{}: counts must be [{}] (no confusion matrix) or [{} + C*C = {}], found {}", op, kernels::kLossCounts,
           kernels::kLossCounts, full, counts.str());
  check_dtype(counts, DType::i32, op, "counts");
  kernels::ClassLeakLossArgs d = opts;
  d.confusion = counts.size(0) == full;
  check_same_device({&logits, &labels, &dlogits, &sums, &counts}, op);
  if (class_weight) {
    check_shape(*class_weight, {C}, op, "class_weight");
    check_dtype(*class_weight, DType::f32, op, "class_weight");
    check_same_device({&logits, class_weight}, op);
  }
  if (step_loss) {
    check_shape(*step_loss, {1}, op, "step_loss");
    check_dtype(*step_loss, DType::f32, op, "step_loss");
    check_same_device({&logits, step_loss}, op);
  }
  MF_CHECK((labels_b == nullptr) == (lam == nullptr),
           "{}: the soft targets labels_b and lam must be given together, found labels_b {} and lam {}", op,
           labels_b ? "given" : "null", lam ? "given" : "null");
  if (lam) {
    check_shape(*labels_b, {B}, op, "labels_b");
    check_dtype(*labels_b, DType::i32, op, "labels_b");
    check_shape(*lam, {B}, op, "lam");
    check_dtype(*lam, DType::f32, op, "lam");
    check_same_device({&logits, labels_b, lam}, op);
  }
  auto fn = logits.is_cuda() ? MF_CUDA_ENTRY(kernels::class_leak_loss_cuda) : kernels::class_leak_loss_cpu;
  fn(d, logits.dtype(), logits.raw(), labels.data<std::int32_t>(),
     labels_b ? labels_b->data<std::int32_t>() : nullptr, lam ? lam->data<float>() : nullptr,
     opts.leak_head ? leak->data<float>() : nullptr,
     class_weight ? class_weight->data<float>() : nullptr, loss_scale, dlogits.raw(), sums.data<float>(),
     counts.data<std::int32_t>(), step_loss ? step_loss->data<float>() : nullptr, stream);
}

void head_probs(const Tensor& logits, Tensor& probs, Tensor* leak_prob, cudaStream_t stream) {
  constexpr const char* op = "head_probs";
  const bool leak = leak_prob != nullptr;
  const int H = leak ? 1 : 0;
  MF_CHECK(logits.ndim() == 2 && logits.size(1) >= 1 + H, "{}: logits must be [B, C{}], found {}", op,
           leak ? "+1" : "", logits.str());
  check_float_dtype(logits, op, "logits");
  const std::int64_t B = logits.size(0), C = logits.size(1) - H;
  check_shape(probs, {B, C}, op, "probs");
  check_dtype(probs, DType::f32, op, "probs");
  check_same_device({&logits, &probs}, op);
  if (leak) {
    check_shape(*leak_prob, {B}, op, "leak_prob");
    check_dtype(*leak_prob, DType::f32, op, "leak_prob");
    check_same_device({&logits, leak_prob}, op);
  }
  auto fn = logits.is_cuda() ? MF_CUDA_ENTRY(kernels::head_probs_cuda) : kernels::head_probs_cpu;
  fn(B, int(C), logits.dtype(), logits.raw(), probs.data<float>(), leak ? leak_prob->data<float>() : nullptr, stream);
}

void adamw_step(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, Tensor& state,
                const kernels::AdamWConfig& cfg, std::int64_t decay_end, Tensor* work, const Tensor* frozen,
                Tensor& scratch, cudaStream_t stream) {
  constexpr const char* op = "adamw_step";
  const std::int64_t n = master.numel();
  for (const Tensor* t : std::initializer_list<const Tensor*>{&master, &grad, &m, &v}) {
    check_shape(*t, {n}, op, "master, grad, m and v (flat, one layout)");
    check_dtype(*t, DType::f32, op, "master, grad, m and v");
  }
  MF_CHECK(0 <= decay_end && decay_end <= n, "{}: decay_end {} outside [0, {}]", op, decay_end, n);
  check_shape(state, {std::int64_t(sizeof(kernels::AdamWState))}, op, "state");
  check_dtype(state, DType::u8, op, "state");
  MF_CHECK(scratch.nbytes() >= kernels::adamw_scratch_bytes(), "{}: scratch holds {} bytes, needs {}", op,
           scratch.nbytes(), kernels::adamw_scratch_bytes());
  check_same_device({&master, &grad, &m, &v, &state, &scratch}, op);
  if (work) {
    check_shape(*work, {n}, op, "work");
    check_float_dtype(*work, op, "work");
    check_same_device({&master, work}, op);
  }
  if (frozen) {
    check_shape(*frozen, {n}, op, "frozen");
    check_dtype(*frozen, DType::u8, op, "frozen");
    check_same_device({&master, frozen}, op);
  }
  MF_CHECK(cfg.beta1 >= 0.f && cfg.beta1 < 1.f && cfg.beta2 >= 0.f && cfg.beta2 < 1.f,
           "{}: betas must be in [0, 1), found {} and {}", op, cfg.beta1, cfg.beta2);
  MF_CHECK(cfg.schedule == kernels::LrSchedule::constant || cfg.total_steps >= 1,
           "{}: a decaying schedule needs total_steps >= 1, found {}", op, cfg.total_steps);
  const kernels::AdamWDims d{n, decay_end};
  auto fn = master.is_cuda() ? MF_CUDA_ENTRY(kernels::adamw_step_cuda) : kernels::adamw_step_cpu;
  fn(d, cfg, work ? work->dtype() : DType::f32, master.data<float>(), grad.data<float>(), m.data<float>(),
     v.data<float>(), work ? work->raw() : nullptr,
     frozen ? static_cast<const std::uint8_t*>(frozen->raw()) : nullptr, static_cast<kernels::AdamWState*>(state.raw()),
     scratch.raw(), stream);
}

namespace {
void dropout_common(const char* op, const Tensor& a, Tensor& b, float p) {
  check_float_dtype(a, op, "input");
  check_shape(b, a.shape(), op, "output");
  check_dtype(b, a.dtype(), op, "output");
  check_same_device({&a, &b}, op);
  MF_CHECK(p >= 0.f && p < 1.f, "{}: drop probability must be in [0, 1), found {}", op, p);
}
}  // namespace

void dropout_forward(const Tensor& x, const std::int32_t* counter, float p, std::uint64_t seed,
                     std::uint32_t stream_id, Tensor& y, cudaStream_t stream) {
  dropout_common("dropout_forward", x, y, p);
  const kernels::DropoutArgs d{x.numel(), p, seed, stream_id};
  auto fn = x.is_cuda() ? MF_CUDA_ENTRY(kernels::dropout_forward_cuda) : kernels::dropout_forward_cpu;
  fn(d, x.dtype(), x.raw(), y.raw(), counter, stream);
}

void dropout_backward(const Tensor& dy, const std::int32_t* counter, float p, std::uint64_t seed,
                      std::uint32_t stream_id, Tensor& dx, cudaStream_t stream) {
  dropout_common("dropout_backward", dy, dx, p);
  const kernels::DropoutArgs d{dy.numel(), p, seed, stream_id};
  auto fn = dy.is_cuda() ? MF_CUDA_ENTRY(kernels::dropout_backward_cuda) : kernels::dropout_backward_cpu;
  fn(d, dy.dtype(), dy.raw(), dx.raw(), counter, stream);
}

void augment(Tensor& x, const std::int32_t* counter, const kernels::AugmentArgs& d, const Tensor* noise,
             cudaStream_t stream) {
  constexpr const char* op = "augment";
  check_float_dtype(x, op, "x");
  const bool nhwc = x.ndim() == 4 && x.size(3) == 1;
  MF_CHECK(x.ndim() == 3 || nhwc, "{}: x must be [batch, mels, frames] or [batch, mels, frames, 1], found {}", op,
           x.str());
  MF_CHECK(x.size(0) == d.batch && x.size(1) == d.mels && x.size(2) == d.frames,
           "{}: x {} does not match the dims' batch {}, mels {}, frames {}", op, x.str(), d.batch, d.mels, d.frames);
  MF_CHECK(d.mels >= 1 && d.frames >= 1 && d.frames <= kernels::kAugmentMaxFrames &&
               d.mels * d.frames < (std::int64_t(1) << 31),
           "{}: expected mels >= 1 and 1 <= frames <= {} (a row must fit the kernel's stage) with mels * frames < "
           "2^31, found mels {} and frames {}", op, kernels::kAugmentMaxFrames, d.mels, d.frames);
  MF_CHECK(d.first_sample >= 0, "{}: first_sample must be >= 0, found {}", op, d.first_sample);
  MF_CHECK(d.time_shift >= 0 && d.time_shift < d.frames, "{}: time_shift must be in [0, frames - 1 = {}], found {}",
           op, d.frames - 1, d.time_shift);
  MF_CHECK(std::isfinite(d.gain_db) && d.gain_db >= 0.f, "{}: gain_db must be finite and >= 0, found {}", op,
           d.gain_db);
  MF_CHECK(d.freq_masks >= 0 && d.freq_masks <= kernels::kAugmentMaxMasks && d.time_masks >= 0 &&
               d.time_masks <= kernels::kAugmentMaxMasks,
           "{}: freq_masks and time_masks must be in [0, {}], found {} and {}", op, kernels::kAugmentMaxMasks,
           d.freq_masks, d.time_masks);
  MF_CHECK(d.freq_mask_width >= 0 && d.freq_mask_width <= d.mels,
           "{}: freq_mask_width must be in [0, mels = {}], found {}", op, d.mels, d.freq_mask_width);
  MF_CHECK(d.time_mask_width >= 0 && d.time_mask_width <= d.frames,
           "{}: time_mask_width must be in [0, frames = {}], found {}", op, d.frames, d.time_mask_width);
  MF_CHECK(d.noise_count >= 0 && d.noise_count < (std::int64_t(1) << 39),
           "{}: noise_count must be in [0, 2^39), found {}", op, d.noise_count);
  MF_CHECK((d.noise_count > 0) == (noise != nullptr),
           "{}: noise must be given exactly when noise_count > 0, found noise_count {} and noise {}", op,
           d.noise_count, noise ? "given" : "null");
  MF_CHECK(d.noise_count == 0 || (std::isfinite(d.snr_lo_db) && std::isfinite(d.snr_hi_db) &&
                                  d.snr_lo_db <= d.snr_hi_db),
           "{}: the SNR range must be finite with lo <= hi, found [{}, {}] dB", op, d.snr_lo_db, d.snr_hi_db);
  MF_CHECK(std::isfinite(d.db_per_unit) && d.db_per_unit > 0.f, "{}: db_per_unit must be finite and > 0, found {}",
           op, d.db_per_unit);
  if (noise) {
    check_dtype(*noise, DType::f32, op, "noise");
    check_same_device({&x, noise}, op);
    MF_CHECK(noise->numel() / (d.mels * d.frames) >= d.noise_count,
             "{}: noise must hold at least noise_count * mels * frames = {} * {} * {} f32 values, found {}", op,
             d.noise_count, d.mels, d.frames, noise->str());
  }
  if (!d.any() || d.batch == 0) return;
  MF_CHECK(counter != nullptr, "{}: the counter must be given (an i32 in x's memory), found null", op);
  auto fn = x.is_cuda() ? MF_CUDA_ENTRY(kernels::augment_cuda) : kernels::augment_cpu;
  fn(d, x.dtype(), x.raw(), noise ? static_cast<const float*>(noise->raw()) : nullptr, counter, stream);
}

void mixup(const Tensor& x, const Tensor& labels, const std::int32_t* counter, const kernels::MixupArgs& d,
           Tensor& x_out, Tensor& labels_b, Tensor& lam, const Tensor* leak, Tensor* leak_out, cudaStream_t stream) {
  constexpr const char* op = "mixup";
  check_float_dtype(x, op, "x");
  MF_CHECK(x.ndim() >= 1 && x.size(0) == d.batch && d.batch >= 0 && d.batch < (std::int64_t(1) << 31),
           "{}: x must be [batch = {}, ...] with batch < 2^31, found {}", op, d.batch, x.str());
  MF_CHECK(d.elems >= 0 && x.numel() == d.batch * d.elems, "{}: x {} does not hold {} samples of {} values", op,
           x.str(), d.batch, d.elems);
  MF_CHECK(std::isfinite(d.alpha) && d.alpha > 0.f, "{}: alpha must be finite and > 0, found {}", op, d.alpha);
  MF_CHECK(d.first_sample >= 0, "{}: first_sample must be >= 0, found {}", op, d.first_sample);
  check_shape(x_out, x.shape(), op, "x_out");
  check_dtype(x_out, x.dtype(), op, "x_out");
  MF_CHECK(x_out.raw() != x.raw() || d.batch == 0, "{}: x_out must be another buffer than x (out of place)", op);
  check_shape(labels, {d.batch}, op, "labels");
  check_dtype(labels, DType::i32, op, "labels");
  check_shape(labels_b, {d.batch}, op, "labels_b");
  check_dtype(labels_b, DType::i32, op, "labels_b");
  check_shape(lam, {d.batch}, op, "lam");
  check_dtype(lam, DType::f32, op, "lam");
  check_same_device({&x, &x_out, &labels, &labels_b, &lam}, op);
  const bool with_leak = leak != nullptr;
  MF_CHECK(with_leak == (leak_out != nullptr),
           "{}: leak and leak_out must both be given (the leak head) or both null, found {} and {}", op,
           leak ? leak->str() : "null", leak_out ? leak_out->str() : "null");
  if (with_leak) {
    check_shape(*leak, {d.batch}, op, "leak");
    check_dtype(*leak, DType::f32, op, "leak");
    check_shape(*leak_out, {d.batch}, op, "leak_out");
    check_dtype(*leak_out, DType::f32, op, "leak_out");
    check_same_device({&x, leak, leak_out}, op);
  }
  if (d.batch == 0) return;
  MF_CHECK(counter != nullptr, "{}: the counter must be given (an i32 in x's memory), found null", op);
  auto fn = x.is_cuda() ? MF_CUDA_ENTRY(kernels::mixup_cuda) : kernels::mixup_cpu;
  fn(d, x.dtype(), x.raw(), x_out.raw(), labels.data<std::int32_t>(), with_leak ? leak->data<float>() : nullptr,
     labels_b.data<std::int32_t>(), lam.data<float>(), with_leak ? leak_out->data<float>() : nullptr, counter,
     stream);
}

namespace {
// Validates x, w and the pool size, and returns the dims they imply.
kernels::ConvReluPoolDims conv_dims(const Tensor& x, const Tensor& w, int pool, const char* op) {
  MF_CHECK(x.ndim() == 4, "{}: x must be 4-D [N, H, W, Cin] (NHWC), got {}", op, shape_str(x.shape()));
  MF_CHECK(w.ndim() == 4, "{}: w must be 4-D [Cout, k, k, Cin], got {}", op, shape_str(w.shape()));
  check_float_dtype(x, op, "x");
  check_dtype(w, x.dtype(), op, "w (same dtype as x)");
  MF_CHECK(x.size(0) >= 1 && x.size(1) >= 1 && x.size(2) >= 1 && x.size(3) >= 1,
           "{}: x must have N, H, W, Cin >= 1, got {}", op, shape_str(x.shape()));
  MF_CHECK(w.size(1) == w.size(2) && w.size(1) % 2 == 1,
           "{}: w must be [Cout, k, k, Cin] with k odd and square, got {}", op, shape_str(w.shape()));
  MF_CHECK(w.size(1) <= 15, "{}: kernel size k must be <= 15, got {}", op, w.size(1));
  MF_CHECK(w.size(0) >= 1, "{}: w must have Cout >= 1, got {}", op, shape_str(w.shape()));
  MF_CHECK(w.size(3) == x.size(3), "{}: w's Cin ({}) must match x's channels ({}); w {} x {}", op,
           w.size(3), x.size(3), shape_str(w.shape()), shape_str(x.shape()));
  MF_CHECK(pool >= 1 && pool <= 15, "{}: pool must be in [1, 15], got {}", op, pool);
  MF_CHECK(x.size(1) < (1 << 30) && x.size(2) < (1 << 30) && x.size(3) < (1 << 30) && w.size(0) < (1 << 30),
           "{}: x {} / w {} dimensions too large", op, shape_str(x.shape()), shape_str(w.shape()));
  kernels::ConvReluPoolDims d;
  d.n = x.size(0);
  d.h = int(x.size(1));
  d.w = int(x.size(2));
  d.cin = int(x.size(3));
  d.cout = int(w.size(0));
  d.k = int(w.size(1));
  d.pool = pool;
  return d;
}
}  // namespace

void conv_relu_pool_forward(const Tensor& x, const Tensor& w, const Tensor& b, int pool, Tensor& y,
                            Tensor* code, cudaStream_t stream) {
  constexpr const char* op = "conv_relu_pool_forward";
  const kernels::ConvReluPoolDims d = conv_dims(x, w, pool, op);
  check_shape(b, {d.cout}, op, "b");
  check_dtype(b, x.dtype(), op, "b (same dtype as x)");
  const Shape ys{d.n, d.ph(), d.pw(), d.cout};
  check_shape(y, ys, op, "y");
  check_dtype(y, x.dtype(), op, "y (same dtype as x)");
  const bool with_code = code != nullptr;
  if (with_code) {
    check_shape(*code, ys, op, "code");
    check_dtype(*code, DType::u8, op, "code");
    check_same_device({&x, &w, &b, &y, code}, op);
  } else {
    check_same_device({&x, &w, &b, &y}, op);
  }
  std::uint8_t* cp = with_code ? code->data<std::uint8_t>() : nullptr;
  auto fn = x.is_cuda() ? MF_CUDA_ENTRY(kernels::conv_relu_pool_forward_cuda) : kernels::conv_relu_pool_forward_cpu;
  fn(d, x.dtype(), x.raw(), w.raw(), b.raw(), y.raw(), cp, stream);
}

void conv_relu_pool_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& code, int pool,
                             Tensor& dw, Tensor& db, Tensor* dx, cudaStream_t stream) {
  constexpr const char* op = "conv_relu_pool_backward";
  const kernels::ConvReluPoolDims d = conv_dims(x, w, pool, op);
  const Shape ys{d.n, d.ph(), d.pw(), d.cout};
  check_shape(dy, ys, op, "dy");
  check_dtype(dy, x.dtype(), op, "dy (same dtype as x)");
  check_shape(code, ys, op, "code (from the forward)");
  check_dtype(code, DType::u8, op, "code");
  check_shape(dw, w.shape(), op, "dw");
  check_dtype(dw, DType::f32, op, "dw");
  check_shape(db, {d.cout}, op, "db");
  check_dtype(db, DType::f32, op, "db");
  const bool with_dx = dx != nullptr;
  if (with_dx) {
    check_shape(*dx, x.shape(), op, "dx");
    check_dtype(*dx, x.dtype(), op, "dx (same dtype as x)");
    check_same_device({&x, &w, &dy, &code, &dw, &db, dx}, op);
  } else {
    check_same_device({&x, &w, &dy, &code, &dw, &db}, op);
  }
  auto fn = x.is_cuda() ? MF_CUDA_ENTRY(kernels::conv_relu_pool_backward_cuda) : kernels::conv_relu_pool_backward_cpu;
  fn(d, x.dtype(), x.raw(), w.raw(), dy.raw(), code.data<std::uint8_t>(), with_dx ? dx->raw() : nullptr,
     dw.data<float>(), db.data<float>(), stream);
}

}  // namespace mf::ops
