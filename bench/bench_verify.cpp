// `melforge-bench verify` (issue 20): the two costs of speaker verification
// after training.
//  1. Embedding extraction: a model (LeakCNN, a preset stack or --layers-toml,
//     with a metric loss and an embedding layer, random init) turns a
//     synthetic in-memory set (files x segments per file, already on the
//     model's device in its working dtype, as the resident reader holds it:
//     no file I/O) into file embeddings the way train::segment_embeddings +
//     file_embeddings do (forward_eval per batch, cast to f32, one readback,
//     mean per file and L2 norm on the host): files/s and segments/s, with
//     the forward's share and the model's FLOPs.
//  2. Trial scoring: train::cosine_scores on the CPU (what `melforge verify`
//     runs there: ops::trial_scores with the active CPU kernels on every
//     thread, f32) over a large random trial list
//     (default 10M trials over 5,000 normalised files x 256 dims): trials/s
//     beside the roofline, i.e. the bytes one trial touches (its Trial record,
//     its score, and 2 rows when they are not cached) over the measured host
//     memory bandwidth, and its 2*dim FLOPs. The scores are first checked
//     against a float64 recomputation.
// --device cpu runs anywhere; --device cuda runs the extraction on the GPU and
// times the device scorer too (ops::trial_scores: end to end as `melforge
// verify` runs it, and the kernel alone beside its roofline), against the
// GPU target of >= 50M trials/s.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

#include "bench/bench_common.hpp"
#include "bench/suites.hpp"
#include "engine/counter_rng.hpp"
#include "engine/cpu_kernels.hpp"
#include "engine/device.hpp"
#include "engine/error.hpp"
#include "engine/parallel.hpp"
#include "engine/stream.hpp"
#include "kernels/ops.hpp"
#include "model/run_config.hpp"
#include "model/train_step.hpp"
#include "train/embeddings.hpp"
#include "train/perf.hpp"

namespace mf::bench {

namespace {

constexpr double kGpuTargetTrialsPerS = 50e6;  // issue 20's target for scoring on a GPU

struct VerifyOptions {
  std::string arch = "leakcnn";  // leakcnn | cnn | a preset
  std::string layers_toml;
  std::string loss = "aam_softmax";
  int embedding = 256;  // 0: none (a stack's last layer is the embedding)
  bool input_norm = true;
  int mels = 64, frames = 64, classes = 1000;
  std::int64_t files = 0;  // 0: 256 on the CPU, 16384 on a GPU
  std::int64_t per_file = 4;
  std::int64_t batch = 256;
  std::string precision = "fp32";
  std::string device = "cpu";
  std::int64_t score_files = 5000;
  std::int64_t dim = 256;
  std::int64_t trials = 10'000'000;
  int repeats = 3;
  int threads = 0;
};

model::ModelConfig verify_model(const VerifyOptions& o) {
  model::ModelConfig m;
  m.in_mels = o.mels;
  m.in_frames = o.frames;
  m.classes = o.classes;
  m.leak_head = false;
  m.loss = model::parse_loss_type(o.loss);
  m.embedding = o.embedding;
  m.input_norm = o.input_norm;
  if (o.arch == "cnn") {
    MF_CHECK(!o.layers_toml.empty(), "melforge-bench verify --arch cnn: --layers-toml FILE is required");
    model::RunConfig rc;
    model::load_toml_file(rc, o.layers_toml);
    MF_CHECK(!rc.layers.empty(), "{}: expected [[model.layers]] tables (docs/models.md), found none", o.layers_toml);
    m.arch = model::Arch::cnn;
    m.layers = rc.layers;
  } else if (o.arch != "leakcnn") {
    m.arch = model::Arch::cnn;
    m.layers = model::cnn_preset(o.arch);
    m.preset = o.arch;
  }
  m.validate();
  return m;
}

// Extraction: forward_eval of every batch of the resident set, cast to f32
// into one [N, E] tensor, one readback, then file_embeddings on the host (as
// train::segment_embeddings + file_embeddings). Returns seconds (total,
// forward + readback) of each repeat after one untimed run.
nlohmann::json bench_extraction(const VerifyOptions& o, const model::ModelConfig& mc, Device dev,
                                cudaStream_t s) {
  model::TrainConfig cfg;
  cfg.model = mc;
  cfg.precision = model::parse_precision(o.precision);
  cfg.micro_batch = o.batch;
  cfg.cuda_graph = false;
  if (model::loss_is_prototypical(mc.loss)) cfg.per_class = 2;
  model::TrainStep ts(cfg, dev, s);
  const std::int64_t files = o.files > 0 ? o.files : (dev.is_cuda() ? 16384 : 256);
  const std::int64_t n = files * o.per_file, seg = std::int64_t(o.mels) * o.frames;
  std::vector<float> host(std::size_t(n * seg));
  std::uint64_t state = 0x766572696679ull;  // "verify"
  for (float& v : host) v = float(-80.0 + 80.0 * unit_double(splitmix64_next(state)));  // dB-like
  const DType wdt = model::activation_dtype(cfg.precision);
  const Tensor data = Tensor::from_floats(host, {n, o.mels, o.frames, 1}, wdt, Layout::nhwc).to(dev, s);
  host = {};
  const std::int64_t E = mc.features();
  std::vector<double> total, forward;
  train::Embeddings f;
  for (int r = 0; r <= o.repeats; ++r) {
    const double t0 = now_s();
    Tensor all = Tensor::empty({n, E}, DType::f32, dev, Layout::plain, s);
    for (std::int64_t done = 0; done < n; done += o.batch) {
      const std::int64_t take = std::min(o.batch, n - done);
      const model::EvalOutput out = ts.forward_eval(data.slice(done, done + take), s);
      Tensor dst = all.slice(done, done + take);
      ops::cast(out.embedding, dst, s);
    }
    train::Embeddings e;
    e.rows = n;
    e.dim = E;
    e.values = all.to_floats();  // synchronous
    const double t1 = now_s();
    f = train::file_embeddings(e, o.per_file);
    const double t2 = now_s();
    if (r == 0) continue;  // warm-up
    total.push_back(t2 - t0);
    forward.push_back(t1 - t0);
  }
  double worst = 0;  // every file embedding is finite with norm 1
  for (std::int64_t i = 0; i < f.rows; ++i) {
    double ss = 0;
    for (float v : f.row(i)) ss += double(v) * v;
    worst = std::max(worst, std::isfinite(ss) ? std::fabs(std::sqrt(ss) - 1) : INFINITY);
  }
  MF_CHECK(worst < 1e-5, "melforge-bench verify: a file embedding has norm error {} (non-finite model output?)",
           worst);
  const double t = median(total), tf = median(forward);
  const double fwd_flops = train::model_flops(mc).forward;
  fmt::print("extraction: {} files x {} segments of {}x{}, batch {}, {}: {:.3f} s (median of {}), {:.1f} files/s, "
             "{:.1f} segments/s; forward + readback {:.1f}%, pooling {:.1f}%; {:.3f} GFLOP/segment, {:.2f} GFLOP/s\n",
             files, o.per_file, o.mels, o.frames, o.batch, o.precision, t, o.repeats, double(files) / t,
             double(n) / t, 100 * tf / t, 100 * (t - tf) / t, fwd_flops / 1e9, fwd_flops * double(n) / tf / 1e9);
  return {{"files", files},
          {"segments_per_file", o.per_file},
          {"batch", o.batch},
          {"precision", o.precision},
          {"embedding_dim", E},
          {"runs_s", total},
          {"forward_readback_runs_s", forward},
          {"median_s", t},
          {"files_per_s", double(files) / t},
          {"segments_per_s", double(n) / t},
          {"forward_share", tf / t},
          {"forward_flops_per_segment", fwd_flops},
          {"forward_GFLOPs", fwd_flops * double(n) / tf / 1e9},
          {"norm_error_max", worst}};
}

// Host memory bandwidth: the best of 3 copies of a 256 MiB buffer, counting
// the bytes read and written.
double host_copy_gbps() {
  const std::size_t bytes = std::size_t(256) << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const double t0 = now_s();
    std::memcpy(b.data(), a.data(), bytes);
    best = std::min(best, now_s() - t0);
  }
  MF_CHECK(b[bytes / 2] == 1, "host_copy_gbps: the copy did not happen");
  return 2.0 * double(bytes) / best / 1e9;
}

double device_copy_gbps(cudaStream_t s) {
  const std::size_t cb = std::size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  MF_CUDA_CHECK(cudaMalloc(&a, cb));
  MF_CUDA_CHECK(cudaMalloc(&b, cb));
  const double ms = time_cuda_ms([&] { MF_CUDA_CHECK(cudaMemcpyAsync(b, a, cb, cudaMemcpyDeviceToDevice, s)); }, s,
                                 2, 10, false);
  MF_CUDA_CHECK(cudaFree(a));
  MF_CUDA_CHECK(cudaFree(b));
  return 2.0 * double(cb) / (ms * 1e-3) / 1e9;
}

// Random normalised file embeddings and random trials between distinct files.
void scoring_inputs(const VerifyOptions& o, train::Embeddings& e, std::vector<model::Trial>& trials) {
  e.rows = o.score_files;
  e.dim = o.dim;
  e.values.resize(std::size_t(e.rows * e.dim));
  std::uint64_t state = 0x73636f7265ull;  // "score"
  for (float& v : e.values) v = float(2.0 * unit_double(splitmix64_next(state)) - 1.0);
  train::normalize_rows(e);
  trials.resize(std::size_t(o.trials));
  for (auto& t : trials) {
    t.a = std::int64_t(splitmix64_next(state) % std::uint64_t(e.rows));
    t.b = std::int64_t(splitmix64_next(state) % std::uint64_t(e.rows - 1));
    if (t.b >= t.a) ++t.b;
    t.label = std::int32_t(splitmix64_next(state) & 1);
  }
}

// cosine_scores against a float64 recomputation on every 997th trial:
// the largest absolute error (the scores are f32: <= ~1e-7 expected).
double check_scores(const train::Embeddings& e, const std::vector<model::Trial>& trials,
                    const std::vector<float>& scores) {
  double worst = 0;
  for (std::size_t t = 0; t < trials.size(); t += 997) {
    long double d = 0;
    for (std::int64_t k = 0; k < e.dim; ++k)
      d += (long double)e.row(trials[t].a)[std::size_t(k)] * e.row(trials[t].b)[std::size_t(k)];
    const double err = std::fabs(double(scores[t]) - double(d));
    worst = std::max(worst, std::isfinite(err) ? err : INFINITY);
  }
  return worst;
}

// The device scorer (ops::trial_scores) on the same trials: end to end as
// `melforge verify` runs it (train::cosine_scores with a device: rows uploaded
// once, trial pairs packed and uploaded per launch, scores read back), and the
// kernel alone over pairs already on the device. Its roofline: 8 B of i32
// pair and 4 B of score per trial, the matrix staying in L2.
nlohmann::json bench_device_scoring(const VerifyOptions& o, const train::Embeddings& e,
                                    const std::vector<model::Trial>& trials, cudaStream_t s) {
  const Device dev = Device::cuda(0);
  std::vector<float> scores;
  std::vector<double> runs;
  for (int r = 0; r <= o.repeats; ++r) {
    const double t0 = now_s();
    scores = train::cosine_scores(e, trials, dev, s);
    if (r > 0) runs.push_back(now_s() - t0);
  }
  const double err = check_scores(e, trials, scores);
  MF_CHECK(err < 1e-5, "melforge-bench verify: the device's trial scores differ from float64 by {}", err);
  const double end_to_end = double(o.trials) / median(runs);

  const auto T = std::int64_t(trials.size());
  const Tensor emb = Tensor::from_floats(e.values, {e.rows, e.dim}).to(dev, s);
  Tensor pairs_host = Tensor::empty({T, 2}, DType::i32);
  std::int32_t* p = pairs_host.data<std::int32_t>();
  for (std::int64_t i = 0; i < T; ++i) {
    p[2 * i] = std::int32_t(trials[std::size_t(i)].a);
    p[2 * i + 1] = std::int32_t(trials[std::size_t(i)].b);
  }
  const Tensor pairs = pairs_host.to(dev, s);
  Tensor out = Tensor::empty({T}, DType::f32, dev, Layout::plain, s);
  const double kernel_ms = time_cuda_ms(
      [&] {
        for (std::int64_t t0 = 0; t0 < T; t0 += train::kTrialsPerLaunch) {
          const std::int64_t n = std::min(train::kTrialsPerLaunch, T - t0);
          Tensor sd = out.slice(t0, t0 + n);
          ops::trial_scores(emb, pairs.slice(t0, t0 + n), sd, s);
        }
      },
      s, 2, o.repeats);
  const double kernel = double(T) / (kernel_ms * 1e-3);
  const double dbw = device_copy_gbps(s), roof = dbw * 1e9 / 12.0;
  fmt::print("  device: end to end (train::cosine_scores, uploads and readback) {:.1f}M trials/s; kernel alone "
             "{:.1f}M trials/s = {:.1f}% of its roofline {:.0f}M (12 B/trial at {:.0f} GB/s); target >= 50M; check vs "
             "float64 {:.1e}\n",
             end_to_end / 1e6, kernel / 1e6, 100 * kernel / roof, roof / 1e6, dbw, err);
  return {{"end_to_end_runs_s", runs},
          {"end_to_end_trials_per_s", end_to_end},
          {"kernel_ms", kernel_ms},
          {"kernel_trials_per_s", kernel},
          {"device_copy_GBps", dbw},
          {"bytes_per_trial", 12},
          {"roofline_trials_per_s", roof},
          {"check_max_abs_error_vs_f64", err},
          {"target_trials_per_s", kGpuTargetTrialsPerS}};
}

nlohmann::json bench_scoring(const VerifyOptions& o, bool gpu, cudaStream_t s) {
  MF_CHECK(o.score_files >= 2 && o.dim >= 1 && o.trials >= 1,
           "melforge-bench verify: expected --score-files >= 2, --dim >= 1, --trials >= 1");
  train::Embeddings e;
  std::vector<model::Trial> trials;
  scoring_inputs(o, e, trials);
  // What `melforge verify` runs on the CPU: ops::trial_scores (the active
  // CPU kernels, every thread), trials packed and scored per launch; the
  // timed repeats after one untimed run, the scores checked against float64.
  const auto time_scoring = [&](const std::vector<model::Trial>& list, const char* order) {
    std::vector<float> scores;
    std::vector<double> runs;
    for (int r = 0; r <= o.repeats; ++r) {
      const double t0 = now_s();
      scores = train::cosine_scores(e, list, Device::cpu(), nullptr);
      if (r > 0) runs.push_back(now_s() - t0);
    }
    const double err = check_scores(e, list, scores);
    MF_CHECK(err < 1e-5, "melforge-bench verify: cosine_scores ({} order) differs from float64 by {}", order, err);
    return std::pair{runs, err};
  };
  const auto [runs, err] = time_scoring(trials, "random");
  const double t = median(runs), tps = double(o.trials) / t;
  // The same trials grouped by their first file, as `melforge data trials`
  // (model::make_trials) writes a list: each file's trials in a row.
  std::vector<model::Trial> grouped = trials;
  std::stable_sort(grouped.begin(), grouped.end(), [](const model::Trial& x, const model::Trial& y) { return x.a < y.a; });
  const std::vector<double> runs_grouped = time_scoring(grouped, "grouped").first;
  const double tps_grouped = double(o.trials) / median(runs_grouped);
  const double bw = host_copy_gbps();
  // Bytes of one trial: its record and its score always stream through
  // memory; its two rows do too when the matrix does not stay in the caches.
  const double rec = double(sizeof(model::Trial) + sizeof(float));
  const double rows = 2.0 * double(o.dim) * sizeof(float);
  const double matrix_mb = double(e.values.size() * sizeof(float)) / 1e6;
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  const double roof_cached = bw * 1e9 / rec, roof_cold = bw * 1e9 / (rec + rows);
  const double gflops = 2.0 * double(o.dim) * tps / 1e9;
  const std::string where = fmt::format("host, {} CPU kernels, {} thread(s)", cpu_kernels_name(active_cpu_kernels()),
                                        cpu_threads());
  fmt::print("scoring: {} trials over {} files x {} dims (matrix {:.1f} MB; L2 {} KB, L3 {} KB), {}: "
             "{:.3f} s (median of {}), {:.2f}M trials/s, {:.2f} GFLOP/s (f32); check vs float64 {:.1e}\n",
             o.trials, o.score_files, o.dim, matrix_mb, l2 / 1024, l3 / 1024, where, t, o.repeats, tps / 1e6, gflops,
             err);
  fmt::print("  roofline: host memory {:.1f} GB/s (copy); {:.0f} B/trial with the matrix cached -> {:.0f}M trials/s "
             "({:.1f}% reached), {:.0f} B/trial uncached -> {:.1f}M trials/s ({:.1f}%)\n",
             bw, rec, roof_cached / 1e6, 100 * tps / roof_cached, rec + rows, roof_cold / 1e6, 100 * tps / roof_cold);
  fmt::print("  grouped by first file (as `melforge data trials` writes lists): {:.3f} s, {:.2f}M trials/s, "
             "{:.2f} GFLOP/s; target >= 100M trials/s on 2 threads at 512 dims\n",
             median(runs_grouped), tps_grouped / 1e6, 2.0 * double(o.dim) * tps_grouped / 1e9);
  nlohmann::json j = {{"trials", o.trials},
                      {"files", o.score_files},
                      {"dim", o.dim},
                      {"where", where + " (train::cosine_scores on the CPU: ops::trial_scores, f32)"},
                      {"runs_s", runs},
                      {"median_s", t},
                      {"trials_per_s", tps},
                      {"grouped_runs_s", runs_grouped},
                      {"grouped_trials_per_s", tps_grouped},
                      {"GFLOPs_f32", gflops},
                      {"flops_per_trial", 2 * o.dim},
                      {"check_max_abs_error_vs_f64", err},
                      {"matrix_MB", matrix_mb},
                      {"l2_bytes", l2},
                      {"l3_bytes", l3},
                      {"host_copy_GBps", bw},
                      {"bytes_per_trial_cached", rec},
                      {"bytes_per_trial_uncached", rec + rows},
                      {"roofline_trials_per_s_cached", roof_cached},
                      {"roofline_trials_per_s_uncached", roof_cold},
                      {"gpu_target_trials_per_s", kGpuTargetTrialsPerS}};
  if (gpu) {
    j["device"] = bench_device_scoring(o, e, trials, s);
  } else {
    fmt::print("  GPU target >= 50M trials/s: the host path reaches {:.1f}% of it here (no GPU)\n",
               100 * tps / kGpuTargetTrialsPerS);
  }
  return j;
}

void run_verify_bench(const VerifyOptions& o) {
  MF_CHECK(o.device == "cpu" || o.device == "cuda", "melforge-bench verify --device: expected cpu or cuda, found {}",
           o.device);
  MF_CHECK(o.batch >= 1 && o.per_file >= 1 && o.repeats >= 1,
           "melforge-bench verify: expected --batch, --segments-per-file, --repeats >= 1");
  if (o.threads > 0) set_cpu_threads(o.threads);
  const bool gpu = o.device == "cuda";
  if (gpu && !gpu_available()) {
    fmt::print("melforge-bench verify: no GPU ({}); nothing to measure (--device cpu runs here)\n",
               gpu_info().why_none);
    return;
  }
  const model::ModelConfig mc = verify_model(o);
  const Device dev = gpu ? Device::cuda(0) : Device::cpu();
  std::optional<Stream> stream;
  if (gpu) stream.emplace(dev, "bench-verify");
  cudaStream_t s = gpu ? cudaStream_t(*stream) : nullptr;
  fmt::print("melforge-bench verify on {} ({} CPU threads): {} with loss {}, embedding {}, input_norm {}\n",
             gpu ? device_properties(0).name : std::string("the CPU"), cpu_threads(), o.arch, o.loss,
             mc.features(), o.input_norm);
  nlohmann::json res;
  res["device"] = o.device;
  res["cpu_threads"] = cpu_threads();
  res["model"] = {{"arch", o.arch},           {"loss", o.loss},           {"embedding", mc.features()},
                  {"input_norm", o.input_norm}, {"mels", mc.in_mels},     {"frames", mc.in_frames},
                  {"classes", mc.classes}};
  if (!o.layers_toml.empty()) res["model"]["layers_toml"] = o.layers_toml;
  res["extraction"] = bench_extraction(o, mc, dev, s);
  res["scoring"] = bench_scoring(o, gpu, s);
  if (!common().no_write) fmt::print("wrote {}\n", write_results(common().out_dir, "verify", res));
}

}  // namespace

void register_verify(CLI::App& app) {
  static VerifyOptions o;
  auto* cmd = app.add_subcommand("verify", "Speaker verification: embedding extraction (files/s) and trial "
                                           "scoring (trials/s) beside the memory roofline");
  cmd->add_option("--arch", o.arch, "leakcnn, cnn (with --layers-toml) or a preset (resnet34se-light)")
      ->capture_default_str();
  cmd->add_option("--layers-toml", o.layers_toml, "--arch cnn: a TOML file whose [model] table holds the layers");
  cmd->add_option("--loss", o.loss, "am_softmax | aam_softmax | angleproto | softmaxproto | softmax")
      ->capture_default_str();
  cmd->add_option("--embedding", o.embedding, "Embedding width (0: none; a stack's last layer)")->capture_default_str();
  cmd->add_option("--input-norm", o.input_norm, "Instance norm of each mel band at the input")->capture_default_str();
  cmd->add_option("--mels", o.mels, "Input mels")->capture_default_str();
  cmd->add_option("--frames", o.frames, "Input frames")->capture_default_str();
  cmd->add_option("--classes", o.classes, "Training speakers (the loss's classes; unused by extraction)")
      ->capture_default_str();
  cmd->add_option("--files", o.files, "Extraction: files (0: 256 on the CPU, 16384 on a GPU)")->capture_default_str();
  cmd->add_option("--segments-per-file", o.per_file, "Extraction: segments per file")->capture_default_str();
  cmd->add_option("--batch", o.batch, "Extraction: segments per forward pass")->capture_default_str();
  cmd->add_option("--precision", o.precision, "fp32, bf16 or fp16")->capture_default_str();
  cmd->add_option("--device", o.device, "cpu or cuda")->capture_default_str();
  cmd->add_option("--score-files", o.score_files, "Scoring: files (embedding rows)")->capture_default_str();
  cmd->add_option("--dim", o.dim, "Scoring: embedding width")->capture_default_str();
  cmd->add_option("--trials", o.trials, "Scoring: trials")->capture_default_str();
  cmd->add_option("--repeats", o.repeats, "Timed repeats of each part (median reported)")->capture_default_str();
  cmd->add_option("--threads", o.threads, "CPU threads of the CPU backend (0: every core)")->capture_default_str();
  cmd->callback([] { run_verify_bench(o); });
}

}  // namespace mf::bench
