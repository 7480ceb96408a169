// Fuzz target: an HDF5 dataset file as `melforge data inspect` and `melforge
// train` open it (io::Dataset::open: schema, attributes, labels, storage
// resolution), then every segment read back as `data inspect` and the reader
// do (Dataset::read with the non-finite check, sorted and unsorted rows);
// whole utterances (ragged files) also as wrapping crops (Dataset::read_crops).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/error.hpp"
#include "fuzz/fuzz_support.hpp"
#include "io/dataset.hpp"

namespace {
constexpr const char* kTarget = "dataset";
constexpr double kMaxReadBytes = 64.0 * 1024 * 1024;  // read the data back when it is at most this big

void check_info(const mf::io::DatasetInfo& in) {
  FUZZ_CHECK(in.num_classes > 0, kTarget);
  FUZZ_CHECK(in.class_names.size() == std::size_t(in.num_classes), kTarget);
  FUZZ_CHECK(in.normal_class >= 0 && in.normal_class < in.num_classes, kTarget);
  FUZZ_CHECK(in.num_segments > 0 && in.n_mels > 0 && in.frames > 0, kTarget);
  FUZZ_CHECK(in.num_files > 0 && in.num_files * in.segments_per_file == in.num_segments, kTarget);
  FUZZ_CHECK(in.labels.size() == std::size_t(in.num_segments), kTarget);
  FUZZ_CHECK(in.leak.size() == std::size_t(in.num_segments), kTarget);
  FUZZ_CHECK(in.file_labels.size() == std::size_t(in.num_files), kTarget);
  FUZZ_CHECK(in.file_leak.size() == std::size_t(in.num_files), kTarget);
  for (auto l : in.labels) FUZZ_CHECK(l >= 0 && l < in.num_classes, kTarget);
  for (auto l : in.file_labels) FUZZ_CHECK(l >= 0 && l < in.num_classes, kTarget);
  for (auto v : in.leak) FUZZ_CHECK(v <= 1, kTarget);
  for (auto v : in.file_leak) FUZZ_CHECK(v <= 1, kTarget);
  if (!in.ragged()) return;
  // Whole utterances: offsets from 0 to T, each utterance at least one frame.
  FUZZ_CHECK(in.utterance_offsets.size() == std::size_t(in.num_files) + 1, kTarget);
  FUZZ_CHECK(in.utterance_offsets.front() == 0 && in.utterance_offsets.back() == in.shape[0], kTarget);
  std::int64_t shortest = in.shape[0];
  for (std::int64_t f = 0; f < in.num_files; ++f) {
    FUZZ_CHECK(in.utterance_frames(f) >= 1, kTarget);
    shortest = std::min(shortest, in.utterance_frames(f));
  }
  FUZZ_CHECK(in.frames == shortest, kTarget);  // no crop_frames given: the shortest utterance
}

// Ragged data: a wrapping crop (longer than the shortest utterance) of every
// utterance from its last frame, through read_crops' own path.
void read_crops_back(const mf::io::Dataset& ds) {
  const mf::io::DatasetInfo& in = ds.info();
  if (!in.ragged() || double(in.shape[0]) * double(in.n_mels) * 4.0 > kMaxReadBytes) return;
  std::vector<std::int64_t> rows, starts;
  for (std::int64_t f = 0; f < std::min<std::int64_t>(in.num_files, 64); ++f) {
    rows.push_back(f);
    starts.push_back(in.utterance_frames(f) - 1);
  }
  std::vector<float> buf(rows.size() * std::size_t(in.segment_elems()));
  ds.read_crops(rows, starts, mf::DType::f32, buf.data(), true);
}

void read_back(const mf::io::Dataset& ds) {
  const mf::io::DatasetInfo& in = ds.info();
  if (double(in.num_segments) * double(in.segment_bytes()) > kMaxReadBytes) return;
  const std::int64_t block = 64, E = in.segment_elems();
  std::vector<float> buf;
  std::vector<std::int64_t> rows;
  for (std::int64_t r0 = 0; r0 < in.num_segments; r0 += block) {
    const std::int64_t r1 = std::min(in.num_segments, r0 + block);
    rows.clear();
    for (std::int64_t r = r0; r < r1; ++r) rows.push_back(r);
    buf.assign(std::size_t((r1 - r0) * E), 0.f);
    ds.read(rows, mf::DType::f32, buf.data(), true);
  }
  // Unsorted rows and a 2-byte destination: the reader's other paths.
  rows.clear();
  for (std::int64_t r = std::min<std::int64_t>(in.num_segments, 8) - 1; r >= 0; --r) rows.push_back(r);
  std::vector<std::uint16_t> half(rows.size() * std::size_t(E));
  ds.read(rows, mf::DType::bf16, half.data(), false);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mf::fuzz::quiet();
  const std::string path = mf::fuzz::write_input(data, size, ".h5");
  try {
    const auto ds = mf::io::Dataset::open(path);
    check_info(ds->info());
    read_back(*ds);
    read_crops_back(*ds);
  } catch (const mf::Error&) {
    // the expected answer to a malformed file
  } catch (...) {
    mf::fuzz::fail_uncaught(kTarget);
  }
  mf::fuzz::check_no_open_hdf5_objects(kTarget);
  return 0;
}
