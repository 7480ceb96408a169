#include "io/h5_writer.hpp"

#include <fcntl.h>

#include <algorithm>
#include <variant>
#include <utility>

#include "engine/float_convert.hpp"
#include "io/h5_error.hpp"
#include "io/h5_write.hpp"

namespace mf::io {

WriteStorage parse_write_storage(std::string_view s) {
  if (s == "contiguous") return WriteStorage::contiguous;
  if (s == "chunked") return WriteStorage::chunked;
  if (s == "gzip") return WriteStorage::gzip;
  MF_THROW("storage '{}': expected contiguous, chunked or gzip", s);
}

namespace {
hid_t half_type() {
  const hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(t, 15, 10, 5, 0, 10);
  H5Tset_size(t, 2);
  H5Tset_ebias(t, 15);
  return t;
}

void write_root_attributes(hid_t file, const WriteSpec& spec, const std::string& path) {
  if (!spec.class_names.empty()) write_strings(file, "class_names", spec.class_names, true, path);
  if (spec.sample_rate > 0) write_attr_number(file, "sample_rate", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &spec.sample_rate, path);
  if (spec.hop_length > 0) write_attr_number(file, "hop_length", H5T_STD_I64LE, H5T_NATIVE_INT64, &spec.hop_length, path);
  const std::int64_t nm = spec.ragged ? spec.shape[1] : spec.shape[spec.shape.size() - 2];
  write_attr_number(file, "n_mels", H5T_STD_I64LE, H5T_NATIVE_INT64, &nm, path);
  for (const auto& [name, value] : spec.attributes) {
    if (const auto* d = std::get_if<double>(&value))
      write_attr_number(file, name.c_str(), H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, d, path);
    else if (const auto* i = std::get_if<std::int64_t>(&value))
      write_attr_number(file, name.c_str(), H5T_STD_I64LE, H5T_NATIVE_INT64, i, path);
    else
      write_attr_string(file, name.c_str(), std::get<std::string>(value), path);
  }
}
}  // namespace

H5Writer::H5Writer(const std::string& path, const WriteSpec& spec) : path_(path), spec_(spec) {
  silence_hdf5_errors();
  const auto& sh = spec.shape;
  MF_CHECK(spec.ragged ? sh.size() == 2 : sh.size() == 3 || sh.size() == 5,
           "H5Writer: shape {} must have rank 3 or 5 (rank 2 for whole utterances)", shape_str(sh));
  MF_CHECK(spec.dtype == DType::f16 || spec.dtype == DType::f32, "H5Writer: dtype must be f16 or f32");
  seg_per_row_ = sh.size() == 5 ? sh[1] * sh[2] : 1;
  row_elems_ = spec.ragged ? sh[1] : sh[sh.size() - 2] * sh[sh.size() - 1] * seg_per_row_;
  rows_ = spec.appendable ? 0 : sh[0];
  file_ = MF_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "{}: creating the file", path);
  ftype_ = spec.dtype == DType::f16 ? half_type() : H5Tcopy(H5T_IEEE_F32LE);
  std::vector<hsize_t> dims(sh.begin(), sh.end()), maxdims = dims;
  if (spec.appendable) {
    dims[0] = 0;
    maxdims[0] = H5S_UNLIMITED;
  }
  const hid_t sp = H5Screate_simple(int(dims.size()), dims.data(), maxdims.data());
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (spec.storage != WriteStorage::contiguous || spec.appendable) {
    Shape ch = spec.chunk;
    if (ch.empty() && spec.ragged) ch = Shape{256, sh[1]};  // a 2-4 s crop spans one or two chunks
    if (ch.empty())
      ch = sh.size() == 5 ? Shape{1, 1, sh[2], sh[3], sh[4]}
                          : Shape{std::max<std::int64_t>(1, std::min<std::int64_t>(16, sh[0])), sh[1], sh[2]};
    MF_CHECK(ch.size() == sh.size(), "H5Writer: chunk {} must have the rank of {}", shape_str(ch), shape_str(sh));
    std::vector<hsize_t> cd(ch.begin(), ch.end());
    MF_H5_CHECK(H5Pset_chunk(dcpl, int(cd.size()), cd.data()), "{}: chunk shape {}", path, shape_str(ch));
    if (spec.storage == WriteStorage::gzip) {
      H5Pset_shuffle(dcpl);
      H5Pset_deflate(dcpl, unsigned(spec.gzip_level));
    }
  }
  dset_ = MF_H5_CHECK(H5Dcreate2(file_, "segments", ftype_, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT), "{}: creating /segments",
                      path);
  H5Pclose(dcpl);
  H5Sclose(sp);
  if (!spec.appendable && !spec.ragged) write_tables(spec.labels, spec.leak, spec.files);
  write_root_attributes(file_, spec, path);
}

void H5Writer::write_tables(const std::vector<std::int64_t>& labels, const std::vector<std::uint8_t>& leak,
                            const std::vector<std::string>& files) {
  write_vector(file_, "labels", H5T_STD_I64LE, H5T_NATIVE_INT64, labels.data(), labels.size(), path_);
  if (!leak.empty()) write_vector(file_, "leak", H5T_STD_U8LE, H5T_NATIVE_UINT8, leak.data(), leak.size(), path_);
  if (!files.empty()) write_strings(file_, "files", files, false, path_);
}

H5Writer::~H5Writer() {
  try {
    close();
  } catch (...) {
  }
}

void H5Writer::write_segments(std::int64_t first, std::int64_t n, const float* values) {
  MF_CHECK(first % seg_per_row_ == 0 && n % seg_per_row_ == 0,
           "H5Writer: file-structured data is written in whole files ({} segments each)", seg_per_row_);
  MF_CHECK((first + n) / seg_per_row_ <= rows_, "H5Writer: segments [{}, {}) beyond the dataset", first, first + n);
  write_rows(first / seg_per_row_, n / seg_per_row_, values);
}

void H5Writer::append(std::int64_t rows, const float* values) {
  MF_CHECK(spec_.appendable, "H5Writer: {}: append() needs an appendable spec", path_);
  if (rows == 0) return;
  std::vector<hsize_t> dims(spec_.shape.begin(), spec_.shape.end());
  dims[0] = hsize_t(rows_ + rows);
  MF_H5_CHECK(H5Dset_extent(dset_, dims.data()), "{}: growing /segments to {} rows", path_, rows_ + rows);
  rows_ += rows;
  write_rows(rows_ - rows, rows, values);
  unsynced_bytes_ += rows * row_elems_ * std::int64_t(dtype_size(spec_.dtype));
  if (unsynced_bytes_ >= kWritebackBytes) {
    start_writeback();
    unsynced_bytes_ = 0;
  }
}

// Asks the kernel to start writing the file's dirty pages to disk now, without
// waiting (Linux sync_file_range, SYNC_FILE_RANGE_WRITE), every kWritebackBytes
// appended. A file built batch by batch is then mostly on disk when
// write_file_atomic's fsync comes, which otherwise waited for all of it at once
// (~80 ms for a 110 MB train.h5, with every core idle).
// Best effort: HDF5's own caches are flushed at close as before, and any
// failure here is left to that fsync to report.
void H5Writer::start_writeback() {
#if defined(__linux__)
  void* handle = nullptr;
  if (H5Fget_vfd_handle(file_, H5P_DEFAULT, &handle) >= 0 && handle != nullptr)
    (void)::sync_file_range(*static_cast<int*>(handle), 0, 0, SYNC_FILE_RANGE_WRITE);
#endif
}

void H5Writer::write_rows(std::int64_t first_row, std::int64_t rows, const float* values) {
  const auto& sh = spec_.shape;
  const std::int64_t elems = row_elems_;
  std::vector<hsize_t> start(sh.size(), 0), count(sh.begin(), sh.end());
  start[0] = hsize_t(first_row);
  count[0] = hsize_t(rows);
  const hid_t fs = H5Dget_space(dset_);
  H5Sselect_hyperslab(fs, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
  const hid_t ms = H5Screate_simple(int(count.size()), count.data(), nullptr);
  if (spec_.dtype == DType::f16) {
    if (half_.size() < std::size_t(rows * elems)) half_.resize(std::size_t(rows * elems));
    convert_floats(values, DType::f32, half_.data(), DType::f16, rows * elems, /*check=*/false);
    MF_H5_CHECK(H5Dwrite(dset_, ftype_, ms, fs, H5P_DEFAULT, half_.data()), "{}: writing /segments", path_);
  } else {
    MF_H5_CHECK(H5Dwrite(dset_, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, values), "{}: writing /segments", path_);
  }
  H5Sclose(ms);
  H5Sclose(fs);
}

void H5Writer::finish(const std::vector<std::int64_t>& labels, const std::vector<std::uint8_t>& leak,
                      const std::vector<std::string>& files) {
  MF_CHECK(spec_.appendable, "H5Writer: {}: finish() needs an appendable spec", path_);
  const auto n = std::size_t(rows_);
  MF_CHECK(labels.size() == n && (leak.empty() || leak.size() == n) && (files.empty() || files.size() == n),
           "H5Writer: {}: {} rows but {} labels, {} leak values, {} file names", path_, n, labels.size(), leak.size(),
           files.size());
  write_tables(labels, leak, files);
  close();
}

void H5Writer::finish_utterances(const std::vector<std::int64_t>& lengths, const std::vector<std::int64_t>& labels,
                                 const std::vector<std::uint8_t>& leak, const std::vector<std::string>& files) {
  MF_CHECK(spec_.ragged, "H5Writer: {}: finish_utterances() needs a ragged spec", path_);
  std::int64_t sum = 0;
  for (const std::int64_t n : lengths) {
    MF_CHECK(n >= 1, "H5Writer: {}: an utterance of {} frames (expected >= 1)", path_, n);
    sum += n;
  }
  const std::size_t n = lengths.size();
  MF_CHECK(sum == rows_, "H5Writer: {}: the lengths sum to {} frames, {} were appended", path_, sum, rows_);
  MF_CHECK(labels.size() == n && (leak.empty() || leak.size() == n) && (files.empty() || files.size() == n),
           "H5Writer: {}: {} utterances but {} labels, {} leak values, {} file names", path_, n, labels.size(),
           leak.size(), files.size());
  write_vector(file_, "lengths", H5T_STD_I64LE, H5T_NATIVE_INT64, lengths.data(), n, path_);
  write_tables(labels, leak, files);
  close();
}

void H5Writer::close() {
  if (dset_ >= 0) H5Dclose(dset_);
  if (ftype_ >= 0) H5Tclose(ftype_);
  dset_ = ftype_ = -1;
  if (file_ >= 0) MF_H5_CHECK(H5Fclose(std::exchange(file_, -1)), "{}: closing", path_);
}

}  // namespace mf::io
