#include "train/trainer.hpp"

#include <cuda_profiler_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dist/collectives.hpp"
#include "dist/world.hpp"
#include "engine/error.hpp"
#include "engine/log.hpp"
#include "engine/memory.hpp"
#include "engine/nvtx.hpp"
#include "engine/stream.hpp"
#include "engine/timer.hpp"
#include "io/dataset.hpp"
#include "io/reader.hpp"
#include "model/checkpoint.hpp"
#include "model/heads.hpp"
#include "model/metrics.hpp"
#include "model/train_step.hpp"
#include "train/batch_size.hpp"
#include "train/early_stopping.hpp"
#include "train/epoch_report.hpp"
#include "train/evaluate.hpp"
#include "train/load_model.hpp"
#include "train/perf.hpp"
#include "train/plot.hpp"
#include "train/progress.hpp"
#include "train/run_checkpoint.hpp"
#include "train/run_log.hpp"
#include "train/run_setup.hpp"
#include "train/stop_request.hpp"
#include "train/sysmon.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace mf::train {

using model::RunConfig;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The GPU of this process: with several processes on a node, `cuda` (or
// `auto`, or `gpu`) means the node's GPU of this process's local rank (modulo
// the GPUs it has, so more processes than GPUs share them); an explicit
// `cuda:N` is kept.
Device gpu_of_this_rank(Device d, std::string_view spec, const dist::World& world) {
  if (!d.is_cuda() || !world.distributed() || spec.starts_with("cuda:")) return d;
  return Device::cuda(world.local_rank() % cuda_device_count());
}

json nan_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// A metric value for a line of text: 4 decimals, "n/a" when undefined.
std::string metric_text(const json& v) {
  return v.is_number() ? fmt::format("{:.4f}", v.get<double>()) : std::string("n/a");
}

// The validation line's figures: class metrics, or an embedding model's error rates.
std::string eval_line(const model::EvalResult& e, std::int64_t files, std::int64_t epoch) {
  if (!e.has_class) {
    const model::VerificationMetrics& v = e.verification;
    // Fractions, as in report.json and the final summary (0.0470 is 4.7%).
    return fmt::format("eval epoch {}: EER {:.4f} minDCF(0.05) {:.4f} minDCF(0.01) {:.4f} ({} trials over {} files)",
                       epoch, v.eer, v.min_dcf_05, v.min_dcf_01, v.trials, v.files);
  }
  // Each figure under the level it is measured at (segments, or files by vote).
  std::string msg = fmt::format("eval epoch {}: loss {:.4f}; segments: acc {:.4f} macro-F1 {:.4f}", epoch, e.loss,
                                e.segment.accuracy, e.segment.macro_f1);
  if (e.has_leak()) msg += fmt::format(" leak AUC {:.4f}", e.segment.leak_auc);
  if (e.has_files) {
    msg += fmt::format("; files: acc {:.4f} macro-F1 {:.4f}", e.file.accuracy, e.file.macro_f1);
    if (e.has_leak()) msg += fmt::format(" leak AUC {:.4f} false alarms {:.4f}", e.file.leak_auc, e.file.false_alarm_rate);
    msg += fmt::format(" ({} files)", files);
  }
  return msg;
}

// Why eval.metric can be NaN on a validation set (for the warning).
std::string undefined_metric_reason(const std::string& metric) {
  if (metric.find("leak_auc") != std::string::npos)
    return "the leak AUC needs both leak and non-leak examples, and the set holds a single leak label";
  if (metric.find("loss") != std::string::npos) return "the loss is not a number (diverged weights or inputs)";
  return "the metric has no examples to average over (an empty set or classes without examples)";
}

// The training data, opened and checked before anything is written.
struct RunData {
  std::shared_ptr<const io::Dataset> train, val, test;
  int classes = 0;
  std::vector<std::string> class_names;  // one per class (generated where the file has none)
  int normal_class = 0;
};

// `num_classes_from` and `normal_class_from` say where model.num_classes and
// data.normal_class came from, for messages.
RunData open_run_data(const RunConfig& cfg, const std::string& num_classes_from, const std::string& normal_class_from) {
  io::DatasetNames names = dataset_names(cfg);
  names.num_classes_from = num_classes_from;
  names.normal_class_from = normal_class_from;
  RunData d;
  d.train = io::Dataset::open(cfg.train_path, names);
  const io::DatasetInfo& ti = d.train->info();
  MF_CHECK(!ti.ragged() || cfg.crop_frames > 0, "{}: holds {} whole utterances (the shortest {} frames): set "
           "data.crop_frames to the frames of each training crop (voxceleb_trainer's 2 s are 200 frames at a 10 ms "
           "hop)", cfg.train_path, ti.num_files, ti.frames);
  // A classifier's validation and test data have the training set's classes,
  // matched by name; an embedding model's are other speakers (scored by trials).
  io::DatasetNames model_names = eval_dataset_names(cfg);
  model_names.num_classes_from = num_classes_from;
  model_names.normal_class_from = normal_class_from;
  model_names.classes_from = "the training set " + cfg.train_path;
  if (cfg.loss_type == model::LossType::softmax)
    model_names.classes = ti.class_names;
  else
    model_names.num_classes = 0;  // other speakers: as many as each file has
  auto open_compatible = [&](const std::string& path, const char* key) {
    auto ds = io::Dataset::open(path, model_names);  // its errors name the file
    const io::DatasetInfo& vi = ds->info();
    // Whole utterances may be evaluated at another crop length (eval.crop_frames): the model is checked then.
    MF_CHECK(vi.n_mels == ti.n_mels && (vi.frames == ti.frames || vi.ragged()),
             "{} {}: segments are {}x{}, the training set's {}x{}", key, vi.path, vi.n_mels, vi.frames, ti.n_mels,
             ti.frames);
    if (!model_names.classes.empty() && vi.classes_present.size() < vi.class_names.size())
      log_info("{} {}: {} of the training set's {} classes ({}), matched by name", key, vi.path,
               vi.classes_present.size(), vi.class_names.size(), fmt::join(vi.classes_present, ", "));
    return ds;
  };
  if (!cfg.val_path.empty()) d.val = open_compatible(cfg.val_path, "data.val");
  if (!cfg.test_path.empty()) d.test = open_compatible(cfg.test_path, "data.test");
  d.classes = int(cfg.num_classes);
  if (d.classes == 0) d.classes = ti.num_classes;
  MF_CHECK(d.classes >= 2, "data.train {}: {} class(es) found; LeakCNN needs at least 2 (set model.num_classes)",
           ti.path, d.classes);
  d.class_names = ti.class_names;
  while (int(d.class_names.size()) < d.classes) d.class_names.push_back(fmt::format("class_{}", d.class_names.size()));
  d.normal_class = ti.normal_class;
  return d;
}

}  // namespace

// ---- the run's state --------------------------------------------------------------

class Trainer::Run {
 public:
  Run(RunConfig cfg, TrainerOptions options);

  void restore_or_init();
  bool epochs_left() { return state_.epoch < cfg_.epochs && !stop_requested() && !early_stopped_; }
  bool train_epoch();
  void report_epoch();
  bool validate();
  void checkpoint_after_epoch(bool best);
  void finish_training();
  void report();

 private:
  void resolve_heads(const io::DatasetInfo& train);
  // Data parallelism: every rank runs the same configuration, data and
  // melforge (else an error naming what differs), on the CPU, with a batch
  // that splits evenly and no batch norm (not yet combined across ranks).
  void check_job(const io::DatasetInfo& train) const;
  // The job's exchanges of the step's tensors (dist.transport), timed into comm_s_.
  void make_collectives();
  // Every rank's weights (CRC-32 of the master) against rank 0's, before a
  // checkpoint: an error names the ranks that differ.
  void check_same_weights() const;
  // Whether a stop was requested (SIGINT, SIGTERM, --stop-after-steps): on
  // any rank, so every rank stops after the same step.
  bool stop_requested();
  // `key`, or "key (saved in CHECKPOINT)" when a resumed run took it from its checkpoint: for messages.
  std::string setting_origin(const std::string& key) const;
  void log_interval(std::int64_t step_in_epoch);
  void tick(std::int64_t step_in_epoch);
  void set_position(ProgressState& ps, std::int64_t step_in_epoch, double samples_per_s) const;
  void feed_step(std::int64_t micro_batch);
  void save(bool best, std::int64_t epoch_of_next_step);
  std::optional<model::Checkpoint> best_checkpoint_of_this_run();
  json test_with_best_weights(json& report);
  json report_json();
  void print_summary(const json& report, const std::vector<fs::path>& plots) const;

  // Configuration and setup.
  RunConfig cfg_;
  TrainerOptions options_;
  const dist::World& world_ = dist::World::get();  // the job's processes (one unless launched by mpirun/srun)
  std::unique_ptr<dist::Collectives> collectives_;   // with several processes: gradients and statistics
  double comm_s_ = 0;                                // time in the gradients' exchanges, this process
  double epoch_comm_s0_ = 0;                         // comm_s_ when the epoch started
  bool stop_agreed_ = false;
  Clock::time_point run_t0_ = Clock::now();
  Device device_;
  model::Precision precision_;  // train.precision resolved for the device
  DType act_dtype_;             // the activations' and working weights' dtype
  fs::path out_dir_, ckpt_dir_;  // run.out and its checkpoints/
  std::optional<model::FoundCheckpoint> resume_;  // the checkpoint run.resume found, if any
  RunData data_;
  model::ModelConfig model_config_;
  double dataset_load_s_ = 0;
  std::int64_t accum_steps_ = 1;  // micro-batches per optimizer step (train.grad_accum)
  std::int64_t micro_batch_ = 1;  // samples per micro-batch of this process (train.batch_size / world size)
  std::int64_t steps_per_epoch_ = 0, total_steps_ = 0;
  std::string device_name_;
  std::optional<PeakTflops> device_peak_;  // the GPU's dense peak, when known
  double peak_tflops_ = 0;                 // that peak for this run's precision (0: unknown)
  ModelFlops flops_;
  bool profiling_ = false;
  EvalOptions eval_options_;

  // Components, built in the constructor once the data and device are known.
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<io::BatchReader> train_reader_, val_reader_, overfit_reader_;
  std::unique_ptr<model::TrainStep> train_step_;
  std::unique_ptr<EventTimer> timer_;
  std::unique_ptr<SystemMonitor> sysmon_;
  std::unique_ptr<Progress> progress_;
  std::unique_ptr<JsonlWriter> metrics_log_;
  std::unique_ptr<model::CheckpointDir> checkpoints_;
  std::optional<StopRequest> stop_;  // installed by restore_or_init, for the loop

  // Where the run stands.
  RunState state_;
  EarlyStopping selection_{MetricGoal{}};
  bool early_stopped_ = false, interrupted_ = false, warned_undefined_metric_ = false, best_written_ = false;
  std::int64_t saved_step_ = -1;

  // The current epoch.
  std::int64_t start_step_ = 0;  // first step of this epoch run by this process
  std::int64_t epoch_steps_done_ = 0;
  double epoch_wall_s_ = 0, wait_ms_ = 0;
  std::int64_t epoch_samples_ = 0, interval_samples_ = 0;
  Clock::time_point interval_t0_;
  io::Batch last_batch_;
  ProgressState last_ps_;

  // Totals for the report.
  json last_eval_ = nullptr, last_bottleneck_ = nullptr, last_phases_ = nullptr;
  double train_wall_s_ = 0;
  std::int64_t train_samples_timed_ = 0;
  double time_to_first_step_s_ = -1;  // launch to the end of this process's first step
  std::vector<double> epoch_times_s_;  // training part of each whole epoch
  double gpu_util_sum_ = 0;
  std::int64_t gpu_util_samples_ = 0;
};

// ---- setup --------------------------------------------------------------------------

Trainer::Run::Run(RunConfig cfg, TrainerOptions options) : cfg_(std::move(cfg)), options_(options) {
  // Rank 0 tells the job's story; the others speak only of trouble.
  if (!world_.is_root() && log_level() < LogLevel::warn) set_log_level(LogLevel::warn);
  out_dir_ = fs::path(cfg_.out);
  ckpt_dir_ = out_dir_ / "checkpoints";
  MF_CHECK(!cfg_.out.empty(), "run.out: expected a non-empty directory path, found ''");
  resume_ = find_resume_checkpoint(cfg_, ckpt_dir_);  // before anything is written
  if (resume_ && options_.given_keys) cfg_ = resumed_config(*resume_, cfg_, *options_.given_keys);
  cfg_.resume.clear();  // config.toml and the checkpoints record the run, not how this process started
  // A resumed run's settings come from its checkpoint: their errors say so.
  auto saved_settings = [&](auto&& check) {
    try {
      check();
    } catch (const Error& e) {
      if (!resume_) throw;
      MF_THROW("{} (the configuration saved in {}:/strings/config, with this command's settings)", e.message(),
               resume_->path.string());
    }
  };
  saved_settings([&] { model::validate(cfg_); });
  if (cfg_.fast_dev_run) {
    cfg_.epochs = 1;
    cfg_.limit_batches = 1;
    cfg_.overfit_batches = 0;
  }
  device_ = gpu_of_this_rank(parse_device(cfg_.device), cfg_.device, world_);
  set_current(device_);
  precision_ = resolve_precision(cfg_.precision, device_);
  act_dtype_ = model::activation_dtype(precision_);

  // Data (validated at open: a bad file stops here, before anything is written).
  const auto load_t0 = Clock::now();
  data_ = open_run_data(cfg_, setting_origin("model.num_classes"), setting_origin("data.normal_class"));
  const io::DatasetInfo& ti = data_.train->info();
  resolve_heads(ti);
  resolve_frontend(cfg_, ti);
  saved_settings([&] {
    model_config_ = model_config(cfg_, ti.n_mels, ti.frames, data_.classes);
    for (const auto* ds : {data_.val.get(), data_.test.get()})
      if (ds) check_whole_utterance_eval(model_config_, ds->info(), ds->info().path);
    (void)model::param_layout(model_config_);  // its size bound, before anything is allocated
    if (cfg_.batch_size == 0) {
      cfg_.batch_size = auto_batch_size(ti.num_segments, cfg_.grad_accum, device_.is_cuda());
      const std::int64_t w = world_.size();
      cfg_.batch_size = std::max(w, cfg_.batch_size / w * w);  // splits evenly over the processes
      log_info("train.batch_size = auto: {} for {} training segments on the {}", cfg_.batch_size, ti.num_segments,
               device_.is_cuda() ? "GPU" : "CPU");
    }
    if (cfg_.batch_size % world_.size() != 0 && world_.distributed()) {
      const std::int64_t w = world_.size(), lo = cfg_.batch_size / w * w;
      MF_THROW("train.batch_size = {} does not split over {} processes: use {} or {} (a multiple of {}; each "
               "process then takes {} or {} per micro-batch)", cfg_.batch_size, w, std::max(lo, w), lo + w, w,
               std::max(lo, w) / w, lo / w + 1);
    }
    MF_CHECK(!cfg_.drop_last || cfg_.per_class > 0 || ti.num_segments >= cfg_.batch_size,
             "train.batch_size = {}: data.train {} has {} segments, fewer than one batch, and train.drop_last = true "
             "drops a partial batch: use a smaller train.batch_size (or auto), or set train.drop_last = false",
             cfg_.batch_size, ti.path, ti.num_segments);
  });
  stream_ = std::make_unique<Stream>(device_, "compute");
  dist::World::get().set_timeout(cfg_.dist_timeout);
  if (world_.distributed()) check_job(ti);
  saved_settings([&] {
    // The order of one process running micro-batches of batch_size / world
    // size with world size times the accumulation; each process reads only
    // its own of them (ReaderConfig::share).
    io::ReaderConfig rc = reader_config(cfg_, device_, act_dtype_, true);
    rc.batch_size = cfg_.batch_size / world_.size();
    rc.share = world_.rank();  // each process reads its own micro-batches only
    rc.shares = world_.size();
    train_reader_ = std::make_unique<io::BatchReader>(data_.train, rc);
  });
  // Opening the datasets and (resident mode) loading the training set: the
  // "dataset load" that time-to-first-step figures leave out.
  dataset_load_s_ = seconds_since(load_t0);

  accum_steps_ = cfg_.grad_accum;
  micro_batch_ = cfg_.batch_size / world_.size();
  steps_per_epoch_ = train_reader_->batches_per_epoch() / (accum_steps_ * world_.size());
  if (steps_per_epoch_ == 0 && world_.distributed())
    MF_THROW("data.train {}: {} segments make {} micro-batches of {} (train.batch_size {} over {} processes), fewer "
             "than one step needs ({} processes x train.grad_accum={}); use a smaller train.batch_size or "
             "train.grad_accum", ti.path, ti.num_segments, train_reader_->batches_per_epoch(), micro_batch_,
             cfg_.batch_size, world_.size(), world_.size(), accum_steps_);
  MF_CHECK(steps_per_epoch_ > 0,
           "data.train {}: {} segments make {} batches of {} (train.batch_size), fewer than train.grad_accum={}",
           ti.path, ti.num_segments, train_reader_->batches_per_epoch(), micro_batch_, accum_steps_);
  if (cfg_.limit_batches > 0) steps_per_epoch_ = std::min(steps_per_epoch_, cfg_.limit_batches);
  if (cfg_.overfit_batches > 0) steps_per_epoch_ = std::min(steps_per_epoch_, cfg_.overfit_batches);
  total_steps_ = cfg_.epochs * steps_per_epoch_;
  MF_CHECK(total_steps_ <= std::numeric_limits<std::int32_t>::max(),
           "train.epochs: {} epochs of {} optimizer steps make {} steps; the schedule accepts at most {}", cfg_.epochs,
           steps_per_epoch_, total_steps_, std::numeric_limits<std::int32_t>::max());

  model::TrainConfig tc = step_config(cfg_, model_config_, precision_, total_steps_);
  set_augmentation(tc, cfg_, ti);
  tc.micro_batch = micro_batch_;
  tc.world_rank = world_.rank();
  tc.world_size = world_.size();
  tc.reduce_in_order = cfg_.dist_reduce == model::DistReduce::ordered;
  if (world_.distributed()) make_collectives();
  if (collectives_) {
    tc.gather = [this](const Tensor& mine, Tensor& all, cudaStream_t s) {
      const auto t0 = Clock::now();
      collectives_->allgather(mine, all, s, "gathering the gradients");
      comm_s_ += seconds_since(t0);
    };
  }
  if (collectives_ && !tc.reduce_in_order) {
    tc.bucket_elems = std::max<std::int64_t>(1, std::int64_t(cfg_.dist_bucket_mb * 1048576.0 / sizeof(float)));
    tc.allreduce_start = [this](Tensor& bucket, cudaStream_t s) {
      const auto t0 = Clock::now();
      collectives_->allreduce_sum_start(bucket, s, "summing the gradients");
      comm_s_ += seconds_since(t0);
    };
    tc.allreduce_finish = [this](cudaStream_t s) {
      const auto t0 = Clock::now();
      collectives_->allreduce_finish(s, "summing the gradients");
      comm_s_ += seconds_since(t0);
    };
  }
  train_step_ = std::make_unique<model::TrainStep>(tc, device_, *stream_);
  if (!train_step_->frozen_params().empty()) {
    std::vector<std::string> names;
    for (const model::ParamInfo* p : train_step_->frozen_params()) names.push_back(p->name);
    log_info("train.freeze: {} of {} parameters frozen (no update): {}", names.size(),
             train_step_->params().params().size(), fmt::join(names, ", "));
  }
  timer_ = std::make_unique<EventTimer>(device_);
  train_step_->set_phase_timer(timer_.get());  // per-layer times of eager steps
  if (data_.val) val_reader_ = std::make_unique<io::BatchReader>(data_.val, reader_config(cfg_, device_, act_dtype_, false));
  // --overfit-batches validates on the very batches it trains on.
  if (cfg_.overfit_batches > 0)
    overfit_reader_ = std::make_unique<io::BatchReader>(data_.train, reader_config(cfg_, device_, act_dtype_, false));

  device_name_ = device_.is_cuda() ? device_properties(device_.index).name : "CPU";
  device_peak_ = device_.is_cuda() ? peak_tflops(device_name_) : std::nullopt;
  peak_tflops_ = device_peak_ ? (precision_ == model::Precision::fp32 ? device_peak_->fp32 : device_peak_->bf16) : 0.0;
  flops_ = model_flops(model_config_);
  profiling_ = device_.is_cuda() && cfg_.profile_begin() >= 0;
  eval_options_.threshold = cfg_.threshold;
  eval_options_.class_loss_weight = cfg_.class_loss_weight;
  eval_options_.leak_loss_weight = cfg_.leak_loss_weight;
  if (cfg_.fast_dev_run) eval_options_.max_segments = micro_batch_;
  eval_options_.shard = world_.distributed();  // each process evaluates its share of the batches
  selection_ = EarlyStopping(MetricGoal{cfg_.metric_higher_is_better(), cfg_.min_delta, cfg_.patience});
  sysmon_ = std::make_unique<SystemMonitor>(device_.is_cuda() ? device_.index : -1);
  // Rank 0 alone reports (progress, metrics, checkpoints, report.json, plots).
  progress_ = std::make_unique<Progress>(cfg_.progress, world_.is_root() ? stderr : nullptr);
}

// model.heads = auto becomes class or class+leak, recorded resolved in
// config.toml and the checkpoints. A resumed run keeps its checkpoint's heads
// (runs saved before the key existed had both), whatever the data would say.
void Trainer::Run::resolve_heads(const io::DatasetInfo& train) {
  if (cfg_.heads == model::Heads::automatic && resume_)
    cfg_.heads = checkpoint_config(resume_->checkpoint).heads;
  cfg_.heads = model::resolve_heads(cfg_, train);
  // A metric loss has no class head to score: it validates by the EER of
  // trials drawn from the validation set.
  if (cfg_.metric == "auto") cfg_.metric = cfg_.loss_type == model::LossType::softmax ? "val.file.macro_f1" : "val.eer";
  model::validate(cfg_);  // with the heads known: a leak eval.metric needs the leak head
}

// ---- data parallelism ------------------------------------------------------------------

namespace {

// What identifies a file across processes: its path, size and modification time.
std::string file_identity(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  const auto mtime = fs::last_write_time(path, ec);
  return fmt::format("{} ({} bytes, modified {})", path, ec ? 0 : size,
                     ec ? 0 : mtime.time_since_epoch().count());
}

}  // namespace

void Trainer::Run::check_job(const io::DatasetInfo& train) const {
  const std::string mine = model::to_toml(cfg_);
  const std::string root = world_.broadcast(mine, "comparing the processes' configurations");
  if (root != mine) {
    RunConfig theirs;
    model::load_toml_string(theirs, root, "rank 0's configuration");
    MF_THROW("rank {}: its configuration differs from rank 0's: {} (rank 0's value first); every process of a job "
             "must run the same command", world_.rank(), fmt::join(model::config_differences(theirs, cfg_), "; "));
  }
  const auto agree = [&](const std::string& what, const std::string& value) {
    const std::string r = world_.broadcast(value, "comparing the processes' " + what);
    MF_CHECK(r == value, "rank {}: its {} is {}, rank 0's {}; every process of a job must run the same melforge on "
             "the same files", world_.rank(), what, value, r);
  };
  agree("melforge binary", file_identity(fs::read_symlink("/proc/self/exe").string()));
  agree("data.train", file_identity(train.path));
  if (!cfg_.val_path.empty()) agree("data.val", file_identity(cfg_.val_path));
  MF_CHECK(cfg_.overfit_batches == 0, "train.overfit_batches: not available with data-parallel training");
}

void Trainer::Run::make_collectives() {
  const auto requested = cfg_.dist_transport == model::DistTransport::nccl  ? dist::Transport::nccl
                         : cfg_.dist_transport == model::DistTransport::mpi ? dist::Transport::mpi
                                                                             : dist::Transport::automatic;
  collectives_ = dist::make_collectives(world_, device_, requested);
  log_info("data parallelism: {} processes on {} ({} per node), gradients {} over {}", world_.size(),
           device_.is_cuda() ? "GPUs" : "CPUs", world_.local_size(),
           cfg_.dist_reduce == model::DistReduce::ordered ? "gathered in order" : "all-reduced",
           collectives_->describe());
}

void Trainer::Run::check_same_weights() const {
  const Tensor& dev_master = train_step_->params().master();
  const Tensor master = dev_master.is_cuda() ? dev_master.to(Device::cpu(), *stream_) : dev_master;
  const double mine = model::crc32(master.raw(), master.nbytes());
  const std::vector<double> all = world_.allgather(std::span<const double>(&mine, 1), "comparing the weights");
  std::vector<int> differ;
  for (int r = 1; r < world_.size(); ++r)
    if (all[std::size_t(r)] != all[0]) differ.push_back(r);
  MF_CHECK(differ.empty(), "step {}: the weights of rank(s) {} differ from rank 0's (CRC-32 {:08x} against {:08x}): "
           "the processes no longer train the same model; stopping before a checkpoint is written", state_.step,
           fmt::join(differ, ", "), std::uint32_t(all[std::size_t(differ.empty() ? 0 : differ[0])]),
           std::uint32_t(all[0]));
}

bool Trainer::Run::stop_requested() {
  if (!world_.distributed()) return stop_->requested();
  stop_agreed_ = stop_agreed_ || world_.any(stop_->requested(), "agreeing on a stop request");
  return stop_agreed_;
}

std::string Trainer::Run::setting_origin(const std::string& key) const {
  const bool saved = resume_ && options_.given_keys && !std::ranges::count(*options_.given_keys, key);
  return saved ? fmt::format("{} (saved in {})", key, resume_->path.string()) : key;
}

// ---- restore_or_init: the starting state ----------------------------------------------

void Trainer::Run::restore_or_init() {
  if (resume_) {
    const model::Checkpoint& c = resume_->checkpoint;
    check_same_model(c, *train_step_, "--resume");
    const model::RunConfig saved = checkpoint_config(c);
    std::vector<std::string> changed = resume_differences(saved, cfg_);
    // Another world size with the same micro-batches (batch_size / processes)
    // and as many of them per step is the same training: not a change.
    const std::int64_t was = c.has("world_size") ? c.get_int_in("world_size", 1, 1 << 20) : 1;
    const std::int64_t w = world_.size();
    if (was != w && saved.batch_size * w == cfg_.batch_size * was && saved.grad_accum * was == cfg_.grad_accum * w) {
      std::erase_if(changed, [](const std::string& d) {
        return d.starts_with("train.batch_size:") || d.starts_with("train.grad_accum:");
      });
      log_info("--resume: {} process(es), the checkpoint's run {}: the same {} micro-batches of {} a step", w, was,
               cfg_.grad_accum * w, cfg_.batch_size / w);
    }
    if (!changed.empty())
      log_warn("--resume: {} setting(s) differ from the run's: {}; the run continues with them (where they change "
               "the training, it will not match an uninterrupted run)", changed.size(), fmt::join(changed, ", "));
    restore_run_checkpoint(*train_step_, c, *stream_);
    state_ = run_state_of(c);
    // A finished epoch is saved as the next one's step 0: the step inside the
    // epoch is below this run's steps per epoch (the same data and batching).
    MF_CHECK(state_.step_in_epoch < steps_per_epoch_,
             "--resume {}: /ints/step_in_epoch = {}, but an epoch of this run has {} optimizer steps (expected 0..{}; "
             "data.train, train.batch_size, train.grad_accum and train.limit_batches set them)",
             resume_->path.string(), state_.step_in_epoch, steps_per_epoch_, steps_per_epoch_ - 1);
    selection_ = EarlyStopping(selection_.goal(), state_.best);
    log_info("resuming from {} (step {}, epoch {}, step {} of the epoch)", resume_->path.string(), state_.step,
             state_.epoch + 1, state_.step_in_epoch);
  } else if (!cfg_.init_from.empty()) {
    const InitFromReport r = init_weights_from(*train_step_, cfg_.init_from);
    log_info("initial weights from {}: loaded {} parameters ({})", cfg_.init_from, r.loaded.size(),
             fmt::join(r.loaded, ", "));
    if (!r.reinitialised.empty())
      log_info("--init-from: re-initialised from train.seed: {}", fmt::join(r.reinitialised, ", "));
    if (!r.unused.empty()) log_info("--init-from: not used (no such parameter here): {}", fmt::join(r.unused, ", "));
  }

  std::error_code ec;
  fs::create_directories(out_dir_, ec);
  MF_CHECK(!ec, "run.out: cannot create {}: {}", out_dir_.string(), ec.message());
  if (world_.is_root()) {
    write_text_atomic(out_dir_ / "config.toml", model::to_toml(cfg_));
    if (!resume_) fs::remove(out_dir_ / "metrics.jsonl", ec);
    metrics_log_ = std::make_unique<JsonlWriter>(out_dir_ / "metrics.jsonl", resume_ ? state_.step : -1);
  }
  checkpoints_ = std::make_unique<model::CheckpointDir>(ckpt_dir_, cfg_.keep_last);
  stop_.emplace();

  const io::DatasetInfo& ti = data_.train->info();
  progress_->message(fmt::format(
      "melforge train: {} on {} ({}), {} parameters, {} precision; {} train segments ({} reader, {} batches of {}), "
      "{} steps/epoch x {} epochs{}; augmentation {}",
      model_config_.str(), device_.str(), device_name_, train_step_->params().count(), model::precision_name(precision_),
      ti.num_segments, train_reader_->resident() ? "resident" : "streaming", train_reader_->batches_per_epoch(),
      micro_batch_, steps_per_epoch_, cfg_.epochs,
      accum_steps_ > 1 ? fmt::format(" (accumulating {} batches per step)", accum_steps_) : std::string(),
      augmentation_summary(train_step_->config())));
  // A run that had stopped early is finished: resuming it must not train on
  // (an uninterrupted run would not have).
  if (resume_ && selection_.exhausted()) {
    early_stopped_ = true;
    progress_->message(fmt::format("the run stopped early at step {} ({} evaluations without improvement, eval.patience "
                               "= {}): nothing left to train",
                               state_.step, state_.best.bad_evals, cfg_.patience));
  }
  start_step_ = state_.step_in_epoch;
}

// ---- checkpoint ---------------------------------------------------------------------

// The state with its next step in `epoch_of_next_step`; the elapsed time
// includes this process's so far.
void Trainer::Run::save(bool best, std::int64_t epoch_of_next_step) {
  if (cfg_.fast_dev_run) return;
  RunState s = state_;
  s.epoch = epoch_of_next_step;
  s.best = selection_.state();
  s.elapsed_s += seconds_since(run_t0_);
  const io::ReaderState rs{s.epoch, s.step_in_epoch * accum_steps_ * world_.size()};
  saved_step_ = state_.step;
  if (world_.distributed()) check_same_weights();
  if (!world_.is_root()) {  // every rank holds the same state: rank 0 writes it
    if (best) best_written_ = true;
    return;
  }
  auto c = make_run_checkpoint(*train_step_, cfg_, s, rs, data_.class_names, data_.normal_class, *stream_);
  c.ints["world_size"] = world_.size();  // how the step was split (a resume at another world size compares it)
  const fs::path p = checkpoints_->save(c, state_.step, best);
  if (best) best_written_ = true;
  progress_->message(fmt::format("checkpoint {}{}", p.string(), best ? " (best so far)" : ""));
}

void Trainer::Run::checkpoint_after_epoch(bool best) {
  const bool last_epoch = state_.epoch + 1 == cfg_.epochs;
  const bool due = (state_.epoch + 1) % cfg_.checkpoint_every == 0 || last_epoch || early_stopped_ || best;
  if (due) save(best, state_.epoch + 1);  // the state points at the next epoch
  ++state_.epoch;
  start_step_ = 0;
}

// After the loop: a stop request (signal, --stop-after-steps) checkpoints the
// step it stopped at.
void Trainer::Run::finish_training() {
  progress_->finish();
  if (!stop_requested()) return;
  interrupted_ = true;
  const bool asked = options_.stop_after_steps >= 0 && state_.step >= options_.stop_after_steps;
  progress_->message(asked ? fmt::format("--stop-after-steps {}: stopping after step {}", options_.stop_after_steps,
                                     state_.step)
                       : fmt::format("{}: stopping after step {}", stop_->signal() == SIGTERM ? "SIGTERM" : "SIGINT",
                                     state_.step));
  if (saved_step_ != state_.step) save(false, state_.epoch);
}

// ---- train_epoch: the optimizer steps -----------------------------------------------

// Micro-batch j of the next step: the reader's batch into the step's inputs.
// With several processes the reader reads only this rank's share of the
// batches (io::ReaderConfig::share: batch j * world_size + rank of the step's
// micro-batches, no one else's). A batch is the reader's again at its next
// call of next() (io/reader.hpp), so it is copied into the step's inputs now.
void Trainer::Run::feed_step(std::int64_t j) {
  {
    MF_NVTX_RANGE("data_wait");
    const auto w0 = Clock::now();
    last_batch_ = train_reader_->next(*stream_);
    wait_ms_ += 1000.0 * seconds_since(w0);
  }
  MF_NVTX_RANGE("h2d_input");
  EventTimer::Scope t(*timer_, "h2d", *stream_);
  const std::int64_t b0 = j * micro_batch_, b1 = (j + 1) * micro_batch_;
  Tensor x = train_step_->input_x().slice(b0, b1), y = train_step_->input_labels().slice(b0, b1),
         l = train_step_->input_leak().slice(b0, b1);
  x.copy_from(last_batch_.x, *stream_);
  y.copy_from(last_batch_.labels, *stream_);
  l.copy_from(last_batch_.leak, *stream_);
}

bool Trainer::Run::train_epoch() {
  MF_NVTX_RANGE("epoch");
  const io::ReaderState want{state_.epoch, start_step_ * accum_steps_ * world_.size()};
  if (!(train_reader_->state() == want)) train_reader_->restore(want);
  timer_->reset();
  wait_ms_ = 0;
  epoch_samples_ = interval_samples_ = 0;
  const auto epoch_t0 = Clock::now();
  interval_t0_ = epoch_t0;
  epoch_comm_s0_ = comm_s_;
  std::int64_t s = start_step_;
  while (s < steps_per_epoch_ && !stop_requested()) {
    if (profiling_ && state_.step == cfg_.profile_begin()) {
      MF_CUDA_CHECK(cudaProfilerStart());
      progress_->message(fmt::format("profiler capture on at step {}", state_.step));
    }
    for (std::int64_t j = 0; j < accum_steps_; ++j) feed_step(j);
    {
      MF_NVTX_RANGE("step");
      EventTimer::Scope t(*timer_, "step", *stream_);
      train_step_->step(*stream_);
    }
    if (time_to_first_step_s_ < 0) {
      stream_->synchronize();  // once per run: when did the first step really end?
      time_to_first_step_s_ = seconds_since(run_t0_);
    }
    ++s;
    ++state_.step;
    state_.step_in_epoch = s;
    const std::int64_t step_samples = accum_steps_ * micro_batch_ * world_.size();  // over all processes
    state_.samples += step_samples;
    epoch_samples_ += step_samples;
    interval_samples_ += step_samples;
    if (profiling_ && state_.step == cfg_.profile_end()) {
      MF_CUDA_CHECK(cudaProfilerStop());
      progress_->message(fmt::format("profiler capture off after step {}", state_.step - 1));
    }
    if (state_.step % cfg_.log_interval == 0 || s == steps_per_epoch_)
      log_interval(s);
    else if (progress_->mode() == Progress::Mode::tty)
      tick(s);
    if (options_.stop_after_steps >= 0 && state_.step >= options_.stop_after_steps) stop_->request();
  }
  stream_->synchronize();
  epoch_wall_s_ = seconds_since(epoch_t0);
  epoch_steps_done_ = s - start_step_;
  train_wall_s_ += epoch_wall_s_;  // a stopped epoch's steps count too (an interrupted run's samples/s)
  train_samples_timed_ += epoch_samples_;
  if (s < steps_per_epoch_) return false;  // stopped inside the epoch: state_ points at the next step
  state_.step_in_epoch = 0;
  if (epoch_steps_done_ == steps_per_epoch_) epoch_times_s_.push_back(epoch_wall_s_);
  return true;
}

// The position fields of `ps` (epoch, step, throughput, ETA); the rest is left as is.
void Trainer::Run::set_position(ProgressState& ps, std::int64_t step_in_epoch, double samples_per_s) const {
  ps.epoch = state_.epoch + 1;
  ps.epochs = cfg_.epochs;
  ps.step_in_epoch = step_in_epoch;
  ps.steps_per_epoch = steps_per_epoch_;
  ps.global_step = state_.step;
  ps.samples_per_s = samples_per_s;
  const double remaining = double(total_steps_ - state_.step) * double(accum_steps_ * micro_batch_ * world_.size());
  ps.eta_s = samples_per_s > 0 ? remaining / samples_per_s : -1;
}

// Every log.interval steps and at the end of the epoch: the one device sync of
// the interval reads the step's counters for the progress line and metrics.jsonl.
void Trainer::Run::log_interval(std::int64_t step_in_epoch) {
  MF_NVTX_RANGE("log");
  const model::StepMetrics m = train_step_->read_metrics(*stream_);
  // Fold the finished timing events back into the timer's pool now that the
  // stream has caught up (no extra wait): otherwise an epoch holds (and
  // creates) events for every step it has timed.
  if (device_.is_cuda()) timer_->collect();
  const double dt = seconds_since(interval_t0_);
  const double sps = dt > 0 ? double(interval_samples_) / dt : 0;
  interval_t0_ = Clock::now();
  interval_samples_ = 0;
  const SystemSample sys = sysmon_->sample();
  ProgressState ps;
  set_position(ps, step_in_epoch, sps);
  ps.loss = m.loss;
  ps.accuracy = m.samples ? double(m.class_correct) / double(m.samples) : NAN;
  ps.lr = m.lr;
  ps.gpu = sys.gpu_available;
  ps.gpu_util_pct = sys.gpu_util_pct;
  ps.gpu_mem_gib = double(sys.gpu_mem_used) / 1073741824.0;
  ps.gpu_mem_total_gib = double(sys.gpu_mem_total) / 1073741824.0;
  progress_->log(ps);
  last_ps_ = ps;
  json line = {{"type", "train"},
               {"epoch", state_.epoch + 1},
               {"step", state_.step},
               {"loss", nan_null(m.loss)},
               {"class_loss", nan_null(m.class_loss)},
               {"accuracy", nan_null(ps.accuracy)},
               {"lr", m.lr},
               {"grad_norm", nan_null(m.grad_norm)},
               {"loss_scale", m.loss_scale},
               {"skipped_steps", m.skipped_steps},
               {"samples_per_s", sps},
               {"cpu_pct", sys.cpu_pct},
               {"rss_mib", double(sys.rss_bytes) / 1048576.0},
               {"time_s", state_.elapsed_s + seconds_since(run_t0_)}};
  if (model_config_.leak_head) {
    line["leak_loss"] = nan_null(m.leak_loss);
    line["leak_accuracy"] = m.samples ? json(double(m.leak_correct) / double(m.samples)) : json(nullptr);
  }
  if (sys.gpu_available) {
    if (sys.gpu_util_pct >= 0) {
      gpu_util_sum_ += sys.gpu_util_pct;
      ++gpu_util_samples_;
    }
    line["gpu_util_pct"] = sys.gpu_util_pct;
    line["gpu_mem_gib"] = ps.gpu_mem_gib;
  }
  if (metrics_log_) metrics_log_->write(line);
}

// Between log intervals the live line advances the step and keeps the last
// interval's numbers (reading new ones would need a sync).
void Trainer::Run::tick(std::int64_t step_in_epoch) {
  ProgressState ps = last_ps_;
  set_position(ps, step_in_epoch, last_ps_.samples_per_s);
  progress_->tick(ps);
}

// ---- report_epoch: where the time went ---------------------------------------------------

void Trainer::Run::report_epoch() {
  {
    // A forward-only probe splits a CUDA-graph step's time into estimates.
    MF_NVTX_RANGE("forward_probe");
    EventTimer::Scope t(*timer_, "forward_probe", *stream_);
    (void)train_step_->forward_eval(last_batch_.x, *stream_);
  }
  EpochMeasurements m;
  m.wall_s = epoch_wall_s_;
  m.data_wait_ms = wait_ms_;
  m.steps = epoch_steps_done_;
  m.samples = epoch_samples_;
  m.micro_batches = accum_steps_;
  m.train_flops_per_sample = flops_.train;
  m.peak_tflops = peak_tflops_;
  BottleneckContext bc;
  bc.on_gpu = device_.is_cuda();
  bc.resident = train_reader_->resident();
  if (device_.is_cuda() && !bc.resident) {
    std::size_t free_b = 0, total_b = 0;
    const io::DatasetInfo& ti = data_.train->info();
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
      bc.fits_on_gpu = double(ti.num_segments) * double(ti.segment_elems()) * double(dtype_size(act_dtype_)) <
                       cfg_.gpu_cache_fraction * double(free_b);
  }
  bc.reader_threads = int(cfg_.reader_threads);
  bc.cpu_cores = int(::sysconf(_SC_NPROCESSORS_ONLN));
  bc.precision = precision_;
  bc.cuda_graphs = cfg_.cuda_graphs;
  bc.batch_size = micro_batch_;
  bc.log_interval = cfg_.log_interval;
  const EpochReport r = summarize_epoch(timer_->collect(), m, bc);
  last_phases_ = r.phases_json;
  last_bottleneck_ = r.bottleneck_json;
  const SystemSample sys = sysmon_->sample();
  json line = {{"type", "epoch"},
               {"epoch", state_.epoch + 1},
               {"step", state_.step},
               {"samples_per_s", r.samples_per_s},
               {"train_tflops", r.achieved_tflops},
               {"phases", r.phases_json},
               {"bottleneck", r.bottleneck_json},
               {"cpu_pct", sys.cpu_pct},
               {"peak_rss_mib", double(sys.peak_rss_bytes) / 1048576.0}};
  if (peak_tflops_ > 0) line["share_of_peak"] = r.achieved_tflops / peak_tflops_;
  // Data parallelism: rank 0's time exchanging gradients this epoch.
  const double comm = comm_s_ - epoch_comm_s0_;
  const double comm_share = epoch_wall_s_ > 0 ? comm / epoch_wall_s_ : 0.0;
  const double comm_ms_per_step = 1e3 * comm / double(std::max<std::int64_t>(1, epoch_steps_done_));
  line["world_size"] = world_.size();
  if (world_.distributed()) {
    line["communication_s_per_step"] = comm_ms_per_step / 1e3;
    line["communication_share"] = comm_share;
  }
  if (metrics_log_) metrics_log_->write(line);
  std::string speed;
  if (device_.is_cuda()) {
    speed = fmt::format(", {:.1f} TFLOP/s", r.achieved_tflops);
    if (peak_tflops_ > 0) speed += fmt::format(" ({:.0f}% of {} peak)", 100 * r.achieved_tflops / peak_tflops_, device_peak_->device);
  }
  if (world_.distributed())
    speed += fmt::format(" over {} processes (communication {:.1f}% of the epoch, {:.2f} ms/step)", world_.size(),
                         100 * comm_share, comm_ms_per_step);
  progress_->message(fmt::format("epoch {}/{}: {:.0f} samples/s{}; {}", state_.epoch + 1, cfg_.epochs, r.samples_per_s,
                             speed, r.bottleneck.line()));
}

// ---- validate: best checkpoint and early stopping --------------------------------------

// Returns whether the weights after this epoch are the best so far.
bool Trainer::Run::validate() {
  const bool last_epoch = state_.epoch + 1 == cfg_.epochs;
  const bool due = (state_.epoch + 1) % cfg_.val_every == 0 || last_epoch;
  io::BatchReader* vr = overfit_reader_ ? overfit_reader_.get() : val_reader_.get();
  if (!vr) return (state_.epoch + 1) % cfg_.val_every == 0 && selection_.observe_unvalidated(state_.step).is_best;
  if (!due) return false;
  EvalOptions o = eval_options_;
  if (overfit_reader_) o.max_segments = steps_per_epoch_ * accum_steps_ * micro_batch_;
  const auto e0 = Clock::now();
  const EvalRun ev = evaluate(*train_step_, *vr, o, *stream_);
  const double eval_s = seconds_since(e0);
  json j = model::to_json(ev.result, data_.class_names);
  j["type"] = "eval";
  j["split"] = overfit_reader_ ? "train-overfit" : "val";
  j["epoch"] = state_.epoch + 1;
  j["step"] = state_.step;
  j["eval_s"] = eval_s;
  if (metrics_log_) metrics_log_->write(j);
  last_eval_ = j;

  const double v = model::metric_value(ev.result, cfg_.metric);
  const Verdict verdict = selection_.observe(v, state_.step);
  if (verdict.undefined && !warned_undefined_metric_) {
    warned_undefined_metric_ = true;
    log_warn("eval.metric {} is undefined (NaN) on the {} set at epoch {}: {}; undefined evaluations do not count "
             "toward early stopping (eval.patience) and, until the metric has a value, the newest checkpoint is kept "
             "as the best",
             cfg_.metric, overfit_reader_ ? "overfit" : "validation", state_.epoch + 1, undefined_metric_reason(cfg_.metric));
  }
  const model::EvalResult& e = ev.result;
  std::string msg = eval_line(e, ev.files, state_.epoch + 1);
  msg += fmt::format("; {} {:.4f}{}", cfg_.metric, v, verdict.improved ? " (best)" : "");
  progress_->message(msg);
  if (verdict.stop) {
    early_stopped_ = true;
    progress_->message(fmt::format("early stop: {} has not improved for {} evaluations (best {:.4f} at step {})",
                               cfg_.metric, selection_.state().bad_evals, selection_.state().value,
                               selection_.state().step));
  }
  return verdict.is_best;
}

// ---- report: the test set, report.json, plots, the summary ---------------------------------

// best.h5 is trusted only when it belongs to this run: written by this process,
// or (resumed) the checkpoint of the best step the resumed state records.
// Anything else (a leftover of an earlier run) is ignored.
std::optional<model::Checkpoint> Trainer::Run::best_checkpoint_of_this_run() {
  const fs::path best = checkpoints_->best_path();
  const std::int64_t best_step = selection_.state().step;
  if (!fs::exists(best)) return std::nullopt;
  if (!best_written_ && !(resume_ && best_step >= 0)) {
    log_warn("{} was not written by this run: the test set uses the final weights", best.string());
    return std::nullopt;
  }
  model::Checkpoint c = model::read_checkpoint(best);
  if (best_written_ || c.get_int("step") == best_step) return c;
  log_warn("{} holds step {}, not this run's best step {}: the test set uses the final weights", best.string(),
           c.get_int("step"), best_step);
  return std::nullopt;
}

json Trainer::Run::test_with_best_weights(json& report) {
  if (const auto best = best_checkpoint_of_this_run()) {
    restore_run_checkpoint(*train_step_, *best, *stream_);
    report["test_weights"] = fmt::format("best ({} at step {})", cfg_.metric, selection_.state().step);
  } else {
    report["test_weights"] = "final";
  }
  io::BatchReader test_rd(data_.test, reader_config(cfg_, device_, act_dtype_, false));
  EvalOptions o = eval_options_;
  o.shard = false;  // rank 0 alone reports, and tests, after training
  const EvalRun ev = evaluate(*train_step_, test_rd, o, *stream_);
  json j = model::to_json(ev.result, data_.class_names);
  j["type"] = "eval";
  j["split"] = "test";
  j["step"] = state_.step;
  if (metrics_log_) metrics_log_->write(j);
  return j;
}

json Trainer::Run::report_json() {
  const BestState& best = selection_.state();
  json report = {{"melforge", "0.1.0"},
                 {"run_dir", out_dir_.string()},
                 {"device", device_.str()},
                 {"device_name", device_name_},
                 {"precision", std::string(model::precision_name(precision_))},
                 {"model", model_config_.str()},
                 {"heads", std::string(enum_name<model::Heads>(model::kHeadsNames, cfg_.heads))},
                 {"parameters", train_step_->params().count()},
                 {"steps", state_.step},
                 {"samples", state_.samples},
                 {"interrupted", interrupted_},
                 {"early_stopped", early_stopped_},
                 {"train_samples_per_s", train_wall_s_ > 0 ? double(train_samples_timed_) / train_wall_s_ : 0.0},
                 {"train_flops_per_sample", flops_.train},
                 {"best_metric", {{"name", cfg_.metric}, {"value", nan_null(best.value)}, {"step", best.step}}},
                 {"last_epoch_phases", last_phases_},
                 {"last_epoch_bottleneck", last_bottleneck_},
                 {"val", last_eval_}};
  if (device_peak_) report["peak_tflops"] = {{"value", peak_tflops_}, {"source", device_peak_->source}, {"table_entry", device_peak_->device}};
  if (data_.test && !interrupted_) report["test"] = test_with_best_weights(report);
  report["elapsed_s"] = state_.elapsed_s + seconds_since(run_t0_);
  // Data parallelism: the processes, and rank 0's time in the gradients'
  // exchange (per optimizer step, and its share of the training time).
  report["world_size"] = world_.size();
  const std::int64_t first_step = resume_ ? run_state_of(resume_->checkpoint).step : 0;
  const double steps_here = double(std::max<std::int64_t>(1, state_.step - first_step));
  report["communication_s_per_step"] = world_.distributed() ? json(comm_s_ / steps_here) : json(nullptr);
  report["communication_share"] =
      world_.distributed() && train_wall_s_ > 0 ? json(comm_s_ / train_wall_s_) : json(nullptr);
  // Top-level figures for side-by-side comparisons (bench/compare_torch.py).
  // Steady throughput leaves out the first epoch (graph capture, warm-up)
  // when there is more than one.
  report["dataset_load_s"] = dataset_load_s_;
  report["time_to_first_step_s"] = time_to_first_step_s_ >= 0 ? json(time_to_first_step_s_) : json(nullptr);
  report["launch_to_first_step_excl_load_s"] =
      time_to_first_step_s_ >= 0 ? json(time_to_first_step_s_ - dataset_load_s_) : json(nullptr);
  report["epoch_time_s"] = nullptr;
  report["steady_samples_per_s"] = nullptr;
  if (!epoch_times_s_.empty()) {
    const std::size_t skip = epoch_times_s_.size() > 1 ? 1 : 0;
    double t = 0;
    for (std::size_t i = skip; i < epoch_times_s_.size(); ++i) t += epoch_times_s_[i];
    const double n = double(epoch_times_s_.size() - skip);
    report["epoch_time_s"] = t / n;
    report["steady_samples_per_s"] = double(steps_per_epoch_ * accum_steps_ * micro_batch_ * world_.size()) / (t / n);
  }
  report["gpu_util_mean_pct"] = gpu_util_samples_ ? json(gpu_util_sum_ / double(gpu_util_samples_)) : json(nullptr);
  report["peak_device_memory_bytes"] = device_.is_cuda() ? json(device_pool_stats(device_.index).high_water) : json(nullptr);
  return report;
}

void Trainer::Run::report() {
  if (!world_.is_root()) return;  // the others hold the same weights and metrics
  const json report = report_json();
  write_json_atomic(out_dir_ / "report.json", report);
  std::vector<fs::path> plots;
  try {
    plots = plot_run(out_dir_);
  } catch (const Error& e) {
    log_warn("plots: {}", e.message());
  }
  print_summary(report, plots);
}

// The summary on stdout, every metric to 4 decimals.
void Trainer::Run::print_summary(const json& report, const std::vector<fs::path>& plots) const {
  fmt::print("\nmelforge train: {} steps, {} samples, {:.0f} samples/s{}\n", state_.step, state_.samples,
             report["train_samples_per_s"].get<double>(),
             interrupted_ ? " (interrupted: resume with --resume auto)" : early_stopped_ ? " (early stop)" : "");
  auto print_metrics = [](const char* what, const json& j) {
    if (j.is_null()) return;
    if (j.contains("verification")) {  // an embedding model
      const json& v = j["verification"];
      fmt::print("{}: EER {}, minDCF(0.05) {}, minDCF(0.01) {} ({} trials over {} files)\n", what,
                 metric_text(v["eer"]), metric_text(v["min_dcf_0.05"]), metric_text(v["min_dcf_0.01"]),
                 v["trials"].get<std::int64_t>(), v["files"].get<std::int64_t>());
      return;
    }
    fmt::print("{}: segments: accuracy {}, macro-F1 {}", what, metric_text(j["segment"]["accuracy"]),
               metric_text(j["segment"]["macro_f1"]));
    if (j.contains("file")) {
      const json& f = j["file"];
      fmt::print("; files: accuracy {}, macro-F1 {}, balanced accuracy {}", metric_text(f["accuracy"]),
                 metric_text(f["macro_f1"]), metric_text(f["balanced_accuracy"]));
      if (f.contains("leak"))
        fmt::print(", leak AUC {}, false alarms {}", metric_text(f["leak"]["roc_auc"]),
                   metric_text(f["leak"]["false_alarm_rate"]));
    }
    fmt::print("\n");
  };
  print_metrics("final validation", last_eval_);
  if (report.contains("test")) print_metrics("test (best weights)", report["test"]);
  fmt::print("report: {}\n", (out_dir_ / "report.json").string());
  std::vector<std::string> plot_names;
  for (const auto& p : plots) plot_names.push_back(p.string());
  if (!plots.empty()) fmt::print("plots:  {}\n", fmt::join(plot_names, ", "));
  if (!cfg_.fast_dev_run) fmt::print("checkpoints: {}\n", ckpt_dir_.string());
  std::fflush(stdout);
}

// ---- the loop -------------------------------------------------------------------

Trainer::Trainer(RunConfig cfg, TrainerOptions options) : run_(std::make_unique<Run>(std::move(cfg), options)) {}
Trainer::~Trainer() = default;

int Trainer::run() {
  Run& r = *run_;
  r.restore_or_init();
  while (r.epochs_left()) {
    if (!r.train_epoch()) break;  // stopped inside the epoch: the state points at the next step
    r.report_epoch();
    const bool best = r.validate();
    r.checkpoint_after_epoch(best);
  }
  r.finish_training();
  r.report();
  return 0;
}

}  // namespace mf::train
