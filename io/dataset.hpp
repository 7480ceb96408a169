// HDF5 mel-spectrogram datasets: the schema, its validation at open, and a
// thread-safe row reader (docs/dataset.md has the format for users).
//
// Schema (dataset names configurable through DatasetNames):
//   /segments  float16 or float32 (IEEE, little-endian), either
//              flat            [N, n_mels, frames]
//              file-structured [F, L, S, n_mels, frames]  (N = F*L*S; segment
//              i belongs to file i / (L*S): segments are numbered row-major)
//   /labels    any integer type, [N] (flat) or [F] (file-structured: each
//              segment inherits its file's label), values 0..C-1
//   /leak      optional, integer or bool 0/1, shaped like /labels; when absent
//              leak = (label != normal class)
//   or, whole utterances (ragged; docs/dataset.md):
//   /segments  [T, n_mels]: every utterance's frames, one after another
//              (frame-major: a frame's n_mels values are contiguous)
//   /lengths   any integer type, [F]: utterance f is frames
//              [sum(lengths[:f]), sum(lengths[:f+1])); each >= 1, summing to T
//   /labels    [F] (and /leak, /files as for file-structured data)
//   A ragged dataset reads as F segments of crop_frames frames
//   (DatasetNames::crop_frames), one crop per utterance (io/crops.hpp).
//   attributes (on /segments or on the root group, optional): class_names
//              (strings, defines C), sample_rate, hop_length, n_mels (must
//              match the shape when present)
//
// Validation at open (Dataset::open) throws mf::Error naming the file, the
// dataset, what was expected and what was found, for: a missing file, a file
// that is not HDF5, a truncated or damaged file, a missing dataset, wrong
// rank, non-float or unsupported-width segments, an empty dataset, label/leak
// counts that do not match, non-integer labels, labels out of range, leak
// values other than 0/1, an n_mels attribute that disagrees with the shape,
// chunks that were never written, and data extents beyond the end of the file.
//
// Non-finite values (NaN, Inf) are detected when segment data is read
// (Dataset::read with check_finite): every batch the streaming reader builds,
// and the whole dataset when it is loaded once (resident mode, `data inspect`).
// The message names the segment, its file / long / short coordinates, the mel
// bin and the frame. Open does not scan the data (it would read a file that
// may be far larger than memory twice).
//
// Storage: addresses are resolved once at open (H5Dget_offset for contiguous
// data, H5Dget_chunk_info_by_coord for every chunk). Reads then bypass HDF5:
// positioned reads (pread) from any number of threads, outside HDF5's global
// lock. Chunks filtered with shuffle and/or deflate (what h5py writes with
// compression="gzip", shuffle=True) are decompressed in the calling thread
// with zlib. Any other layout or filter (compact storage, lzf, szip,
// fletcher32, ...) falls back to H5Dread of one segment at a time under
// HDF5's global lock: correct, slower, reported by StorageInfo::fast_path.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/dtype.hpp"
#include "engine/tensor.hpp"

namespace mf::io {

// Names of the datasets inside a file, and how to interpret the labels.
struct DatasetNames {
  std::string segments = "segments";
  std::string labels = "labels";
  std::string leak = "leak";  // optional; "" = never read, always derive
  // The class whose label means "no leak" when /leak is absent. -1: the class
  // named "normal" (case-insensitive) in class_names when there is one, else 0.
  int normal_class = -1;
  // Number of classes. 0: len(class_names) when present, else max label + 1.
  int num_classes = 0;
  // Where num_classes and normal_class were set, for messages ("model.num_classes", "--classes").
  std::string num_classes_from = "model.num_classes";
  std::string normal_class_from = "data.normal_class";
  // The classes of the model the data is for, by name (the training set's, or
  // a checkpoint's), or empty: the file's own classes. When given, a file that
  // names its classes (the class_names attribute) has its labels mapped onto
  // these by name, and a class the list lacks is an error naming both lists;
  // a file without names is taken index for index (at most this many
  // classes). Either way the dataset then has exactly these classes.
  std::vector<std::string> classes;
  // Whose classes those are, for messages ("the training set", "checkpoint runs/a/best.h5").
  std::string classes_from = "the model";
  // Whole utterances (ragged files): the frames of every crop read from
  // them (data.crop_frames); 0: the shortest utterance's length.
  std::int64_t crop_frames = 0;
  // Evaluation of whole utterances (eval.crops): each utterance read as this
  // many evenly spaced crops (eval_crop_start), consecutive segments of one
  // file (segments_per_file), so a file's embedding or vote is over its
  // crops. 1: the centred crop. Not for training (the reader's random crops
  // take one per utterance).
  std::int64_t crops_per_utterance = 1;
  // Evaluation of whole utterances at their own lengths (eval.crops = full):
  // read() still gives crops, but evaluation reads each utterance whole
  // (read_utterance), train/eval_shard.cpp.
  bool whole_utterances = false;
};

// ragged_frames: a ragged file's frames as rows of one frame (Dataset's own
// reads of crops; DatasetInfo::where names the utterance).
enum class SegmentLayout : std::uint8_t { flat, file_structured, ragged, ragged_frames };
enum class StorageLayout : std::uint8_t { contiguous, chunked, compact, other };
std::string_view segment_layout_name(SegmentLayout l);
std::string_view storage_layout_name(StorageLayout l);

struct StorageInfo {
  StorageLayout layout = StorageLayout::contiguous;
  std::vector<std::int64_t> chunk;       // chunk dims (chunked only)
  std::vector<std::string> filters;      // filter names, pipeline order
  std::int64_t num_chunks = 0;           // allocated chunks (chunked only)
  std::uint64_t storage_bytes = 0;       // bytes the data takes in the file
  bool fast_path = true;                 // pread (+ zlib) rather than H5Dread under HDF5's lock
};

struct DatasetInfo {
  std::string path;
  DatasetNames names;
  SegmentLayout layout = SegmentLayout::flat;
  Shape shape;                 // /segments as stored
  std::int64_t num_segments = 0, n_mels = 0, frames = 0;
  // File structure. Flat data: every segment is its own file (F = N, L = S = 1).
  std::int64_t num_files = 0, long_per_file = 1, short_per_long = 1, segments_per_file = 1;
  DType dtype = DType::f32;    // f16 or f32, as stored
  int num_classes = 0;
  std::vector<std::string> class_names;  // size num_classes ("class_K" when the file has none)
  bool class_names_in_file = false;      // the file named its classes (attribute class_names)
  // With DatasetNames::classes given: the classes that occur in the file (a
  // test set may hold a subset), in the model's order.
  std::vector<std::string> classes_present;
  int normal_class = 0;
  bool leak_in_file = false;             // /leak was read (else derived)
  std::vector<std::int32_t> labels;      // per segment, [N]
  std::vector<std::uint8_t> leak;        // per segment, [N], 0/1
  std::vector<std::int32_t> file_labels; // per file, [F]
  std::vector<std::uint8_t> file_leak;   // per file, [F]
  double sample_rate = 0;                // 0 when the attribute is absent
  std::int64_t hop_length = 0;           // 0 when absent
  // The audio front-end's attributes (`melforge data build` writes them; see
  // audio/frontend_params.hpp): all present, or n_fft = 0.
  std::int64_t n_fft = 0, frames_attr = 0;
  double fmin = 0, fmax = 0;
  // dB per unit of the values (attribute db_per_unit: 1 for dB, as `data
  // build` writes; 10 for dB/10, as `data synth` writes); 0 when absent.
  double db_per_unit = 0;
  // Each file's source path (the /files string dataset that `data build`
  // writes, [F]); empty when the file has none. file_name() gives "#<index>"
  // then (speaker verification's trial lists name files this way).
  std::vector<std::string> file_names;
  StorageInfo storage;
  // Ragged data: utterance f's frames are [utterance_offsets[f],
  // utterance_offsets[f + 1]) of /segments ([F + 1] entries, the last T).
  std::vector<std::int64_t> utterance_offsets;

  bool ragged() const { return layout == SegmentLayout::ragged; }
  std::int64_t utterance_frames(std::int64_t f) const {
    return utterance_offsets[std::size_t(f + 1)] - utterance_offsets[std::size_t(f)];
  }

  std::int64_t file_of(std::int64_t segment) const { return segment / segments_per_file; }
  std::string file_name(std::int64_t file) const;
  std::int64_t segment_elems() const { return n_mels * frames; }
  std::size_t segment_bytes() const { return std::size_t(segment_elems()) * dtype_size(dtype); }
  // "segment 1234 (file 38, long 2, short 5)" or "segment 1234" for flat data.
  std::string where(std::int64_t segment) const;
};

// The most reader threads melforge starts for one dataset (reader.threads is
// range-checked against it where it is declared, model/run_config.cpp): far
// above what a disk or the CPU's cores can use, far below what the system can
// start.
inline constexpr int kMaxReadThreads = 256;
// The most classes a dataset without a class_names attribute may have (their
// names "class_K" are generated): 2^20, far above any label set in use, and a
// bound on what one damaged label value can make melforge allocate.
inline constexpr int kMaxUnnamedClasses = 1 << 20;

// The class named "normal" (any case; the last such), or -1: the no-leak
// class when the configuration names none (model.heads = auto's rule too).
int find_normal_class(const std::vector<std::string>& class_names);

class Dataset {
 public:
  // Opens and validates `path`; throws mf::Error (see the top of this file).
  static std::shared_ptr<const Dataset> open(const std::string& path, const DatasetNames& names = {});
  ~Dataset();
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  const DatasetInfo& info() const { return info_; }

  // Reads segments rows[0..n) into dst as [n, n_mels, frames] row-major,
  // converted to dst_type (f32, f16 or bf16; round to nearest even). Any
  // order; sorted rows coalesce into fewer reads. Thread-safe: any number of
  // threads may read at once. With check_finite, the first NaN/Inf throws with
  // its position (dst is then partly written).
  void read(std::span<const std::int64_t> rows, DType dst_type, void* dst, bool check_finite) const;
  // Ragged data: crop i is frames starts[i], starts[i] + 1, ... of utterance
  // rows[i] (an utterance, not a segment), crop_frames of them, wrapping to
  // the utterance's first frame after its last (io/crops.hpp has the rule),
  // written as [n_mels, frames] like a segment. read() of ragged data reads
  // segment s as crop s % K of utterance s / K (K = crops_per_utterance):
  // the centred crop for K = 1, else eval_crop_start's. starts[i] must lie
  // in [0, the utterance's length).
  void read_crops(std::span<const std::int64_t> rows, std::span<const std::int64_t> starts, DType dst_type,
                  void* dst, bool check_finite) const;
  // Ragged data: utterance u whole, [n_mels, its frames], into dst.
  void read_utterance(std::int64_t u, DType dst_type, void* dst, bool check_finite) const;

  // Reads everything (in blocks, `threads` at once, 0..kMaxReadThreads) into
  // a host buffer of N * n_mels * frames elements of dst_type.
  void read_all(DType dst_type, void* dst, bool check_finite, int threads) const;

  struct Impl;

 private:
  explicit Dataset(std::unique_ptr<Impl> impl, DatasetInfo info);
  void read_rows(const DatasetInfo& as, std::span<const std::int64_t> rows, DType dt, void* dst, bool check) const;
  void read_frames(std::span<const std::int64_t> rows, std::span<const std::int64_t> starts, std::int64_t frames,
                   DType dt, void* dst, bool check) const;
  std::unique_ptr<Impl> impl_;
  DatasetInfo info_;
  DatasetInfo frames_;  // ragged data: the frames as rows [T, 1, n_mels] (SegmentLayout::ragged_frames)
};

}  // namespace mf::io
