#include "io/dataset.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "engine/isolate.hpp"
#include "engine/parallel.hpp"
#include "io/crops.hpp"
#include "io/dataset_labels.hpp"
#include "io/dataset_schema.hpp"
#include "io/dataset_storage.hpp"
#include "io/h5_error.hpp"
#include "io/h5_lookup.hpp"
#include "io/h5_read.hpp"

// Dataset::open checks a file in the order its parts depend on each other:
// the segments' type and shape (io/dataset_schema.hpp), their attributes, where
// their data lives (io/dataset_storage.hpp), then the labels
// (io/dataset_labels.hpp). The reads are io/dataset_read.cpp.

namespace mf::io {

std::string_view segment_layout_name(SegmentLayout l) {
  switch (l) {
    case SegmentLayout::flat: return "flat [N, n_mels, frames]";
    case SegmentLayout::file_structured: return "file-structured [F, L, S, n_mels, frames]";
    case SegmentLayout::ragged: return "whole utterances [T, n_mels] + /lengths [F]";
    case SegmentLayout::ragged_frames: return "frames of whole utterances";
  }
  return "?";
}
std::string_view storage_layout_name(StorageLayout l) {
  switch (l) {
    case StorageLayout::contiguous: return "contiguous";
    case StorageLayout::chunked: return "chunked";
    case StorageLayout::compact: return "compact";
    case StorageLayout::other: return "other";
  }
  return "?";
}

std::string DatasetInfo::where(std::int64_t s) const {
  if (layout == SegmentLayout::flat) return fmt::format("segment {}", s);
  if (layout == SegmentLayout::ragged)
    return segments_per_file == 1 ? fmt::format("utterance {}", s)
                                   : fmt::format("segment {} (crop {} of utterance {})", s, s % segments_per_file,
                                                 s / segments_per_file);
  if (layout == SegmentLayout::ragged_frames) {
    const auto next = std::upper_bound(utterance_offsets.begin(), utterance_offsets.end(), s);
    const std::int64_t u = std::int64_t(next - utterance_offsets.begin()) - 1;
    return fmt::format("frame {} of utterance {} (row {} of the segments)", s - utterance_offsets[std::size_t(u)], u,
                       s);
  }
  const std::int64_t f = s / segments_per_file, r = s % segments_per_file;
  return fmt::format("segment {} (file {}, long {}, short {})", s, f, r / short_per_long, r % short_per_long);
}

Dataset::Dataset(std::unique_ptr<Impl> impl, DatasetInfo info) : impl_(std::move(impl)), info_(std::move(info)) {}
Dataset::~Dataset() = default;

std::shared_ptr<const Dataset> Dataset::open(const std::string& path, const DatasetNames& names) {
  silence_hdf5_errors();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) MF_THROW("{}: cannot open: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) MF_THROW("{}: not a regular file (expected an HDF5 file)", path);
  const std::uint64_t file_size = std::uint64_t(st.st_size);

  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
  if (is_h5 == 0)
    MF_THROW("{}: not an HDF5 file: expected the HDF5 signature (a file written by h5py or libhdf5), found none "
             "in {} bytes", path, file_size);
  if (is_h5 < 0) MF_THROW("{}: cannot read as HDF5: {}", path, hdf5_error_stack());

  auto impl = std::make_unique<Impl>();
  impl->path = path;
  // A damaged superblock or root object header can make H5Fopen itself
  // allocate what the file declares (8 GiB from an 18 KB file, found by
  // fuzz_dataset): the first open runs in a child process (engine/isolate.hpp),
  // so such a file becomes an error here instead of taking this process down.
  run_isolated(fmt::format("{}: opening as HDF5 (damaged file?)", path), isolate_timeout_s(30), [&] {
    const hid_t probe = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (probe >= 0) H5Fclose(probe);
    return std::string();
  });
  const hid_t fid = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (fid < 0) {
    const std::string stack = hdf5_error_stack();
    MF_THROW("{}: cannot open as HDF5 ({}): {}", path,
             stack.find("truncated") != std::string::npos ? "the file is truncated" : "damaged file?", stack);
  }
  H5Id file(fid, H5Fclose);

  DatasetInfo info;
  info.path = path;
  info.names = names;
  const std::string seg = h5_absolute_path(names.segments);
  impl->seg_name = seg;
  if (!h5_path_exists(file, seg))
    MF_THROW("{}: dataset {} is missing (expected float16/float32 segments [N, n_mels, frames] or "
             "[F, L, S, n_mels, frames]); {}", path, seg, h5_root_listing(file));
  H5Id dset(MF_H5_CHECK(H5Dopen2(file, seg.c_str(), H5P_DEFAULT), "{}: opening {}", path, seg), H5Dclose);

  check_segment_type(dset, path, seg, info);
  impl->dtype = info.dtype;
  impl->esz = dtype_size(info.dtype);
  set_segment_shape(dset, path, seg, info);
  read_attributes_isolated(dset, file, path, seg, info);
  // Storage before the labels: the per-segment arrays are sized from the
  // shape, which must first be known to be what the file holds.
  const bool fast = impl->resolve_storage(info, file, dset, file_size);
  DatasetInfo frames;
  if (info.ragged()) {
    MF_CHECK(fast, "{}: whole utterances are read through the contiguous or chunked (gzip, shuffle) fast paths; "
             "this file's {} storage is neither: rewrite it with h5py's defaults or compression=\"gzip\"", path,
             storage_layout_name(info.storage.layout));
    read_utterance_lengths(file, path, info);
    frames = ragged_frames_view(info);
    impl->view_frames_as_rows();
  }
  read_labels(file, path, seg, names, info);
  read_leak(file, path, names, info);
  if (h5_path_exists(file, "/files")) {
    info.file_names = read_strings_isolated(file, path, "/files");
    MF_CHECK(std::int64_t(info.file_names.size()) == info.num_files,
             "{}: /files holds {} names for {} files (expected one source path per file)", path,
             info.file_names.size(), info.num_files);
  }

  info.storage.fast_path = fast;
  if (fast) {
    // O_NOATIME spares every pread an atime update (allowed for the file's
    // owner only: otherwise EPERM, and a plain open).
    impl->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOATIME);
    if (impl->fd < 0 && errno == EPERM) impl->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (impl->fd < 0) MF_THROW("{}: cannot open for reading: {}", path, std::strerror(errno));
  } else {
    impl->mode = Impl::Mode::hdf5;
    impl->dset = std::move(dset);
    impl->file = std::move(file);
  }
  auto ds = std::shared_ptr<Dataset>(new Dataset(std::move(impl), std::move(info)));
  ds->frames_ = std::move(frames);
  return ds;
}

std::string DatasetInfo::file_name(std::int64_t file) const {
  if (file >= 0 && file < std::int64_t(file_names.size())) return file_names[std::size_t(file)];
  return fmt::format("#{}", file);
}

void Dataset::read(std::span<const std::int64_t> rows, DType dt, void* dst, bool check) const {
  MF_CHECK(dt == DType::f32 || dt == DType::f16 || dt == DType::bf16,
           "Dataset::read: destination dtype must be f32, f16 or bf16, found {}", dtype_name(dt));
  for (std::int64_t r : rows)
    MF_CHECK(r >= 0 && r < info_.num_segments, "{}: segment {} out of range: expected 0..{}", info_.path, r,
             info_.num_segments - 1);
  if (info_.ragged()) {
    const std::int64_t K = info_.segments_per_file;
    std::vector<std::int64_t> utterances(rows.size()), starts(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      utterances[i] = rows[i] / K;
      starts[i] = eval_crop_start(rows[i] % K, K, info_.utterance_frames(utterances[i]), info_.frames);
    }
    return read_crops(utterances, starts, dt, dst, check);
  }
  read_rows(info_, rows, dt, dst, check);
}

void Dataset::read_rows(const DatasetInfo& as, std::span<const std::int64_t> rows, DType dt, void* dst,
                        bool check) const {
  switch (impl_->mode) {
    case Impl::Mode::contiguous: return impl_->read_contiguous(as, rows, dt, dst, check);
    case Impl::Mode::chunked: return impl_->read_chunked(as, rows, dt, dst, check);
    case Impl::Mode::hdf5: return impl_->read_hdf5(as, rows, dt, dst, check);
  }
}

void Dataset::read_all(DType dt, void* dst, bool check, int threads) const {
  const std::int64_t N = info_.num_segments;
  const std::int64_t block = std::max<std::int64_t>(1, (std::int64_t(4) << 20) / std::int64_t(info_.segment_bytes()));
  const std::int64_t nblocks = (N + block - 1) / block;
  const std::size_t ob = std::size_t(info_.segment_elems()) * dtype_size(dt);
  MF_CHECK(threads >= 0 && threads <= kMaxReadThreads, "{}: read_all: expected 0..{} threads, found {}", info_.path,
           kMaxReadThreads, threads);
  std::atomic<std::int64_t> next{0};
  // Blocks are taken from a shared counter, so a thread the system refuses
  // only means fewer workers; the first error stops the others.
  run_on_threads(std::max(1, threads), [&](int) {
    std::vector<std::int64_t> rows;
    for (;;) {
      const std::int64_t b = next.fetch_add(1);
      if (b >= nblocks) return;
      const std::int64_t r0 = b * block, r1 = std::min(N, r0 + block);
      rows.resize(std::size_t(r1 - r0));
      for (std::int64_t r = r0; r < r1; ++r) rows[std::size_t(r - r0)] = r;
      try {
        read(rows, dt, static_cast<std::byte*>(dst) + std::size_t(r0) * ob, check);
      } catch (...) {
        next.store(nblocks);
        throw;
      }
    }
  });
}

}  // namespace mf::io
