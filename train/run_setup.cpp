#include "train/run_setup.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "model/heads.hpp"

namespace mf::train {

model::Precision resolve_precision(std::optional<model::Precision> precision, Device dev) {
  if (precision) return *precision;
  return dev.is_cuda() ? model::Precision::bf16 : model::Precision::fp32;
}

io::DatasetNames dataset_names(const model::RunConfig& cfg) {
  io::DatasetNames n;
  n.segments = cfg.segments_name;
  n.labels = cfg.labels_name;
  n.leak = cfg.leak_name;
  n.normal_class = int(cfg.normal_class);
  n.num_classes = int(cfg.num_classes);
  n.crop_frames = cfg.crop_frames;
  return n;
}

io::DatasetNames eval_dataset_names(const model::RunConfig& cfg) {
  io::DatasetNames n = dataset_names(cfg);
  n.crop_frames = cfg.eval_crop_frames > 0 ? cfg.eval_crop_frames : cfg.crop_frames;
  n.crops_per_utterance = std::max<std::int64_t>(1, cfg.eval_crops);
  n.whole_utterances = cfg.eval_crops == 0;  // eval.crops = full
  return n;
}

void check_whole_utterance_eval(const model::ModelConfig& mc, const io::DatasetInfo& in, const std::string& what) {
  if (!in.ragged()) return;
  const char* model = mc.arch == model::Arch::leakcnn ? "LeakCNN" : "a flattening stack";
  MF_CHECK(!in.names.whole_utterances || mc.takes_frames(mc.in_frames + 1),
           "{}: eval.crops = full evaluates each utterance at its own length (--crops full), which needs a stack "
           "ending in global or attentive pooling; this model ({}) takes {} frames only: use eval.crops = N "
           "(--crops N)", what, model, mc.in_frames);
  MF_CHECK(mc.takes_frames(in.frames),
           "{}: evaluation crops of {} frames (eval.crop_frames, --crop-frames), but this model ({}) takes {} only "
           "(a stack ending in global or attentive pooling takes any length): set eval.crop_frames = {}", what,
           in.frames, model, mc.in_frames, mc.in_frames);
}

model::ModelConfig model_config(const model::RunConfig& cfg, std::int64_t mels, std::int64_t frames, int classes) {
  model::ModelConfig m;
  m.in_mels = int(mels);
  m.in_frames = int(frames);
  m.arch = cfg.arch;
  m.preset = cfg.arch_preset;
  if (cfg.arch == model::Arch::cnn) m.layers = cfg.arch_preset.empty() ? cfg.layers : model::cnn_preset(cfg.arch_preset);
  m.channels.assign(cfg.channels.begin(), cfg.channels.end());
  m.pools.assign(cfg.pools.begin(), cfg.pools.end());
  m.kernel = int(cfg.kernel);
  m.dense = int(cfg.dense);
  m.dropout = float(cfg.dropout);
  m.classes = classes;
  m.leak_head = model::has_leak_head(cfg);  // model.heads must be resolved (model::resolve_heads)
  m.loss = cfg.loss_type;
  m.input_norm = cfg.input_norm == model::InputNorm::instance;
  // model.embedding = auto: none with the softmax loss or on a stack (its last
  // layer is the embedding), 256 on LeakCNN with a metric loss.
  m.embedding = int(cfg.embedding);
  if (m.embedding == 0 && m.loss != model::LossType::softmax && m.arch == model::Arch::leakcnn) m.embedding = 256;
  m.validate();
  return m;
}

model::TrainConfig step_config(const model::RunConfig& cfg, const model::ModelConfig& mc, model::Precision p,
                               std::int64_t total_steps) {
  model::TrainConfig tc;
  tc.model = mc;
  tc.precision = p;
  tc.micro_batch = cfg.batch_size;
  tc.accum_steps = int(cfg.grad_accum);
  tc.optim.lr = float(cfg.lr);
  tc.optim.beta1 = float(cfg.beta1);
  tc.optim.beta2 = float(cfg.beta2);
  tc.optim.eps = float(cfg.eps);
  tc.optim.weight_decay = float(cfg.weight_decay);
  tc.optim.max_grad_norm = float(cfg.clip_norm);
  tc.optim.schedule = cfg.schedule;
  tc.optim.warmup_steps = std::int32_t(cfg.warmup_steps);
  tc.optim.total_steps = std::int32_t(std::max<std::int64_t>(1, total_steps));
  tc.optim.min_lr = float(cfg.lr * cfg.min_lr_ratio);
  tc.optim.growth_interval = std::int32_t(cfg.loss_scale_window);
  tc.initial_loss_scale = float(cfg.initial_loss_scale);
  tc.label_smoothing = float(cfg.label_smoothing);
  tc.class_loss_weight = float(cfg.class_loss_weight);
  tc.leak_loss_weight = float(cfg.leak_loss_weight);
  tc.cuda_graph = cfg.cuda_graphs;
  tc.margin = float(cfg.margin);
  tc.margin_scale = float(cfg.margin_scale);
  tc.per_class = int(cfg.per_class);
  tc.seed = std::uint64_t(cfg.seed);
  tc.freeze = cfg.freeze;
  return tc;
}

io::ReaderConfig reader_config(const model::RunConfig& cfg, Device dev, DType dtype, bool train) {
  io::ReaderConfig rc;
  rc.batch_size = cfg.batch_size;
  rc.shuffle = train && cfg.overfit_batches == 0;
  rc.seed = std::uint64_t(cfg.seed);
  rc.last_batch = train && cfg.drop_last ? io::LastBatch::drop : io::LastBatch::pad;
  rc.threads = int(cfg.reader_threads);  // exact: model::validate checked [1, io::kMaxReadThreads]
  rc.ring_slots = int(cfg.reader_ring);
  rc.device = dev;
  rc.dtype = dtype;
  rc.resident = cfg.gpu_cache;
  rc.max_device_share = cfg.gpu_cache_fraction;
  if (train) rc.per_class = int(cfg.per_class);
  rc.random_crops = train && cfg.overfit_batches == 0;  // whole utterances: a new crop each epoch
  return rc;
}

void set_augmentation(model::TrainConfig& tc, const model::RunConfig& cfg, const io::DatasetInfo& train) {
  kernels::AugmentArgs& a = tc.augment;
  a.time_masks = int(cfg.aug_time_masks);
  a.time_mask_width = int(cfg.aug_time_mask_width);
  a.freq_masks = int(cfg.aug_freq_masks);
  a.freq_mask_width = int(cfg.aug_freq_mask_width);
  a.time_shift = int(cfg.aug_time_shift);
  a.gain_db = float(cfg.aug_gain_db);
  tc.mixup_alpha = float(cfg.aug_mixup_alpha);
  a.db_per_unit = float(cfg.aug_db_per_unit > 0 ? cfg.aug_db_per_unit : train.db_per_unit > 0 ? train.db_per_unit : 1.0);
  MF_CHECK(a.time_mask_width < train.frames && a.freq_mask_width < train.n_mels && a.time_shift < train.frames,
           "augment: time_mask_width {} and time_shift {} must be below the {} frames, freq_mask_width {} below the "
           "{} mel bands of data.train {}",
           a.time_mask_width, a.time_shift, train.frames, a.freq_mask_width, train.n_mels, train.path);
  if (cfg.aug_noise.empty()) return;
  const auto noise = io::Dataset::open(cfg.aug_noise, io::DatasetNames{});
  const io::DatasetInfo& ni = noise->info();
  MF_CHECK(ni.n_mels == train.n_mels && ni.frames == train.frames,
           "augment.noise {}: segments are {} x {}, the training set's {} x {}", cfg.aug_noise, ni.n_mels, ni.frames,
           train.n_mels, train.frames);
  tc.augment_noise.resize(std::size_t(ni.num_segments * ni.segment_elems()));
  noise->read_all(DType::f32, tc.augment_noise.data(), true, 2);
  a.noise_count = ni.num_segments;
  a.snr_lo_db = float(cfg.aug_noise_snr_db[0]);
  a.snr_hi_db = float(cfg.aug_noise_snr_db[1]);
}

audio::FrontendParams frontend_of(const model::RunConfig& c) {
  audio::FrontendParams p;
  p.sample_rate = c.fe_sample_rate;
  p.n_fft = c.fe_n_fft;
  p.hop_length = c.fe_hop_length;
  p.n_mels = c.fe_n_mels;
  p.fmin = c.fe_fmin;
  p.fmax = c.fe_fmax;
  p.frames = c.fe_frames;
  p.long_segments = c.fe_long;
  p.short_segments = c.fe_short;
  return p;
}

void set_frontend(model::RunConfig& c, const audio::FrontendParams& p) {
  c.fe_sample_rate = p.sample_rate;
  c.fe_n_fft = p.n_fft;
  c.fe_hop_length = p.hop_length;
  c.fe_n_mels = p.n_mels;
  c.fe_fmin = p.fmin;
  c.fe_fmax = p.fmax;
  c.fe_frames = p.frames;
  c.fe_long = p.long_segments;
  c.fe_short = p.short_segments;
}

void resolve_frontend(model::RunConfig& cfg, const io::DatasetInfo& t) {
  if (t.n_fft == 0 || t.sample_rate <= 0 || t.hop_length <= 0) return;
  audio::FrontendParams d;
  d.sample_rate = std::int64_t(std::llround(t.sample_rate));
  d.n_fft = t.n_fft;
  d.hop_length = t.hop_length;
  d.n_mels = t.n_mels;
  d.fmin = t.fmin;
  d.fmax = t.fmax;
  d.frames = t.frames;
  d.long_segments = t.long_per_file;
  d.short_segments = t.short_per_long;
  if (cfg.fe_sample_rate == 0) return set_frontend(cfg, d);
  const std::string diff = audio::first_difference(frontend_of(cfg), d);
  MF_CHECK(diff.empty(), "frontend: the configuration and data.train {} disagree: {} (configured vs built)", t.path,
           diff);
}

std::string augmentation_summary(const model::TrainConfig& tc) {
  const kernels::AugmentArgs& a = tc.augment;
  std::vector<std::string> on;
  if (a.time_masks > 0) on.push_back(fmt::format("{} time masks of <= {} frames", a.time_masks, a.time_mask_width));
  if (a.freq_masks > 0) on.push_back(fmt::format("{} frequency masks of <= {} bands", a.freq_masks, a.freq_mask_width));
  if (a.time_shift > 0) on.push_back(fmt::format("time shift <= {} frames", a.time_shift));
  if (a.gain_db > 0) on.push_back(fmt::format("gain +-{} dB", a.gain_db));
  if (a.noise_count > 0)
    on.push_back(fmt::format("noise ({} segments) at {}..{} dB SNR", a.noise_count, a.snr_lo_db, a.snr_hi_db));
  if (tc.mixup_alpha > 0) on.push_back(fmt::format("mixup alpha {}", tc.mixup_alpha));
  return on.empty() ? std::string("off") : fmt::format("{}", fmt::join(on, ", "));
}

}  // namespace mf::train
