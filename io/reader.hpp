// BatchReader: fixed-shape batches from an io::Dataset, for training and
// evaluation, on the GPU or the CPU backend.
//
// Typical use (the trainer):
//
//   auto ds = io::Dataset::open("train.h5");              // validates the file
//   io::ReaderConfig rc;                                   // see the fields below
//   rc.batch_size = 256; rc.seed = 7; rc.device = dev; rc.dtype = DType::bf16;
//   io::BatchReader reader(ds, rc);
//   reader.restore(saved_state);                           // optional: resume
//   for (step ...) {
//     io::Batch b = reader.next(compute_stream);           // b.wait_ms: time next() blocked
//     forward(b.x, ...);  loss(b.labels, b.leak, b.valid);
//     saved_state = reader.state();                        // state of the NEXT batch
//   }
//
// Evaluation in file order (file-level voting): shuffle = false and
// last_batch = pad; read batches_per_epoch() batches; rows [0, valid) are real,
// segments come in file order, b.file gives each row's file id.
//
// What a Batch holds (all on cfg.device, B = batch_size):
//   x       [B, n_mels, frames, 1] nhwc, cfg.dtype (f32 | bf16 | f16)
//   labels  i32 [B]  class index
//   leak    f32 [B]  0 or 1 (the leak head's target)
//   index   i32 [B]  segment index in the dataset
//   file    i32 [B]  file id (segment / segments_per_file)
//   valid   rows [0, valid) are real; padded rows (last_batch = pad) repeat
//           real segments so they are finite, and must be masked by the caller
// Lifetime: a Batch's tensors belong to the reader and stay valid until the
// following call of next(); work queued on the compute stream before that call
// may read them (the reader orders its later writes after that work). Copy
// what must live longer.
//
// Order: a seeded permutation per epoch (shuffle), or 0..N-1 (no shuffle);
// batch k of epoch e holds positions [k*B, (k+1)*B) of that order, sorted by
// segment index (locality); the permutation spans all segments, so batches
// draw across files. With per_class = M > 0 the order is speaker-balanced
// instead (io/balanced_order.hpp: M consecutive rows of each of B/M classes,
// kept in that order, every row valid). state() / restore() resume exactly at
// (epoch, position).
//
// Two modes:
// - streaming: worker threads pread segments into a ring of pinned host slots
//   (ring_slots, allocated once); on a GPU each slot is copied on a dedicated
//   copy stream into one of two device buffers and the compute stream waits on
//   an event (never the host). On the CPU backend the slot itself is the batch.
// - resident: the whole dataset is loaded once (in cfg.dtype) into device
//   memory (or host memory on the CPU backend) and each batch is gathered there
//   (io/gather.hpp): the host does no per-batch work. `auto` picks resident
//   when it fits in max_device_share of the free device memory (or of the
//   available host memory on the CPU backend).
//
// Non-finite values: checked (check_finite) on every streamed batch, and on the
// whole dataset when it is loaded for resident mode.
// Errors: a worker's exception (I/O error, truncated file, NaN...) is rethrown
// by next() for the batch it concerns, with the batch's epoch and position;
// the reader stays failed afterwards. The destructor stops and joins every
// thread, also after an error.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/device.hpp"
#include "engine/named_enum.hpp"
#include "engine/tensor.hpp"
#include "io/dataset.hpp"

namespace mf::io {

// Whether the dataset is kept in GPU memory (reader.gpu_cache): auto when it fits.
enum class Residency : std::uint8_t { automatic, on, off };
inline constexpr NamedEnum<Residency> kResidencyNames[] = {
    {Residency::automatic, "auto"}, {Residency::on, "on"}, {Residency::off, "off"}};
enum class LastBatch : std::uint8_t { drop, pad };
inline constexpr NamedEnum<LastBatch> kLastBatchNames[] = {{LastBatch::drop, "drop"}, {LastBatch::pad, "pad"}};
Residency parse_residency(std::string_view s);  // "auto" | "on" | "off"
LastBatch parse_last_batch(std::string_view s); // "drop" | "pad"

struct ReaderConfig {
  std::int64_t batch_size = 256;
  bool shuffle = true;
  std::uint64_t seed = 0;
  LastBatch last_batch = LastBatch::drop;
  int threads = 2;               // streaming worker threads
  int ring_slots = 3;            // pinned host slots, 2..8
  Device device = Device::cpu();
  DType dtype = DType::f32;      // compute dtype of Batch::x: f32, bf16 or f16
  Residency resident = Residency::automatic;
  double max_device_share = 0.5; // of free device memory (available host memory on the CPU)
  bool check_finite = true;
  int per_class = 0;             // speaker-balanced batches of M per class (0: off; `shuffle` is then not read)
  // Whole utterances (ragged data): a new crop per utterance every epoch
  // (io/crops.hpp, from `seed`), read by the streamed reader; false: the
  // centred crops, as Dataset::read gives them (evaluation).
  bool random_crops = false;
  // Data parallelism: this process's share of the batches. Of every `shares`
  // consecutive batch positions of an epoch (p, p+1, ...) the reader reads
  // and delivers only p + share: process `share` of `shares` reads its own
  // micro-batches and no one else's. state() and restore() count positions
  // over all of them (the group's position, a multiple of `shares`), so
  // every process has the same state. An epoch holds this share's batches
  // below batches_per_epoch().
  int share = 0, shares = 1;
};

struct ReaderState {
  std::int64_t epoch = 0;
  std::int64_t position = 0;  // batch index within the epoch
  friend bool operator==(const ReaderState&, const ReaderState&) = default;
};

struct Batch {
  Tensor x, labels, leak, index, file;
  std::int64_t valid = 0;
  std::int64_t epoch = 0, position = 0;
  bool last_in_epoch = false;
  double wait_ms = 0;  // host time spent in next(): blocked waiting for a slot
                       // (streaming), or gathering on the CPU backend (resident)
};

struct ReaderStats {
  std::int64_t batches = 0;
  double wait_ms = 0;        // total of Batch::wait_ms
  double read_ms = 0;        // worker time spent reading + converting (all threads)
  std::uint64_t bytes_read = 0;  // segment bytes delivered (file dtype)
  double load_ms = 0;        // resident mode: the one-time load
};

class BatchReader {
 public:
  BatchReader(std::shared_ptr<const Dataset> dataset, const ReaderConfig& cfg);
  ~BatchReader();
  BatchReader(const BatchReader&) = delete;
  BatchReader& operator=(const BatchReader&) = delete;

  // The next batch; on a GPU its tensors are ready in stream order on `stream`.
  Batch next(cudaStream_t stream = nullptr);

  ReaderState state() const;           // where the next call of next() will read
  void restore(const ReaderState& s);  // continue from s (drops prefetched work)

  std::int64_t batches_per_epoch() const;
  bool resident() const;
  const ReaderConfig& config() const;
  const DatasetInfo& info() const;
  const Dataset& dataset() const;
  ReaderStats stats() const;

  // The segment indices of batch (epoch, position): sorted real rows, then
  // padding. Exposed for tests and the benchmark (h5py reads the same batches).
  std::vector<std::int64_t> batch_rows(std::int64_t epoch, std::int64_t position) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The order of epoch `epoch`: a permutation of [0, n) (identity when shuffle
// is false). Portable: the same on every platform and standard library.
std::vector<std::int64_t> epoch_order(std::int64_t n, std::uint64_t seed, std::int64_t epoch, bool shuffle);

}  // namespace mf::io
