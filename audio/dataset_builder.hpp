// `melforge data build`: a folder of audio files -> OUT/train.h5, val.h5,
// test.h5 in the file-structured layout of docs/dataset.md
// ([F, L, S, n_mels, frames], one audio file per F entry, /files naming each
// entry's source relative to the audio folder, the front-end parameters as
// attributes). Files are split by file (stratified per class, seeded) or by
// the user's groups; every file that cannot become features is reported with
// its reason (OUT/skipped.csv) and skipped, or stops the build with strict.
// Each output file is written to a temporary name and renamed when complete
// (engine/atomic_file.hpp): an interrupted build never leaves a half-written
// train.h5.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "audio/feature_pipeline.hpp"
#include "audio/split_files.hpp"
#include "engine/dtype.hpp"

namespace mf::audio {

struct BuildOptions {
  std::filesystem::path audio_root, out_dir;
  std::filesystem::path labels_csv;    // empty: one sub-folder per class
  std::filesystem::path split_by_csv;  // empty: stratified split by file
  SplitFractions split;
  std::uint64_t seed = 0;
  PipelineOptions pipeline;            // front-end, pad, strict, device, threads, batch
  DType dtype = DType::f16;            // of /segments
  bool gzip = false;                   // chunked + shuffle + deflate (else chunked, uncompressed)
};

struct BuildSplit {
  std::string name;
  std::filesystem::path path;          // empty when the split has no files (not written)
  std::int64_t files_listed = 0, files_written = 0;
  std::vector<std::int64_t> files_per_class;
  PipelineTimes times;
};

struct SkippedFile {
  std::string path, reason;
};

struct BuildReport {
  std::vector<std::string> class_names;
  std::array<BuildSplit, 3> splits;
  std::vector<SkippedFile> skipped;     // bad files, in split then path order
  std::vector<std::string> ignored;     // not audio by extension, or outside class folders
  std::int64_t padded = 0;
  double write_s = 0;                   // HDF5 writing (the sink thread, overlapped)
  double wall_s = 0;
};

// progress(split name, files done, files in the split, audio seconds so far).
using BuildProgress = std::function<void(const std::string&, std::int64_t, std::int64_t, double)>;

BuildReport build_dataset(const BuildOptions& opt, const BuildProgress& progress = {});

}  // namespace mf::audio
