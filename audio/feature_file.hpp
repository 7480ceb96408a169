// One log-mel HDF5 file from a list of audio files: the feature pipeline
// (audio/feature_pipeline.hpp) feeding an appendable H5Writer, written to a
// temporary name and renamed when complete (engine/atomic_file.hpp). Used for
// each split of `melforge data build` and for `melforge predict --audio`.
// The file is file-structured ([F, L, S, n_mels, frames]) with /labels,
// /files, optional /leak, class_names and the front-end attributes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "audio/feature_pipeline.hpp"
#include "engine/dtype.hpp"

namespace mf::audio {

struct FeatureFileEntry {
  std::filesystem::path source;  // the audio file to read
  std::string name;              // what /files records for it
  std::int64_t label = 0;
  int leak = -1;                 // 0/1, or -1 (then no file of the list has one: no /leak)
};

struct FeatureFileSpec {
  std::vector<std::string> class_names;
  DType dtype = DType::f16;
  bool gzip = false;
  PipelineOptions pipeline;
};

struct FeatureFileResult {
  std::vector<FileOutcome> outcomes;  // one per entry
  std::vector<std::size_t> written;   // entries written, in file order (row i of the file is entry written[i])
  PipelineTimes times;
};

// Writes `out` atomically. No usable file at all is an error naming the first
// one and its reason (an HDF5 file with no rows would not open). progress:
// (files done, good files, audio seconds so far).
FeatureFileResult write_feature_file(const std::filesystem::path& out, const std::vector<FeatureFileEntry>& entries,
                                     const FeatureFileSpec& spec, const PipelineProgress& progress = {});

// The root attributes a built file carries besides sample_rate, hop_length
// and n_mels: n_fft, fmin, fmax, frames, center, log = "dB", ...
std::vector<std::pair<std::string, std::variant<double, std::int64_t, std::string>>> frontend_attributes(
    const FrontendParams& p);

}  // namespace mf::audio
