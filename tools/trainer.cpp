#include "tools/trainer.hpp"

#include <cuda_profiler_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "engine/error.hpp"
#include "engine/log.hpp"
#include "engine/memory.hpp"
#include "engine/nvtx.hpp"
#include "engine/parallel.hpp"
#include "engine/stream.hpp"
#include "engine/timer.hpp"
#include "model/safetensors.hpp"
#include "model/torch_layout.hpp"
#include "tools/perf.hpp"
#include "tools/plot.hpp"
#include "tools/progress.hpp"
#include "tools/run_log.hpp"
#include "tools/sysmon.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace mf::tools {

using model::RunConfig;

// ---- configuration helpers --------------------------------------------------

model::Precision resolve_precision(const std::string& precision, Device dev) {
  if (precision == "auto" || precision.empty()) return dev.is_cuda() ? model::Precision::bf16 : model::Precision::fp32;
  return model::parse_precision(precision);
}

io::DatasetNames dataset_names(const RunConfig& cfg) {
  io::DatasetNames n;
  n.segments = cfg.segments_name;
  n.labels = cfg.labels_name;
  n.leak = cfg.leak_name;
  n.normal_class = int(cfg.normal_class);
  n.num_classes = int(cfg.num_classes);
  return n;
}

model::LeakCNNConfig model_config(const RunConfig& cfg, std::int64_t mels, std::int64_t frames, int classes) {
  model::LeakCNNConfig m;
  m.in_mels = int(mels);
  m.in_frames = int(frames);
  m.channels.assign(cfg.channels.begin(), cfg.channels.end());
  m.pools.assign(cfg.pools.begin(), cfg.pools.end());
  m.kernel = int(cfg.kernel);
  m.dense = int(cfg.dense);
  m.dropout = float(cfg.dropout);
  m.classes = classes;
  m.validate();
  return m;
}

namespace {

model::TrainConfig step_config(const RunConfig& cfg, const model::LeakCNNConfig& mc, model::Precision p,
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
  tc.optim.schedule = cfg.schedule == "cosine"   ? kernels::LrSchedule::cosine
                      : cfg.schedule == "linear" ? kernels::LrSchedule::linear
                                                 : kernels::LrSchedule::constant;
  tc.optim.warmup_steps = std::int32_t(cfg.warmup_steps);
  tc.optim.total_steps = std::int32_t(std::max<std::int64_t>(1, total_steps));
  tc.optim.min_lr = float(cfg.lr * cfg.min_lr_ratio);
  tc.optim.growth_interval = std::int32_t(cfg.loss_scale_window);
  tc.initial_loss_scale = float(cfg.loss_scale);
  tc.label_smoothing = float(cfg.label_smoothing);
  tc.class_loss_weight = float(cfg.class_loss_weight);
  tc.leak_loss_weight = float(cfg.leak_loss_weight);
  tc.cuda_graph = cfg.cuda_graphs;
  tc.seed = std::uint64_t(cfg.seed);
  return tc;
}

io::ReaderConfig reader_config(const RunConfig& cfg, Device dev, DType dtype, bool train) {
  io::ReaderConfig rc;
  rc.batch_size = cfg.batch_size;
  rc.shuffle = train && cfg.overfit_batches == 0;
  rc.seed = std::uint64_t(cfg.seed);
  rc.last_batch = train && cfg.drop_last ? io::LastBatch::drop : io::LastBatch::pad;
  rc.threads = int(cfg.reader_threads);  // exact: model::validate checked [1, io::kMaxReadThreads]
  rc.ring_slots = int(cfg.reader_ring);
  rc.device = dev;
  rc.dtype = dtype;
  rc.resident = io::parse_residency(cfg.gpu_cache);
  rc.max_device_share = cfg.gpu_cache_fraction;
  return rc;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

json nan_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// Why eval.metric can be NaN on a validation set (for the warning).
std::string undefined_metric_reason(const std::string& metric) {
  if (metric.find("leak_auc") != std::string::npos)
    return "the leak AUC needs both leak and non-leak examples, and the set holds a single leak label";
  if (metric.find("loss") != std::string::npos) return "the loss is not a number (diverged weights or inputs)";
  return "the metric has no examples to average over (an empty set or classes without examples)";
}

}  // namespace

// ---- evaluation --------------------------------------------------------------

EvalRun evaluate(model::TrainStep& ts, io::BatchReader& reader, const EvalOptions& o, cudaStream_t stream) {
  MF_NVTX_RANGE("eval");
  const auto t0 = std::chrono::steady_clock::now();
  const io::DatasetInfo& info = reader.info();
  const Device dev = ts.device();
  const int C = ts.config().model.classes;
  MF_CHECK(info.num_classes <= C, "{}: labels have {} classes but the model has {}", info.path, info.num_classes, C);
  std::int64_t n = info.num_segments;
  if (o.max_segments > 0 && o.max_segments < n) {
    n = o.max_segments;
    // Whole files, when there are files and at least one fits.
    if (info.layout == io::SegmentLayout::file_structured && n >= info.segments_per_file)
      n = n / info.segments_per_file * info.segments_per_file;
  }
  Tensor probs = Tensor::empty({n, C}, DType::f32, dev, Layout::plain, stream);
  Tensor leak = Tensor::empty({n}, DType::f32, dev, Layout::plain, stream);
  reader.restore({0, 0});
  std::int64_t done = 0;
  while (done < n) {
    io::Batch b = reader.next(stream);
    MF_CHECK(b.valid > 0, "evaluation: the reader returned an empty batch at segment {}", done);
    const model::EvalOutput out = ts.forward_eval(b.x, stream);
    const std::int64_t take = std::min(b.valid, n - done);
    Tensor pd = probs.slice(done, done + take), ld = leak.slice(done, done + take);
    pd.copy_from(out.probs.slice(0, take), stream);
    ld.copy_from(out.leak_prob.slice(0, take), stream);
    done += take;
  }
  EvalRun r;
  r.segments.classes = C;
  {
    const Tensor hp = dev.is_cuda() ? probs.to(Device::cpu(), stream) : probs;
    const Tensor hl = dev.is_cuda() ? leak.to(Device::cpu(), stream) : leak;
    if (dev.is_cuda()) MF_CUDA_CHECK(cudaStreamSynchronize(stream));
    r.segments.class_probs.assign(hp.data<float>(), hp.data<float>() + n * C);
    r.segments.leak_probs.assign(hl.data<float>(), hl.data<float>() + n);
  }
  r.segments.labels.assign(info.labels.begin(), info.labels.begin() + n);
  r.segments.leak_labels.assign(info.leak.begin(), info.leak.begin() + n);
  // The same loss as training (without label smoothing): weighted CE + BCE.
  double loss = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double p = std::max(double(r.segments.class_probs[std::size_t(i * C + r.segments.labels[std::size_t(i)])]), 1e-12);
    const double q = std::clamp(double(r.segments.leak_probs[std::size_t(i)]), 1e-12, 1.0 - 1e-12);
    const double y = r.segments.leak_labels[std::size_t(i)] ? 1.0 : 0.0;
    loss += o.class_loss_weight * -std::log(p) + o.leak_loss_weight * -(y * std::log(q) + (1 - y) * std::log(1 - q));
  }
  r.result.loss = n ? loss / double(n) : NAN;
  r.result.segment = model::segment_metrics(r.segments, o.threshold);
  if (info.layout == io::SegmentLayout::file_structured && n >= info.segments_per_file) {
    const std::int64_t F = n / info.segments_per_file;
    const std::int64_t used = F * info.segments_per_file;
    r.vote = model::vote_files(probs.slice(0, used), leak.slice(0, used), F, info.long_per_file, info.short_per_long,
                               o.threshold, false, stream);
    std::vector<std::int32_t> fl(info.file_labels.begin(), info.file_labels.begin() + F);
    std::vector<std::int32_t> fk(info.file_leak.begin(), info.file_leak.begin() + F);
    r.result.file = model::file_metrics(*r.vote, fl, fk, o.threshold);
    r.result.has_files = true;
    r.result.vote_files_per_s = r.vote->seconds > 0 ? double(F) / r.vote->seconds : 0;
    r.files = F;
  }
  const double secs = std::max(seconds_since(t0), 1e-9);
  r.result.segments_per_s = double(n) / secs;
  if (r.result.has_files) r.result.files_per_s = double(r.files) / secs;
  return r;
}

// ---- checkpoints of a run ----------------------------------------------------------

namespace {

struct LoopState {
  std::int64_t step = 0;            // optimizer steps done
  std::int64_t epoch = 0;           // epoch of the next step
  std::int64_t step_in_epoch = 0;   // index of the next step in its epoch
  std::int64_t samples = 0;
  double best_metric = NAN;
  std::int64_t best_step = -1;
  std::int64_t bad_evals = 0;
  double elapsed_s = 0;
};

std::string params_json(const model::ParamBuffer& pb) {
  json j = json::array();
  for (const auto& p : pb.params())
    j.push_back({{"name", p.name}, {"offset", p.offset}, {"numel", p.numel}, {"shape", p.shape},
                 {"torch_shape", p.torch_shape}});
  return j.dump();
}

model::Checkpoint make_checkpoint(model::TrainStep& ts, const RunConfig& cfg, const LoopState& s,
                                  const io::ReaderState& rs, const std::vector<std::string>& class_names,
                                  int normal_class, cudaStream_t stream) {
  MF_NVTX_RANGE("checkpoint");
  if (ts.device().is_cuda()) MF_CUDA_CHECK(cudaStreamSynchronize(stream));
  model::ParamBuffer& pb = ts.params();
  model::Checkpoint c;
  c.put("master", pb.master());
  c.put("adam_m", pb.m());
  c.put("adam_v", pb.v());
  if (pb.work_dtype() != DType::f32) c.put("weights", pb.work());
  const kernels::AdamWState st = ts.optimizer_state(stream);
  c.put("adamw_state", DType::u8, {std::int64_t(sizeof(st))}, &st);
  const model::LeakCNNConfig& mc = ts.config().model;
  c.ints = {{"step", s.step},
            {"epoch", s.epoch},
            {"step_in_epoch", s.step_in_epoch},
            {"reader_epoch", rs.epoch},
            {"reader_position", rs.position},
            {"seed", cfg.seed},
            {"samples", s.samples},
            {"best_step", s.best_step},
            {"bad_evals", s.bad_evals},
            {"in_mels", mc.in_mels},
            {"in_frames", mc.in_frames},
            {"classes", mc.classes},
            {"normal_class", normal_class},
            {"adamw_iteration", st.iteration},
            {"adamw_step", st.step},
            {"adamw_skipped_steps", st.skipped_steps}};
  c.floats = {{"best_metric", s.best_metric},
              {"loss_scale", st.loss_scale},
              {"lr", st.lr},
              {"elapsed_s", s.elapsed_s}};
  c.strings = {{"config", model::to_toml(cfg)},
               {"precision", std::string(model::precision_name(ts.config().precision))},
               {"class_names", json(class_names).dump()},
               {"params", params_json(pb)},
               {"rng", fmt::format("seed={}; init and dropout derive from (seed, optimizer iteration), shuffling "
                                   "from (seed, epoch): no other generator state",
                                   cfg.seed)},
               {"melforge", "0.1.0"}};
  return c;
}

void restore_checkpoint(model::TrainStep& ts, const model::Checkpoint& c, cudaStream_t stream) {
  model::ParamBuffer& pb = ts.params();
  const std::int64_t n = pb.size();
  Tensor master = Tensor::empty({n}, DType::f32), m = Tensor::empty({n}, DType::f32), v = Tensor::empty({n}, DType::f32);
  c.read_into("master", master);
  c.read_into("adam_m", m);
  c.read_into("adam_v", v);
  const auto& a = c.array("adamw_state");
  kernels::AdamWState st;
  MF_CHECK(a.bytes.size() == sizeof(st), "checkpoint {}: adamw_state has {} bytes, this melforge expects {}", c.source,
           a.bytes.size(), sizeof(st));
  std::memcpy(&st, a.bytes.data(), sizeof(st));
  ts.load_state(master, m, v, st, stream);
}

// Model shape checks between a checkpoint and the model built from the data.
void check_same_model(const model::Checkpoint& c, const model::TrainStep& ts, const std::string& what) {
  const model::LeakCNNConfig& mc = ts.config().model;
  MF_CHECK(c.get_int("in_mels") == mc.in_mels && c.get_int("in_frames") == mc.in_frames &&
               c.get_int("classes") == mc.classes,
           "{} {}: its model takes {}x{} inputs and {} classes, this run's data {}x{} and {} classes", what, c.source,
           c.get_int("in_mels"), c.get_int("in_frames"), c.get_int("classes"), mc.in_mels, mc.in_frames, mc.classes);
  MF_CHECK(c.array("master").shape == Shape{ts.params().size()},
           "{} {}: {} parameters, the configured model has {} (model.channels/pools/kernel/dense differ?)", what,
           c.source, shape_numel(c.array("master").shape), ts.params().size());
}

// What a checkpoint says about its model, each value checked: a damaged or
// hand-edited file gets an error naming it, the entry, what was expected and
// what was found (never a narrowed integer or a JSON library's message).
model::Precision checkpoint_precision(const model::Checkpoint& c) {
  const std::string& p = c.get_string("precision");
  try {
    return model::parse_precision(p);
  } catch (const Error&) {
    MF_THROW("checkpoint {}: /strings/precision: expected fp32, bf16 or fp16, found '{}'", c.source, p);
  }
}

model::LeakCNNConfig checkpoint_model(const model::Checkpoint& c, const RunConfig& cfg) {
  constexpr std::int64_t kMaxInt = std::numeric_limits<int>::max();
  const std::int64_t mels = c.get_int_in("in_mels", 1, kMaxInt), frames = c.get_int_in("in_frames", 1, kMaxInt);
  const int classes = int(c.get_int_in("classes", 1, kMaxInt));
  try {
    return model_config(cfg, mels, frames, classes);
  } catch (const Error& e) {
    MF_THROW("checkpoint {}: the model of /ints/in_mels = {}, /ints/in_frames = {}, /ints/classes = {} and "
             "/strings/config is not valid: {}", c.source, mels, frames, classes, e.message());
  }
}

std::vector<std::string> checkpoint_class_names(const model::Checkpoint& c, int classes) {
  const std::string& text = c.get_string("class_names");
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  const bool ok = j.is_array() && std::all_of(j.begin(), j.end(), [](const json& x) { return x.is_string(); });
  MF_CHECK(ok, "checkpoint {}: /strings/class_names: expected a JSON list of strings, found {}", c.source,
           j.is_discarded() ? "text that is not JSON" : fmt::format("a JSON {}", j.type_name()) +
                                                            (j.is_array() ? " holding a non-string" : ""));
  MF_CHECK(j.size() == std::size_t(classes), "checkpoint {}: /strings/class_names: expected {} names (/ints/classes), "
           "found {}", c.source, classes, j.size());
  return j.get<std::vector<std::string>>();
}

// ---- signals ---------------------------------------------------------------------

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  g_stop_signal = sig;
  std::signal(sig, SIG_DFL);  // a second Ctrl-C ends the process at once
}

struct SignalGuard {
  void (*old_int)(int);
  void (*old_term)(int);
  SignalGuard() {
    g_stop_signal = 0;
    old_int = std::signal(SIGINT, on_stop_signal);
    old_term = std::signal(SIGTERM, on_stop_signal);
  }
  ~SignalGuard() {
    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
  }
};

}  // namespace

// ---- loading models ------------------------------------------------------------------

void init_weights_from(model::TrainStep& ts, const fs::path& path) {
  model::ParamBuffer& pb = ts.params();
  if (path.extension() == ".h5") {
    const model::Checkpoint c = model::read_checkpoint(path);
    check_same_model(c, ts, "--init-from");
    c.read_into("master", pb.master());
  } else {
    const model::SafeTensors st = model::read_safetensors(path);
    std::vector<model::NamedArray> arrays;
    for (const auto& p : pb.params()) {
      const model::SafeTensor& t = st.at(p.name);
      MF_CHECK(t.shape == p.torch_shape, "{}: tensor '{}' has shape {}, the model expects {}", path.string(), p.name,
               shape_str(t.shape), shape_str(p.torch_shape));
      model::NamedArray a{p.name, t.shape, std::vector<float>(std::size_t(shape_numel(t.shape)))};
      for (std::size_t i = 0; i < a.values.size(); ++i) {
        switch (t.dtype) {
          case DType::f32: std::memcpy(&a.values[i], t.bytes.data() + 4 * i, 4); break;
          case DType::bf16: {
            std::uint16_t b;
            std::memcpy(&b, t.bytes.data() + 2 * i, 2);
            a.values[i] = bf16_bits_to_f32(b);
            break;
          }
          case DType::f16: {
            std::uint16_t b;
            std::memcpy(&b, t.bytes.data() + 2 * i, 2);
            a.values[i] = f16_bits_to_f32(b);
            break;
          }
          default: MF_THROW("{}: tensor '{}' is {}, expected a float type", path.string(), p.name, dtype_name(t.dtype));
        }
      }
      arrays.push_back(std::move(a));
    }
    model::import_torch(pb, pb.master(), arrays);
  }
  pb.refresh_work();
  // refresh_work ran on the legacy default stream; the step runs on a
  // non-blocking stream that does not wait for it.
  if (pb.device().is_cuda()) MF_CUDA_CHECK(cudaDeviceSynchronize());
}

LoadedModel load_model(const fs::path& checkpoint, const std::string& device, const std::string& precision,
                       cudaStream_t stream) {
  const model::Checkpoint c = model::read_checkpoint(checkpoint);
  LoadedModel lm;
  model::load_toml_string(lm.cfg, c.get_string("config"), checkpoint.string() + ":/strings/config");
  try {
    model::validate(lm.cfg);  // every integer narrowed below (and by the callers) is then in range
  } catch (const Error& e) {
    MF_THROW("checkpoint {}: /strings/config: {}", c.source, e.message());
  }
  const Device dev = parse_device(device);
  set_current(dev);
  lm.precision = precision.empty() ? checkpoint_precision(c) : resolve_precision(precision, dev);
  lm.model = checkpoint_model(c, lm.cfg);
  lm.class_names = checkpoint_class_names(c, lm.model.classes);
  lm.normal_class = int(c.get_int_in("normal_class", 0, lm.model.classes - 1));
  lm.step = c.get_int("step");
  model::RunConfig inf = lm.cfg;
  inf.batch_size = 1;  // the training buffers are not used; forward_eval sizes its own
  inf.grad_accum = 1;
  lm.ts = std::make_unique<model::TrainStep>(step_config(inf, lm.model, lm.precision, 1), dev, stream);
  check_same_model(c, *lm.ts, "checkpoint");
  Tensor master = Tensor::empty({lm.ts->params().size()}, DType::f32);
  c.read_into("master", master);
  lm.ts->params().master().copy_from(master, stream);
  lm.ts->params().refresh_work(stream);
  if (dev.is_cuda()) MF_CUDA_CHECK(cudaStreamSynchronize(stream));
  return lm;
}

// ---- the training loop ---------------------------------------------------------------

int run_train(RunConfig cfg) {
  model::validate(cfg);
  const auto run_t0 = std::chrono::steady_clock::now();
  if (cfg.fast_dev_run) {
    cfg.epochs = 1;
    cfg.limit_batches = 1;
    cfg.overfit_batches = 0;
  }
  const Device dev = parse_device(cfg.device);
  set_current(dev);
  const model::Precision precision = resolve_precision(cfg.precision, dev);
  const DType act = model::activation_dtype(precision);
  const fs::path out(cfg.out);
  const fs::path ckpt_dir = out / "checkpoints";

  // Where to resume from, before anything is written.
  std::optional<model::FoundCheckpoint> resume;
  if (cfg.resume == "auto") {
    resume = model::newest_good_checkpoint(ckpt_dir);
    if (!resume) log_info("--resume auto: no checkpoint in {}, starting a new run", ckpt_dir.string());
  } else if (!cfg.resume.empty()) {
    fs::path p(cfg.resume);
    if (fs::is_directory(p)) {
      resume = model::newest_good_checkpoint(fs::exists(p / "checkpoints") ? p / "checkpoints" : p);
      MF_CHECK(resume.has_value(), "--resume {}: no readable checkpoint there", cfg.resume);
    } else {
      resume = model::FoundCheckpoint{p, model::read_checkpoint(p)};
    }
  }
  if (!resume && !cfg.fast_dev_run) {
    model::CheckpointDir existing(ckpt_dir, 1);
    MF_CHECK(existing.list().empty() && !fs::exists(existing.best_path()),
             "run.out {} already holds checkpoints of an earlier run: continue it with --resume auto, or choose "
             "another --out",
             out.string());
  }

  // Data (validated at open: a bad file stops here, before anything is written).
  const io::DatasetNames names = dataset_names(cfg);
  const auto load_t0 = std::chrono::steady_clock::now();
  auto train_ds = io::Dataset::open(cfg.train_path, names);
  const io::DatasetInfo& ti = train_ds->info();
  std::shared_ptr<const io::Dataset> val_ds, test_ds;
  auto check_compatible = [&](const io::DatasetInfo& vi, const char* key) {
    MF_CHECK(vi.n_mels == ti.n_mels && vi.frames == ti.frames,
             "{} {}: segments are {}x{}, the training set's {}x{}", key, vi.path, vi.n_mels, vi.frames, ti.n_mels,
             ti.frames);
  };
  if (!cfg.val_path.empty()) {
    val_ds = io::Dataset::open(cfg.val_path, names);
    check_compatible(val_ds->info(), "data.val");
  }
  if (!cfg.test_path.empty()) {
    test_ds = io::Dataset::open(cfg.test_path, names);
    check_compatible(test_ds->info(), "data.test");
  }
  int classes = int(cfg.num_classes);
  if (classes == 0) {
    classes = ti.num_classes;
    if (val_ds) classes = std::max(classes, val_ds->info().num_classes);
  }
  MF_CHECK(classes >= 2, "data.train {}: {} class(es) found; LeakCNN needs at least 2 (set model.num_classes)",
           ti.path, classes);
  std::vector<std::string> class_names = ti.class_names;
  while (int(class_names.size()) < classes) class_names.push_back(fmt::format("class_{}", class_names.size()));
  const model::LeakCNNConfig mc = model_config(cfg, ti.n_mels, ti.frames, classes);

  Stream stream(dev, "compute");
  io::BatchReader train_rd(train_ds, reader_config(cfg, dev, act, true));
  // Opening the datasets and (resident mode) loading the training set: the
  // "dataset load" that time-to-first-step figures leave out.
  const double dataset_load_s = seconds_since(load_t0);
  const std::int64_t k = cfg.grad_accum, B = cfg.batch_size;
  std::int64_t steps_per_epoch = train_rd.batches_per_epoch() / k;
  MF_CHECK(steps_per_epoch > 0,
           "data.train {}: {} segments make {} batches of {} (train.batch_size), fewer than train.grad_accum={}",
           ti.path, ti.num_segments, train_rd.batches_per_epoch(), B, k);
  if (cfg.limit_batches > 0) steps_per_epoch = std::min(steps_per_epoch, cfg.limit_batches);
  if (cfg.overfit_batches > 0) steps_per_epoch = std::min(steps_per_epoch, cfg.overfit_batches);
  const std::int64_t total_steps = cfg.epochs * steps_per_epoch;
  MF_CHECK(total_steps <= std::numeric_limits<std::int32_t>::max(),
           "train.epochs: {} epochs of {} optimizer steps make {} steps; the schedule accepts at most {}", cfg.epochs,
           steps_per_epoch, total_steps, std::numeric_limits<std::int32_t>::max());

  model::TrainStep ts(step_config(cfg, mc, precision, total_steps), dev, stream);
  LoopState st;
  EventTimer timer(dev);
  ts.set_phase_timer(&timer);  // per-layer times of eager steps
  if (resume) {
    const model::Checkpoint& c = resume->checkpoint;
    check_same_model(c, ts, "--resume");
    RunConfig saved;
    model::load_toml_string(saved, c.get_string("config"), resume->path.string());
    if (saved.seed != cfg.seed || saved.batch_size != cfg.batch_size || saved.grad_accum != cfg.grad_accum ||
        saved.lr != cfg.lr || saved.epochs != cfg.epochs || saved.schedule != cfg.schedule ||
        saved.precision != cfg.precision)
      log_warn("--resume: the configuration differs from the checkpoint's in seed, batch size, accumulation, lr, "
               "epochs, schedule or precision; the run continues but will not match an uninterrupted one");
    restore_checkpoint(ts, c, stream);
    st.step = c.get_int("step");
    st.epoch = c.get_int("epoch");
    st.step_in_epoch = c.get_int("step_in_epoch");
    st.samples = c.get_int("samples");
    st.best_metric = c.get_float("best_metric");
    st.best_step = c.get_int("best_step");
    st.bad_evals = c.get_int("bad_evals");
    st.elapsed_s = c.get_float("elapsed_s");
    log_info("resuming from {} (step {}, epoch {}, step {} of the epoch)", resume->path.string(), st.step,
             st.epoch + 1, st.step_in_epoch);
  } else if (!cfg.init_from.empty()) {
    init_weights_from(ts, cfg.init_from);
    log_info("initial weights from {}", cfg.init_from);
  }

  std::unique_ptr<io::BatchReader> val_rd;
  if (val_ds) val_rd = std::make_unique<io::BatchReader>(val_ds, reader_config(cfg, dev, act, false));
  // --overfit-batches validates on the very batches it trains on.
  std::unique_ptr<io::BatchReader> overfit_rd;
  if (cfg.overfit_batches > 0)
    overfit_rd = std::make_unique<io::BatchReader>(train_ds, reader_config(cfg, dev, act, false));

  std::error_code ec;
  fs::create_directories(out, ec);
  MF_CHECK(!ec, "run.out: cannot create {}: {}", out.string(), ec.message());
  write_text_atomic(out / "config.toml", model::to_toml(cfg));
  if (!resume) fs::remove(out / "metrics.jsonl", ec);
  JsonlWriter mlog(out / "metrics.jsonl", resume ? st.step : -1);
  model::CheckpointDir ckpts(ckpt_dir, cfg.keep_last);

  const int normal_class = ti.normal_class;
  SystemMonitor mon(dev.is_cuda() ? dev.index : -1);
  Progress prog(cfg.progress);
  SignalGuard signals;
  std::int64_t stop_after = -1;
  if (const char* s = std::getenv("MELFORGE_TEST_STOP_AFTER_STEPS")) stop_after = std::stoll(s);

  const std::string dev_name = dev.is_cuda() ? device_properties(dev.index).name : "CPU";
  const auto peak = dev.is_cuda() ? peak_tflops(dev_name) : std::nullopt;
  const double peak_tf = peak ? (precision == model::Precision::fp32 ? peak->fp32 : peak->bf16) : 0.0;
  const ModelFlops flops = leakcnn_flops(mc.in_mels, mc.in_frames, cfg.channels, cfg.pools, cfg.kernel, cfg.dense,
                                         classes);
  prog.message(fmt::format(
      "melforge train: {} on {} ({}), {} parameters, {} precision; {} train segments ({} reader, {} batches of {}), "
      "{} steps/epoch x {} epochs{}",
      mc.str(), dev.str(), dev_name, ts.params().count(), model::precision_name(precision), ti.num_segments,
      train_rd.resident() ? "resident" : "streaming", train_rd.batches_per_epoch(), B, steps_per_epoch, cfg.epochs,
      k > 1 ? fmt::format(" (accumulating {} batches per step)", k) : std::string()));

  EvalOptions eo;
  eo.threshold = cfg.threshold;
  eo.class_loss_weight = cfg.class_loss_weight;
  eo.leak_loss_weight = cfg.leak_loss_weight;
  if (cfg.fast_dev_run) eo.max_segments = B;

  json last_eval = nullptr, last_bottleneck = nullptr, last_phases = nullptr;
  bool early_stopped = false, interrupted = false;
  bool warned_undefined_metric = false;  // eval.metric was NaN once: warned
  double train_wall_s = 0;
  std::int64_t train_samples_timed = 0;
  double time_to_first_step_s = -1;  // launch to the end of this process's first step
  std::vector<double> epoch_times_s;  // training part of each whole epoch (no eval, no checkpoint)
  double gpu_util_sum = 0;
  std::int64_t gpu_util_samples = 0;
  const bool profiling = dev.is_cuda() && cfg.profile_begin() >= 0;

  std::int64_t saved_step = -1;
  bool best_written = false;  // this process wrote checkpoints/best.h5
  auto save = [&](bool best) {
    if (cfg.fast_dev_run) return;
    st.elapsed_s += seconds_since(run_t0);
    const io::ReaderState rs{st.epoch, st.step_in_epoch * k};
    const auto c = make_checkpoint(ts, cfg, st, rs, class_names, normal_class, stream);
    st.elapsed_s -= seconds_since(run_t0);
    const fs::path p = ckpts.save(c, st.step, best);
    saved_step = st.step;
    if (best) best_written = true;
    prog.message(fmt::format("checkpoint {}{}", p.string(), best ? " (best so far)" : ""));
  };

  auto sample_state = [&](std::int64_t step_in_epoch, double sps) {
    ProgressState ps;
    ps.epoch = st.epoch + 1;
    ps.epochs = cfg.epochs;
    ps.step_in_epoch = step_in_epoch;
    ps.steps_per_epoch = steps_per_epoch;
    ps.global_step = st.step;
    ps.samples_per_s = sps;
    const double remaining = double(total_steps - st.step) * double(k * B);
    ps.eta_s = sps > 0 ? remaining / sps : -1;
    return ps;
  };

  // A run that had stopped early is finished: resuming it must not train on
  // (an uninterrupted run would not have).
  if (resume && cfg.patience > 0 && st.bad_evals >= cfg.patience) {
    early_stopped = true;
    prog.message(fmt::format("the run stopped early at step {} ({} evaluations without improvement, eval.patience = "
                             "{}): nothing left to train",
                             st.step, st.bad_evals, cfg.patience));
  }

  ProgressState last_ps;
  std::int64_t start_step = st.step_in_epoch;
  for (; st.epoch < cfg.epochs && !g_stop_signal && !early_stopped; ++st.epoch, start_step = 0) {
    MF_NVTX_RANGE("epoch");
    const io::ReaderState want{st.epoch, start_step * k};
    if (!(train_rd.state() == want)) train_rd.restore(want);
    timer.reset();
    double wait_ms = 0;
    std::int64_t epoch_samples = 0, interval_samples = 0;
    const auto epoch_t0 = std::chrono::steady_clock::now();
    auto interval_t0 = epoch_t0;
    io::Batch last_batch;
    std::int64_t s = start_step;
    for (; s < steps_per_epoch; ++s) {
      if (profiling && st.step == cfg.profile_begin()) {
        MF_CUDA_CHECK(cudaProfilerStart());
        prog.message(fmt::format("profiler capture on at step {}", st.step));
      }
      for (std::int64_t j = 0; j < k; ++j) {
        {
          MF_NVTX_RANGE("data_wait");
          const auto w0 = std::chrono::steady_clock::now();
          last_batch = train_rd.next(stream);
          wait_ms += 1000.0 * seconds_since(w0);
        }
        MF_NVTX_RANGE("h2d_input");
        EventTimer::Scope t(timer, "h2d", stream);
        Tensor x = ts.input_x().slice(j * B, (j + 1) * B), y = ts.input_labels().slice(j * B, (j + 1) * B),
               l = ts.input_leak().slice(j * B, (j + 1) * B);
        x.copy_from(last_batch.x, stream);
        y.copy_from(last_batch.labels, stream);
        l.copy_from(last_batch.leak, stream);
      }
      {
        MF_NVTX_RANGE("step");
        EventTimer::Scope t(timer, "step", stream);
        ts.step(stream);
      }
      if (time_to_first_step_s < 0) {
        stream.synchronize();  // once per run: when did the first step really end?
        time_to_first_step_s = seconds_since(run_t0);
      }
      ++st.step;
      st.step_in_epoch = s + 1;
      st.samples += k * B;
      epoch_samples += k * B;
      interval_samples += k * B;
      if (profiling && st.step == cfg.profile_end()) {
        MF_CUDA_CHECK(cudaProfilerStop());
        prog.message(fmt::format("profiler capture off after step {}", st.step - 1));
      }
      const bool last_of_epoch = s + 1 == steps_per_epoch;
      if (st.step % cfg.log_interval == 0 || last_of_epoch) {
        MF_NVTX_RANGE("log");
        const model::StepMetrics m = ts.read_metrics(stream);  // the one sync per interval
        // Fold the finished timing events back into the timer's pool now that
        // the stream has caught up (no extra wait): otherwise an epoch holds
        // (and creates) events for every step it has timed.
        if (dev.is_cuda()) timer.collect();
        const double dt = seconds_since(interval_t0);
        const double sps = dt > 0 ? double(interval_samples) / dt : 0;
        interval_t0 = std::chrono::steady_clock::now();
        interval_samples = 0;
        const SystemSample sys = mon.sample();
        ProgressState ps = sample_state(s + 1, sps);
        ps.loss = m.loss;
        ps.accuracy = m.samples ? double(m.class_correct) / double(m.samples) : NAN;
        ps.lr = m.lr;
        ps.gpu = sys.gpu_available;
        ps.gpu_util_pct = sys.gpu_util_pct;
        ps.gpu_mem_gib = double(sys.gpu_mem_used) / 1073741824.0;
        ps.gpu_mem_total_gib = double(sys.gpu_mem_total) / 1073741824.0;
        prog.log(ps);
        last_ps = ps;
        json line = {{"type", "train"},
                     {"epoch", st.epoch + 1},
                     {"step", st.step},
                     {"loss", nan_null(m.loss)},
                     {"class_loss", nan_null(m.class_loss)},
                     {"leak_loss", nan_null(m.leak_loss)},
                     {"accuracy", nan_null(ps.accuracy)},
                     {"leak_accuracy", m.samples ? json(double(m.leak_correct) / double(m.samples)) : json(nullptr)},
                     {"lr", m.lr},
                     {"grad_norm", nan_null(m.grad_norm)},
                     {"loss_scale", m.loss_scale},
                     {"skipped_steps", m.skipped_steps},
                     {"samples_per_s", sps},
                     {"cpu_pct", sys.cpu_pct},
                     {"rss_mib", double(sys.rss_bytes) / 1048576.0},
                     {"time_s", st.elapsed_s + seconds_since(run_t0)}};
        if (sys.gpu_available) {
          if (sys.gpu_util_pct >= 0) {
            gpu_util_sum += sys.gpu_util_pct;
            ++gpu_util_samples;
          }
          line["gpu_util_pct"] = sys.gpu_util_pct;
          line["gpu_mem_gib"] = ps.gpu_mem_gib;
        }
        mlog.write(line);
      } else if (prog.mode() == Progress::Mode::tty) {
        // Between log intervals the live line advances the step and keeps the
        // last interval's numbers (reading new ones would need a sync).
        ProgressState ps = sample_state(s + 1, last_ps.samples_per_s);
        ps.loss = last_ps.loss;
        ps.accuracy = last_ps.accuracy;
        ps.lr = last_ps.lr;
        ps.gpu = last_ps.gpu;
        ps.gpu_util_pct = last_ps.gpu_util_pct;
        ps.gpu_mem_gib = last_ps.gpu_mem_gib;
        ps.gpu_mem_total_gib = last_ps.gpu_mem_total_gib;
        prog.tick(ps);
      }
      if (stop_after >= 0 && st.step >= stop_after) g_stop_signal = SIGINT;
      if (g_stop_signal) {
        ++s;
        break;
      }
    }
    stream.synchronize();
    const double epoch_wall_s = seconds_since(epoch_t0);
    if (s < steps_per_epoch) break;  // interrupted inside the epoch: st points at the next step
    train_wall_s += epoch_wall_s;
    train_samples_timed += epoch_samples;
    if (s - start_step == steps_per_epoch) epoch_times_s.push_back(epoch_wall_s);

    // Per-phase times, a forward probe to split the step, the bottleneck.
    {
      MF_NVTX_RANGE("forward_probe");
      EventTimer::Scope t(timer, "forward_probe", stream);
      (void)ts.forward_eval(last_batch.x, stream);
    }
    const auto& tot = timer.collect();
    auto ms = [&](const char* n) {
      auto it = tot.find(n);
      return it == tot.end() ? 0.0 : it->second.total_ms;
    };
    PhaseTimes pt;
    pt.wall_ms = 1000.0 * epoch_wall_s;
    pt.data_wait_ms = wait_ms;
    pt.h2d_ms = ms("h2d");
    pt.step_ms = ms("step");
    pt.steps = s - start_step;
    pt.samples = epoch_samples;
    // Eager steps (the CPU backend, or train.cuda_graphs=false) are split into
    // phases by the step itself; a replayed CUDA graph is not, and then a
    // forward-only probe splits the step's time into estimates.
    double fwd = 0, bwd = 0;
    std::int64_t opt_count = 0;
    for (const auto& [name, stat] : tot) {
      if (name.rfind("fwd.", 0) == 0) fwd += stat.total_ms;
      if (name.rfind("bwd.", 0) == 0 || name == "loss" || name == "accumulate") bwd += stat.total_ms;
      if (name == "optimizer") opt_count = stat.count;
    }
    const bool split = opt_count == pt.steps && pt.steps > 0;
    if (split) {
      pt.forward_ms = fwd;
      pt.backward_ms = bwd;
      pt.optimizer_ms = ms("optimizer");
      pt.step_ms = 0;  // compute = the phases; the rest of the step is overhead
    } else {
      pt.forward_ms = std::min(pt.step_ms, ms("forward_probe") * double(pt.steps * k));
      pt.backward_ms = pt.step_ms - pt.forward_ms;  // loss + backward + optimizer
    }
    BottleneckContext bc;
    bc.on_gpu = dev.is_cuda();
    bc.resident = train_rd.resident();
    bc.fits_on_gpu = false;
    if (dev.is_cuda() && !bc.resident) {
      std::size_t free_b = 0, total_b = 0;
      if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        bc.fits_on_gpu = double(ti.num_segments) * double(ti.segment_elems()) * double(dtype_size(act)) <
                         cfg.gpu_cache_fraction * double(free_b);
    }
    bc.reader_threads = int(cfg.reader_threads);
    bc.cpu_cores = int(::sysconf(_SC_NPROCESSORS_ONLN));
    bc.precision = std::string(model::precision_name(precision));
    bc.cuda_graphs = cfg.cuda_graphs;
    bc.batch_size = B;
    bc.log_interval = cfg.log_interval;
    const double achieved_tf = pt.step_ms > 0 ? flops.train * double(epoch_samples) / (pt.step_ms * 1e-3) / 1e12 : 0;
    bc.achieved_tflops = dev.is_cuda() ? achieved_tf : 0;
    bc.peak_tflops = peak_tf;
    const Bottleneck bn = classify_bottleneck(pt, bc);
    const double epoch_sps = double(epoch_samples) / std::max(epoch_wall_s, 1e-9);
    last_phases = {{"wall_ms", pt.wall_ms},
                   {"data_wait_ms", pt.data_wait_ms},
                   {"h2d_ms", pt.h2d_ms},
                   {"step_ms", ms("step")},
                   {"steps", pt.steps},
                   {"split", split ? "measured per phase (eager steps)" : "forward estimated by a probe (CUDA graph)"},
                   {"forward_ms", pt.forward_ms},
                   {"backward_ms", pt.backward_ms},
                   {"optimizer_ms", pt.optimizer_ms}};
    if (split) {
      json per = json::object();
      for (const auto& [name, stat] : tot)
        if (name != "step" && name != "h2d" && name != "forward_probe") per[name] = stat.total_ms;
      last_phases["per_layer_ms"] = per;
    }
    last_bottleneck = {{"kind", bn.kind},
                       {"input_share", bn.input_share},
                       {"compute_share", bn.compute_share},
                       {"overhead_share", bn.overhead_share},
                       {"summary", bn.summary},
                       {"suggestion", bn.suggestion}};
    const SystemSample sys = mon.sample();
    json eline = {{"type", "epoch"},
                  {"epoch", st.epoch + 1},
                  {"step", st.step},
                  {"samples_per_s", epoch_sps},
                  {"train_tflops", achieved_tf},
                  {"phases", last_phases},
                  {"bottleneck", last_bottleneck},
                  {"cpu_pct", sys.cpu_pct},
                  {"peak_rss_mib", double(sys.peak_rss_bytes) / 1048576.0}};
    if (peak_tf > 0) eline["share_of_peak"] = achieved_tf / peak_tf;
    mlog.write(eline);
    prog.message(fmt::format("epoch {}/{}: {:.0f} samples/s{}; {}", st.epoch + 1, cfg.epochs, epoch_sps,
                             dev.is_cuda() ? fmt::format(", {:.1f} TFLOP/s{}", achieved_tf,
                                                         peak_tf > 0 ? fmt::format(" ({:.0f}% of {} peak)",
                                                                                   100 * achieved_tf / peak_tf,
                                                                                   peak->device)
                                                                     : std::string())
                                           : std::string(),
                             bn.line()));

    // Validation, early stopping, best checkpoint.
    st.step_in_epoch = 0;
    const bool last_epoch = st.epoch + 1 == cfg.epochs;
    bool best = false;
    io::BatchReader* vr = overfit_rd ? overfit_rd.get() : val_rd.get();
    if (vr && ((st.epoch + 1) % cfg.val_every == 0 || last_epoch)) {
      EvalOptions o = eo;
      if (overfit_rd) o.max_segments = steps_per_epoch * k * B;
      const auto e0 = std::chrono::steady_clock::now();
      const EvalRun ev = evaluate(ts, *vr, o, stream);
      const double eval_s = seconds_since(e0);
      json j = model::to_json(ev.result, class_names);
      j["type"] = "eval";
      j["split"] = overfit_rd ? "train-overfit" : "val";
      j["epoch"] = st.epoch + 1;
      j["step"] = st.step;
      j["eval_s"] = eval_s;
      mlog.write(j);
      last_eval = j;
      const double v = model::metric_value(ev.result, cfg.metric);
      const bool higher = cfg.metric_higher_is_better();
      const bool undefined = std::isnan(v);
      const bool improved = std::isfinite(v) && (!std::isfinite(st.best_metric) ||
                                                 (higher ? v > st.best_metric + cfg.min_delta
                                                         : v < st.best_metric - cfg.min_delta));
      if (improved) {
        st.best_metric = v;
        st.best_step = st.step;
        st.bad_evals = 0;
        best = true;
      } else if (undefined) {
        // An undefined metric (NaN) says nothing about progress: it never
        // counts toward eval.patience, and until a finite value exists the
        // newest checkpoint is also the best (the test set never falls back to
        // the final weights for want of a best.h5).
        if (!warned_undefined_metric) {
          warned_undefined_metric = true;
          log_warn("eval.metric {} is undefined (NaN) on the {} set at epoch {}: {}; undefined evaluations do not "
                   "count toward early stopping (eval.patience) and, until the metric has a value, the newest "
                   "checkpoint is kept as the best",
                   cfg.metric, overfit_rd ? "overfit" : "validation", st.epoch + 1,
                   undefined_metric_reason(cfg.metric));
        }
        if (!std::isfinite(st.best_metric)) {
          st.best_step = st.step;
          best = true;
        }
      } else {
        ++st.bad_evals;
      }
      std::string msg = fmt::format("eval epoch {}: loss {:.4f}, segment acc {:.4f} macro-F1 {:.4f} leak AUC {:.4f}",
                                    st.epoch + 1, ev.result.loss, ev.result.segment.accuracy,
                                    ev.result.segment.macro_f1, ev.result.segment.leak_auc);
      if (ev.result.has_files)
        msg += fmt::format("; file acc {:.4f} macro-F1 {:.4f} false alarms {:.4f} ({} files, {:.0f} files/s)",
                           ev.result.file.accuracy, ev.result.file.macro_f1, ev.result.file.false_alarm_rate,
                           ev.files, ev.result.files_per_s);
      msg += fmt::format("; {} {:.4f}{}", cfg.metric, v, improved ? " (best)" : "");
      prog.message(msg);
      if (cfg.patience > 0 && st.bad_evals >= cfg.patience) {
        early_stopped = true;
        prog.message(fmt::format("early stop: {} has not improved for {} evaluations (best {:.4f} at step {})",
                                 cfg.metric, st.bad_evals, st.best_metric, st.best_step));
      }
    } else if (!vr && (st.epoch + 1) % cfg.val_every == 0) {
      best = true;  // without validation the newest is the best
      st.best_step = st.step;
    }
    const bool due = (st.epoch + 1) % cfg.checkpoint_every == 0 || last_epoch || early_stopped || best;
    if (due) {
      const std::int64_t e = st.epoch;
      ++st.epoch;  // the state points at the next epoch
      save(best);
      st.epoch = e;
    }
  }
  prog.finish();
  if (g_stop_signal) {
    interrupted = true;
    if (stop_after < 0)
      prog.message(fmt::format("{}: stopping after step {}", g_stop_signal == SIGTERM ? "SIGTERM" : "SIGINT", st.step));
    if (saved_step != st.step) save(false);
  }

  // The report: the final validation, the test set with the best weights.
  json report = {{"melforge", "0.1.0"},
                 {"run_dir", out.string()},
                 {"device", dev.str()},
                 {"device_name", dev_name},
                 {"precision", std::string(model::precision_name(precision))},
                 {"model", mc.str()},
                 {"parameters", ts.params().count()},
                 {"steps", st.step},
                 {"samples", st.samples},
                 {"interrupted", interrupted},
                 {"early_stopped", early_stopped},
                 {"train_samples_per_s", train_wall_s > 0 ? double(train_samples_timed) / train_wall_s : 0.0},
                 {"train_flops_per_sample", flops.train},
                 {"best_metric", {{"name", cfg.metric}, {"value", nan_null(st.best_metric)}, {"step", st.best_step}}},
                 {"last_epoch_phases", last_phases},
                 {"last_epoch_bottleneck", last_bottleneck},
                 {"val", last_eval}};
  if (peak) report["peak_tflops"] = {{"value", peak_tf}, {"source", peak->source}, {"table_entry", peak->device}};
  if (test_ds && !interrupted) {
    // best.h5 is trusted only when it belongs to this run: written by this
    // process, or (resumed) the checkpoint of the best step the resumed state
    // records. Anything else (a leftover of an earlier run) is ignored.
    std::optional<model::Checkpoint> best_ckpt;
    if (fs::exists(ckpts.best_path()) && (best_written || (resume && st.best_step >= 0))) {
      model::Checkpoint c = model::read_checkpoint(ckpts.best_path());
      if (best_written || c.get_int("step") == st.best_step)
        best_ckpt = std::move(c);
      else
        log_warn("{} holds step {}, not this run's best step {}: the test set uses the final weights",
                 ckpts.best_path().string(), c.get_int("step"), st.best_step);
    } else if (fs::exists(ckpts.best_path())) {
      log_warn("{} was not written by this run: the test set uses the final weights", ckpts.best_path().string());
    }
    if (best_ckpt) {
      restore_checkpoint(ts, *best_ckpt, stream);
      report["test_weights"] = fmt::format("best ({} at step {})", cfg.metric, st.best_step);
    } else {
      report["test_weights"] = "final";
    }
    io::BatchReader test_rd(test_ds, reader_config(cfg, dev, act, false));
    const EvalRun ev = evaluate(ts, test_rd, eo, stream);
    json j = model::to_json(ev.result, class_names);
    j["type"] = "eval";
    j["split"] = "test";
    j["step"] = st.step;
    mlog.write(j);
    report["test"] = j;
  }
  report["elapsed_s"] = st.elapsed_s + seconds_since(run_t0);
  // Top-level figures for side-by-side comparisons (bench/compare_torch.py).
  // Steady throughput leaves out the first epoch (graph capture, warm-up)
  // when there is more than one.
  report["dataset_load_s"] = dataset_load_s;
  report["time_to_first_step_s"] = time_to_first_step_s >= 0 ? json(time_to_first_step_s) : json(nullptr);
  report["launch_to_first_step_excl_load_s"] =
      time_to_first_step_s >= 0 ? json(time_to_first_step_s - dataset_load_s) : json(nullptr);
  if (!epoch_times_s.empty()) {
    const std::size_t skip = epoch_times_s.size() > 1 ? 1 : 0;
    double t = 0;
    for (std::size_t i = skip; i < epoch_times_s.size(); ++i) t += epoch_times_s[i];
    const double n = double(epoch_times_s.size() - skip);
    report["epoch_time_s"] = t / n;
    report["steady_samples_per_s"] = double(steps_per_epoch * k * B) / (t / n);
  } else {
    report["epoch_time_s"] = nullptr;
    report["steady_samples_per_s"] = nullptr;
  }
  report["gpu_util_mean_pct"] = gpu_util_samples ? json(gpu_util_sum / double(gpu_util_samples)) : json(nullptr);
  report["peak_device_memory_bytes"] = dev.is_cuda() ? json(device_pool_stats(dev.index).high_water) : json(nullptr);
  write_json_atomic(out / "report.json", report);
  std::vector<fs::path> plots;
  try {
    plots = plot_run(out);
  } catch (const Error& e) {
    log_warn("plots: {}", e.message());
  }

  // The summary on stdout.
  fmt::print("\nmelforge train: {} steps, {} samples, {:.0f} samples/s{}\n", st.step, st.samples,
             report["train_samples_per_s"].get<double>(),
             interrupted ? " (interrupted: resume with --resume auto)" : early_stopped ? " (early stop)" : "");
  auto print_metrics = [](const char* what, const json& j) {
    if (j.is_null()) return;
    fmt::print("{}: segment accuracy {:.4f}, macro-F1 {:.4f}", what, j["segment"]["accuracy"].get<double>(),
               j["segment"]["macro_f1"].get<double>());
    if (j.contains("file"))
      fmt::print("; file accuracy {:.4f}, macro-F1 {:.4f}, balanced accuracy {:.4f}, leak AUC {}, false alarms {}",
                 j["file"]["accuracy"].get<double>(), j["file"]["macro_f1"].get<double>(),
                 j["file"]["balanced_accuracy"].get<double>(), j["file"]["leak"]["roc_auc"].dump(),
                 j["file"]["leak"]["false_alarm_rate"].dump());
    fmt::print("\n");
  };
  print_metrics("final validation", last_eval);
  if (report.contains("test")) print_metrics("test (best weights)", report["test"]);
  fmt::print("report: {}\n", (out / "report.json").string());
  std::vector<std::string> plot_names;
  for (const auto& p : plots) plot_names.push_back(p.string());
  if (!plots.empty()) fmt::print("plots:  {}\n", fmt::join(plot_names, ", "));
  if (!cfg.fast_dev_run) fmt::print("checkpoints: {}\n", ckpt_dir.string());
  std::fflush(stdout);
  return 0;
}

}  // namespace mf::tools
