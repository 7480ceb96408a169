// The audio front-end's pipeline: files in, log-mel segments out, in file
// order, in batches. Used by `melforge data build` (into HDF5) and
// `melforge predict --audio`.
//
//   decode threads  -> a batch of waveforms (libsndfile + libsoxr; one row per
//                      file: its first window_samples() samples, zeros after)
//   features        -> the logmel op (audio/logmel.hpp): on the CPU, each
//                      decode thread runs the twin on the file it just decoded
//                      (decoding and FFTs overlap across threads); on the GPU,
//                      per batch: pinned staging, H2D on a copy stream, the op
//                      on a compute stream, D2H on a third, ordered by events
//   sink thread     -> the caller's sink gets each batch's good rows, in order
// A ring of batch slots lets decoding of batch k+1 overlap the GPU's work on
// batch k and the sink's on batch k-1.
//
// A file that cannot become features (unreadable, not audio, empty,
// non-finite, too short without pad) is an outcome with its reason, never a
// silent drop; with strict, the first one is an error naming the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "audio/frontend_params.hpp"
#include "engine/device.hpp"

namespace mf::audio {

struct PipelineOptions {
  FrontendParams frontend;
  bool pad = false;              // files shorter than min_samples(): padded with silence instead of skipped
  bool strict = false;           // the first bad file is an error
  Device device = Device::cpu(); // where the logmel op runs
  int threads = 0;               // decode threads; 0: one per core
  std::int64_t batch_files = 0;  // files per batch; 0: 64 on the CPU, 256 on a GPU
  // Whole utterances (`data build --utterances`): every file's whole
  // spectrogram, 1 + samples / hop_length frames (librosa's count), delivered
  // frame-major to an UtteranceSink; frontend.frames is then the shortest kept
  // (shorter: skipped, or padded with pad). CPU only: the CUDA op takes
  // fixed windows.
  bool whole_files = false;
};

struct FileOutcome {
  bool ok = false;
  std::string reason;       // why not, when !ok
  double audio_seconds = 0; // duration of the file (at its own rate)
  bool padded = false;      // shorter than needed, padded with silence
};

// Seconds. Decoding, resampling and (CPU) the op run on `threads` threads:
// *_thread_s sum over threads (time spent), the others are wall-clock time.
struct PipelineTimes {
  double decode_thread_s = 0, resample_thread_s = 0, features_thread_s = 0;
  double decode_wall_s = 0;    // the main thread waiting for a batch's decode (+ CPU features)
  double features_s = 0;       // GPU: the copies + compute of every batch (event timing)
  double sink_s = 0;           // the sink thread's time (overlapped)
  double wall_s = 0;
  int threads = 0;
  std::int64_t files = 0, ok_files = 0;
  double audio_seconds = 0;    // of the good files
};

// sink(files, values): `files` are indices (into run()'s `paths`) of a batch's
// good files, ascending; values holds their features, [files.size(),
// segments, n_mels, frames] f32. Called from one thread, batches in order.
using FeatureSink = std::function<void(std::span<const std::size_t> files, const float* values)>;
// Whole utterances: `frames[i]` frames of file files[i], one after another,
// frame-major ([sum(frames), n_mels] f32).
using UtteranceSink =
    std::function<void(std::span<const std::size_t> files, std::span<const std::int64_t> frames, const float* values)>;
// progress(done files, good files, audio seconds so far), from the main thread.
using PipelineProgress = std::function<void(std::int64_t, std::int64_t, double)>;

class FeaturePipeline {
 public:
  explicit FeaturePipeline(const PipelineOptions& opt);
  ~FeaturePipeline();
  FeaturePipeline(const FeaturePipeline&) = delete;
  FeaturePipeline& operator=(const FeaturePipeline&) = delete;

  // Processes every path; returns one outcome per path. Rethrows the first
  // error of the sink or (strict) of a file.
  std::vector<FileOutcome> run(const std::vector<std::filesystem::path>& paths, const FeatureSink& sink,
                               const PipelineProgress& progress = {});
  // PipelineOptions::whole_files: the same, each file whole.
  std::vector<FileOutcome> run_utterances(const std::vector<std::filesystem::path>& paths, const UtteranceSink& sink,
                                          const PipelineProgress& progress = {});
  const PipelineTimes& times() const;

 private:
  struct Impl;
  // The batches' loop: decode (and CPU features) on the main and decode
  // threads, then `deliver(slot)` of each batch on the sink thread, in order.
  std::vector<FileOutcome> run_batches(const std::vector<std::filesystem::path>& paths,
                                       const std::function<void(int slot)>& deliver, const PipelineProgress& progress);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mf::audio
