// Whole utterances (the ragged layout of io/dataset.hpp): /lengths at open,
// and crops read as segments. A crop's frames are rows of the [T, n_mels]
// dataset, read through the same fast paths as segments (a frame is a row
// of n_mels x 1 values), then turned to [n_mels, frames].
#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/float_convert.hpp"
#include "io/crops.hpp"
#include "io/dataset.hpp"
#include "io/dataset_schema.hpp"
#include "io/dataset_storage.hpp"
#include "io/h5_lookup.hpp"
#include "io/h5_read.hpp"

namespace mf::io {

namespace {

// [rows, cols] -> [cols, rows], in tiles of 16 x 16 (both sides stay in cache).
template <class T>
void transpose(const T* in, std::int64_t rows, std::int64_t cols, T* out) {
  constexpr std::int64_t kTile = 16;
  for (std::int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (std::int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const std::int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      for (std::int64_t c = c0; c < c1; ++c)
        for (std::int64_t r = r0; r < r1; ++r) out[c * rows + r] = in[r * cols + c];
    }
}

}  // namespace

void read_utterance_lengths(hid_t file, const std::string& path, DatasetInfo& info) {
  const std::string name = "/lengths";
  const std::int64_t T = info.shape[0];
  if (!h5_path_exists(file, name))
    MF_THROW("{}: dataset {} is missing: /segments {} holds whole utterances (rank 2, [T, n_mels]), which need "
             "their lengths in frames, [F] integers summing to {}; {}", path, name, shape_str(info.shape), T,
             h5_root_listing(file));
  const H5Value d = H5Value::dataset(file, name, path, name);
  if (d.type_class() != H5T_INTEGER) MF_THROW("{}: dataset {} must hold integers, found {}", path, name, d.type_desc());
  // Checked before anything is sized from it: at most one utterance per frame.
  if (d.null_space() || d.dims().size() != 1 || d.dims()[0] < 1 || d.dims()[0] > T)
    MF_THROW("{}: dataset {} has {}: expected [F] with 1 <= F <= {} (one length per utterance, each >= 1 frame "
             "of /segments {})", path, name, d.null_space() ? d.shape_desc() : "shape " + shape_str(d.dims()), T,
             shape_str(info.shape));
  const std::vector<std::int64_t> lengths = d.read_vector<std::int64_t>(H5T_NATIVE_INT64);
  info.utterance_offsets.assign(lengths.size() + 1, 0);
  std::int64_t sum = 0, shortest = T;
  for (std::size_t f = 0; f < lengths.size(); ++f) {
    const std::int64_t n = lengths[f];
    if (n < 1 || n > T - sum)
      MF_THROW("{}: dataset {} entry {} is {}: expected a length of 1..{} frames (utterance {} starts at frame {} "
               "of /segments' {})", path, name, f, n, std::max<std::int64_t>(1, T - sum), f, sum, T);
    sum += n;
    shortest = std::min(shortest, n);
    info.utterance_offsets[f + 1] = sum;
  }
  if (sum != T)
    MF_THROW("{}: dataset {} sums to {} frames, but /segments {} holds {}: expected the lengths of all its "
             "utterances", path, name, sum, shape_str(info.shape), T);
  const std::int64_t K = info.names.crops_per_utterance;
  MF_CHECK(K >= 1 && K <= 1024, "{}: {} crops per utterance: expected 1..1024", path, K);
  info.num_files = std::int64_t(lengths.size());
  info.num_segments = info.num_files * K;
  info.segments_per_file = info.short_per_long = K;
  info.long_per_file = 1;
  const std::int64_t crop = info.names.crop_frames;
  MF_CHECK(crop >= 0, "{}: a crop of {} frames: expected >= 0", path, crop);
  info.frames = crop > 0 ? crop : shortest;
}

DatasetInfo ragged_frames_view(const DatasetInfo& info) {
  DatasetInfo v;
  v.path = info.path;
  v.layout = SegmentLayout::ragged_frames;
  v.shape = {info.shape[0], 1, info.n_mels};  // a frame's values are one run: one row of n_mels
  v.num_segments = v.num_files = info.shape[0];
  v.n_mels = 1;
  v.frames = info.n_mels;
  v.dtype = info.dtype;
  v.utterance_offsets = info.utterance_offsets;
  return v;
}

void Dataset::Impl::view_frames_as_rows() {
  // [T, n_mels] -> [T, 1, n_mels]: the chunk index is row-major over the
  // grid, so an axis of one chunk leaves every chunk's number unchanged.
  if (mode != Mode::chunked) return;
  dims.insert(dims.begin() + 1, 1);
  chunk.insert(chunk.begin() + 1, 1);
  grid.insert(grid.begin() + 1, 1);
}

void Dataset::read_crops(std::span<const std::int64_t> rows, std::span<const std::int64_t> starts, DType dt,
                         void* dst, bool check) const {
  read_frames(rows, starts, info_.frames, dt, dst, check);
}

void Dataset::read_utterance(std::int64_t u, DType dt, void* dst, bool check) const {
  MF_CHECK(info_.ragged() && u >= 0 && u < info_.num_files, "{}: utterance {}: expected 0..{} of whole utterances",
           info_.path, u, info_.num_files - 1);
  const std::int64_t row[1] = {u}, start[1] = {0};
  read_frames(row, start, info_.utterance_frames(u), dt, dst, check);
}

// Crops of N frames (read_crops: N = info_.frames).
void Dataset::read_frames(std::span<const std::int64_t> rows, std::span<const std::int64_t> starts, std::int64_t N,
                          DType dt, void* dst, bool check) const {
  MF_CHECK(info_.ragged(), "{}: crops are read from whole utterances; this file holds {} segments", info_.path,
           segment_layout_name(info_.layout));
  MF_CHECK(rows.size() == starts.size(), "Dataset::read_crops: {} rows and {} starts", rows.size(), starts.size());
  MF_CHECK(dt == DType::f32 || dt == DType::f16 || dt == DType::bf16,
           "Dataset::read_crops: destination dtype must be f32, f16 or bf16, found {}", dtype_name(dt));
  const std::int64_t M = info_.n_mels;
  thread_local std::vector<std::int64_t> frames;  // reused: a batch's crops are ~10^4-10^5 frames
  frames.resize(rows.size() * std::size_t(N));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::int64_t u = rows[i];
    MF_CHECK(u >= 0 && u < info_.num_files, "{}: utterance {} out of range: expected 0..{}", info_.path, u,
             info_.num_files - 1);
    const std::int64_t len = info_.utterance_frames(u), off = info_.utterance_offsets[std::size_t(u)];
    MF_CHECK(starts[i] >= 0 && starts[i] < len, "{}: a crop of utterance {} starting at frame {}: expected 0..{}",
             info_.path, u, starts[i], len - 1);
    for (std::int64_t k = 0; k < N; ++k) frames[i * std::size_t(N) + std::size_t(k)] = off + crop_frame(starts[i], k, len);
  }
  // Read as [crops x N, M] in the file's type (frame-major, as stored; the
  // non-finite check names the frame), each crop turned to [M, N] in that
  // type (half the bytes of f32 for f16 files), then one conversion to dt.
  const DType ft = info_.dtype;
  const std::size_t fsz = dtype_size(ft), values = frames.size() * std::size_t(M);
  thread_local std::vector<std::byte> staged, turned;
  staged.resize(values * fsz);
  read_rows(frames_, frames, ft, staged.data(), check);
  std::byte* out = ft == dt ? static_cast<std::byte*>(dst) : (turned.resize(values * fsz), turned.data());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::byte* in = staged.data() + i * std::size_t(N * M) * fsz;
    std::byte* o = out + i * std::size_t(N * M) * fsz;
    if (fsz == 4) transpose(reinterpret_cast<const std::uint32_t*>(in), N, M, reinterpret_cast<std::uint32_t*>(o));
    else transpose(reinterpret_cast<const std::uint16_t*>(in), N, M, reinterpret_cast<std::uint16_t*>(o));
  }
  if (ft != dt) convert_floats(out, ft, dst, dt, std::int64_t(values), /*check=*/false);  // checked above
}

}  // namespace mf::io
