#include "audio/feature_pipeline.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>

#include "audio/decode.hpp"
#include "audio/logmel.hpp"
#include "engine/cuda_entry.hpp"
#include "engine/error.hpp"
#include "engine/memory.hpp"
#include "engine/parallel.hpp"
#include "engine/stream.hpp"

namespace mf::audio {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A blocking FIFO of slot numbers between the main thread and the sink thread.
class SlotQueue {
 public:
  void push(int s) {
    {
      std::lock_guard<std::mutex> lk(m_);
      q_.push_back(s);
    }
    cv_.notify_one();
  }
  int pop() {  // blocks until a slot is there
    std::unique_lock<std::mutex> lk(m_);
    cv_.wait(lk, [&] { return !q_.empty(); });
    const int s = q_.front();
    q_.pop_front();
    return s;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<int> q_;
};

constexpr int kSlots = 3;
constexpr int kStop = -1;  // pushed to the sink queue to end the sink thread
// Bytes of one slot's waveforms + features at most: batches of long files shrink.
constexpr std::size_t kSlotBytes = std::size_t(64) << 20;
}  // namespace

struct FeaturePipeline::Impl {
  struct Slot {
    std::vector<std::size_t> files;  // indices into the run's paths
    std::vector<FileOutcome> outcome;
    std::vector<std::vector<float>> utterance;  // whole_files: each file's [frames, n_mels]
    PinnedBuffer wave, feat;
    float* d_wave = nullptr;
    float* d_feat = nullptr;
    Event h2d_done, computed, gpu_start, gpu_end;
  };

  PipelineOptions opt;
  std::int64_t W = 0, E = 0, K = 0;  // samples per row, feature values per file, files per batch
  std::unique_ptr<LogmelOp> op;
  Stream h2d, compute, d2h;
  Slot slots[kSlots];
  PipelineTimes times;
  std::mutex times_mutex;  // decode threads add their seconds

  explicit Impl(const PipelineOptions& o) : opt(o) {
    opt.frontend.validate();
    const auto& p = opt.frontend;
    W = p.window_samples();
    E = p.segments() * p.n_mels * p.frames;
    const bool gpu = opt.device.is_cuda();
    MF_CHECK(!opt.whole_files || !gpu, "whole utterances: the front-end runs on the CPU (the CUDA op takes fixed "
             "windows); use --device cpu");
    MF_CHECK(!opt.whole_files || p.segments() == 1, "whole utterances: one segment per file (--long 1 --short 1), "
             "found {} x {}", p.long_segments, p.short_segments);
    K = opt.batch_files > 0 ? opt.batch_files : (gpu ? 256 : 64);
    K = std::max<std::int64_t>(1, std::min<std::int64_t>(K, std::int64_t(kSlotBytes / (4 * std::size_t(W + E)))));
    times.threads = opt.threads > 0 ? opt.threads : std::max(1, int(std::thread::hardware_concurrency()));
    if (gpu) {
      set_current(opt.device);
      h2d = Stream(opt.device, "audio.h2d");
      compute = Stream(opt.device, "audio.logmel");
      d2h = Stream(opt.device, "audio.d2h");
      op = MF_CUDA_ENTRY(make_logmel_cuda)(p, K);
    } else {
      op = make_logmel_cpu(p, /*threaded=*/false);  // one file at a time on each decode thread
    }
    for (auto& s : slots) {
      s.wave = PinnedBuffer(std::size_t(K * W) * sizeof(float), /*pin=*/gpu);
      s.feat = PinnedBuffer(std::size_t(K * E) * sizeof(float), /*pin=*/gpu);
      if (gpu) {
        s.d_wave = static_cast<float*>(device_alloc(std::size_t(K * W) * sizeof(float), opt.device.index, compute));
        s.d_feat = static_cast<float*>(device_alloc(std::size_t(K * E) * sizeof(float), opt.device.index, compute));
        s.h2d_done = Event(opt.device);
        s.computed = Event(opt.device);
        s.gpu_start = Event(opt.device, true);
        s.gpu_end = Event(opt.device, true);
      }
    }
    if (gpu) compute.synchronize();
  }

  ~Impl() {
    for (auto& s : slots) {
      if (s.d_wave) device_free(s.d_wave, compute);
      if (s.d_feat) device_free(s.d_feat, compute);
    }
  }

  // The file's mono samples at the front-end's rate (at most `limit` of
  // them where no resampling follows); its duration into out, seconds into dec_s and res_s.
  std::vector<float> decode_at_rate(const std::filesystem::path& path, std::int64_t limit, FileOutcome& out,
                                    double& dec_s, double& res_s) const {
    const auto& p = opt.frontend;
    auto t0 = Clock::now();
    MonoAudio a = decode_mono_for(path, p.sample_rate, limit);
    dec_s += seconds_since(t0);
    out.audio_seconds = double(a.file_frames) / double(a.sample_rate);
    if (a.sample_rate == p.sample_rate) return std::move(a.samples);
    t0 = Clock::now();
    std::vector<float> x = resample(a.samples, double(a.sample_rate), double(p.sample_rate));
    res_s += seconds_since(t0);
    return x;
  }

  // One file into row `row` of the slot's waveforms; on the CPU also its
  // features into `feat` (the decode thread runs the op: decoding and FFTs
  // overlap across threads, no thread waits for a batch).
  void load_file(const std::filesystem::path& path, float* row, float* feat, FileOutcome& out, double& dec_s,
                 double& res_s, double& feat_s) {
    const auto& p = opt.frontend;
    try {
      std::vector<float> x = decode_at_rate(path, W, out, dec_s, res_s);  // a prefix when no resampling follows
      const auto n = std::int64_t(x.size());
      if (n < p.min_samples()) {
        if (!opt.pad) {
          out.reason = fmt::format(
              "too short: {:.3f} s gives {} frames at hop {} and {} Hz; {} segments of {} frames need {} samples "
              "({:.3f} s) (--pad pads short files with silence)",
              out.audio_seconds, 1 + n / p.hop_length, p.hop_length, p.sample_rate, p.segments(), p.frames,
              p.min_samples(), double(p.min_samples()) / double(p.sample_rate));
          return;
        }
        out.padded = true;
      }
      const std::int64_t m = std::min(n, W);
      std::memcpy(row, x.data(), std::size_t(m) * sizeof(float));
      std::fill(row + m, row + W, 0.f);
      out.ok = true;
      if (!op->on_device()) {
        const auto t0 = Clock::now();
        op->compute(1, row, feat, nullptr);
        feat_s += seconds_since(t0);
      }
    } catch (const Error& e) {  // AudioError from decoding; resampling's own errors are this file's too
      out.reason = e.message();
    }
  }

  // Whole-utterance mode: the file's whole spectrogram, [frames, n_mels].
  void load_utterance(const std::filesystem::path& path, std::vector<float>& utt, FileOutcome& out, double& dec_s,
                      double& res_s, double& feat_s) {
    const auto& p = opt.frontend;
    try {
      std::vector<float> x = decode_at_rate(path, std::numeric_limits<std::int64_t>::max(), out, dec_s, res_s);
      const auto n = std::int64_t(x.size());
      if (n < p.min_samples()) {
        if (!opt.pad) {
          out.reason = fmt::format("too short: {:.3f} s gives {} frames at hop {} and {} Hz, fewer than the {} "
                                   "--frames an utterance must have ({:.3f} s) (--pad pads short files with silence)",
                                   out.audio_seconds, 1 + n / p.hop_length, p.hop_length, p.sample_rate, p.frames,
                                   double(p.min_samples()) / double(p.sample_rate));
          return;
        }
        out.padded = true;
      }
      FrontendParams q = p;  // this file's length: one segment of all its frames
      q.frames = std::max(p.frames, 1 + n / p.hop_length);
      x.resize(std::size_t(q.window_samples()), 0.f);  // the window past the end is silence (center padding)
      const auto t0 = Clock::now();
      std::vector<float> mel(std::size_t(q.n_mels * q.frames));
      make_logmel_cpu(q, /*threaded=*/false)->compute(1, x.data(), mel.data(), nullptr);
      utt.resize(mel.size());
      for (std::int64_t t = 0; t < q.frames; ++t)
        for (std::int64_t m = 0; m < q.n_mels; ++m) utt[std::size_t(t * q.n_mels + m)] = mel[std::size_t(m * q.frames + t)];
      feat_s += seconds_since(t0);
      out.ok = true;
    } catch (const Error& e) {
      out.reason = e.message();
    }
  }

  // Decodes the slot's files on the decode threads (each takes the next file).
  void decode_batch(Slot& s, const std::vector<std::filesystem::path>& paths) {
    const auto n = s.files.size();
    s.outcome.assign(n, FileOutcome{});
    s.utterance.assign(opt.whole_files ? n : 0, {});
    std::atomic<std::size_t> next{0};
    float* wave = static_cast<float*>(s.wave.data());
    float* feat = static_cast<float*>(s.feat.data());
    const int threads = int(std::min<std::size_t>(std::size_t(times.threads), n));
    run_on_threads(threads, [&](int) {
      double dec = 0, res = 0, fe = 0;
      for (std::size_t i; (i = next.fetch_add(1)) < n;) {
        if (opt.whole_files)
          load_utterance(paths[s.files[i]], s.utterance[i], s.outcome[i], dec, res, fe);
        else
          load_file(paths[s.files[i]], wave + std::int64_t(i) * W, feat + std::int64_t(i) * E, s.outcome[i], dec,
                    res, fe);
      }
      std::lock_guard<std::mutex> lk(times_mutex);
      times.decode_thread_s += dec;
      times.resample_thread_s += res;
      times.features_thread_s += fe;
    });
    if (opt.strict)
      for (std::size_t i = 0; i < n; ++i)
        MF_CHECK(s.outcome[i].ok, "{}: {} (--strict stops at the first bad file)", paths[s.files[i]].string(),
                 s.outcome[i].reason);
  }

  // Enqueues the op on the slot's batch (GPU; on the CPU the decode threads ran it).
  void features(Slot& s) {
    const auto n = std::int64_t(s.files.size());
    if (!op->on_device()) return;
    s.gpu_start.record(h2d);
    MF_CUDA_CHECK(cudaMemcpyAsync(s.d_wave, s.wave.data(), std::size_t(n * W) * sizeof(float), cudaMemcpyHostToDevice,
                                  h2d));
    s.h2d_done.record(h2d);
    s.h2d_done.wait_on(compute);
    op->compute(n, s.d_wave, s.d_feat, compute);
    s.computed.record(compute);
    s.computed.wait_on(d2h);
    MF_CUDA_CHECK(cudaMemcpyAsync(s.feat.data(), s.d_feat, std::size_t(n * E) * sizeof(float), cudaMemcpyDeviceToHost,
                                  d2h));
    s.gpu_end.record(d2h);
  }

  // Whole-utterance sink side: the good files' frames, concatenated.
  void deliver_utterances(Slot& s, const UtteranceSink& sink) {
    const auto t0 = Clock::now();
    std::vector<std::size_t> good;
    std::vector<std::int64_t> frames;
    std::vector<float> values;
    for (std::size_t i = 0; i < s.files.size(); ++i) {
      if (!s.outcome[i].ok) continue;
      good.push_back(s.files[i]);
      frames.push_back(std::int64_t(s.utterance[i].size()) / opt.frontend.n_mels);
      values.insert(values.end(), s.utterance[i].begin(), s.utterance[i].end());
      std::vector<float>().swap(s.utterance[i]);
    }
    if (!good.empty()) sink(good, frames, values.data());
    times.sink_s += seconds_since(t0);
  }

  // Sink side: waits for the slot's features, compacts the good rows, calls the sink.
  void deliver(Slot& s, const FeatureSink& sink) {
    if (op->on_device()) {
      s.gpu_end.synchronize();
      times.features_s += double(Event::elapsed_ms(s.gpu_start, s.gpu_end)) / 1000;
    }
    const auto t0 = Clock::now();
    float* feat = static_cast<float*>(s.feat.data());
    std::vector<std::size_t> good;
    for (std::size_t i = 0; i < s.files.size(); ++i) {
      if (!s.outcome[i].ok) continue;
      if (good.size() != i)
        std::memmove(feat + std::int64_t(good.size()) * E, feat + std::int64_t(i) * E, std::size_t(E) * sizeof(float));
      good.push_back(s.files[i]);
    }
    if (!good.empty()) sink(good, feat);
    times.sink_s += seconds_since(t0);
  }
};

FeaturePipeline::FeaturePipeline(const PipelineOptions& opt) : impl_(std::make_unique<Impl>(opt)) {}
FeaturePipeline::~FeaturePipeline() = default;
const PipelineTimes& FeaturePipeline::times() const { return impl_->times; }

std::vector<FileOutcome> FeaturePipeline::run(const std::vector<std::filesystem::path>& paths, const FeatureSink& sink,
                                              const PipelineProgress& progress) {
  MF_CHECK(!impl_->opt.whole_files, "FeaturePipeline::run: whole_files delivers through run_utterances");
  return run_batches(paths, [&](int s) { impl_->deliver(impl_->slots[s], sink); }, progress);
}

std::vector<FileOutcome> FeaturePipeline::run_utterances(const std::vector<std::filesystem::path>& paths,
                                                         const UtteranceSink& sink, const PipelineProgress& progress) {
  MF_CHECK(impl_->opt.whole_files, "FeaturePipeline::run_utterances needs PipelineOptions::whole_files");
  return run_batches(paths, [&](int s) { impl_->deliver_utterances(impl_->slots[s], sink); }, progress);
}

std::vector<FileOutcome> FeaturePipeline::run_batches(const std::vector<std::filesystem::path>& paths,
                                                      const std::function<void(int slot)>& deliver,
                                                      const PipelineProgress& progress) {
  Impl& im = *impl_;
  const auto t0 = Clock::now();
  std::vector<FileOutcome> outcomes(paths.size());
  SlotQueue free_slots, ready;
  for (int s = 0; s < kSlots; ++s) free_slots.push(s);
  std::exception_ptr sink_error;
  std::atomic<bool> sink_failed{false};
  std::thread sink_thread([&] {
    try {
      if (im.op->on_device()) set_current(im.opt.device);  // its event waits belong to the pipeline's GPU
    } catch (...) {
      sink_error = std::current_exception();
      sink_failed = true;
    }
    for (int s; (s = ready.pop()) != kStop;) {
      if (!sink_failed) {
        try {
          deliver(s);
        } catch (...) {
          sink_error = std::current_exception();
          sink_failed = true;
        }
      }
      free_slots.push(s);
    }
  });
  std::exception_ptr main_error;
  try {
    std::int64_t done = 0, good = 0;
    double audio = 0;
    for (std::size_t first = 0; first < paths.size() && !sink_failed; first += std::size_t(im.K)) {
      Impl::Slot& s = im.slots[free_slots.pop()];
      const int slot = int(&s - im.slots);
      s.files.clear();
      for (std::size_t i = first; i < std::min(paths.size(), first + std::size_t(im.K)); ++i) s.files.push_back(i);
      const auto td = Clock::now();
      im.decode_batch(s, paths);
      im.times.decode_wall_s += seconds_since(td);
      for (std::size_t i = 0; i < s.files.size(); ++i) {
        outcomes[s.files[i]] = s.outcome[i];
        ++done;
        if (s.outcome[i].ok) ++good, audio += s.outcome[i].audio_seconds;
      }
      im.features(s);
      ready.push(slot);
      if (progress) progress(done, good, audio);
    }
  } catch (...) {
    main_error = std::current_exception();
  }
  ready.push(kStop);
  sink_thread.join();
  if (im.op->on_device()) {
    im.h2d.synchronize();
    im.compute.synchronize();
    im.d2h.synchronize();
  }
  if (main_error) std::rethrow_exception(main_error);
  if (sink_error) std::rethrow_exception(sink_error);
  im.times.wall_s += seconds_since(t0);
  for (const auto& o : outcomes) {
    ++im.times.files;
    if (o.ok) ++im.times.ok_files, im.times.audio_seconds += o.audio_seconds;
  }
  return outcomes;
}

}  // namespace mf::audio
