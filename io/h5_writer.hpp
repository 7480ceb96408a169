// Writes datasets in melforge's schema (io/dataset.hpp) with the HDF5 C API:
// what `melforge data synth`, the reader benchmark and the tests use. The
// files look like h5py's: float16 as IEEE half, labels int64, leak uint8,
// class_names as variable-length UTF-8 strings.
//
// Two ways to write: a fixed shape (spec.shape[0] rows, labels given up
// front), or appendable (spec.appendable: the segments dataset grows along
// its first axis with every append(), as `melforge data build` writes files
// whose count is known only at the end; labels, leak and /files are given
// to finish()). Appendable data is chunked (default chunk: one long segment).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "engine/dtype.hpp"
#include "engine/tensor.hpp"

namespace mf::io {

enum class WriteStorage : std::uint8_t { contiguous, chunked, gzip };  // gzip = chunked + shuffle + deflate
WriteStorage parse_write_storage(std::string_view s);                   // "contiguous" | "chunked" | "gzip"

struct WriteSpec {
  Shape shape;                    // [N, n_mels, frames] or [F, L, S, n_mels, frames]
  DType dtype = DType::f16;       // f16 or f32
  WriteStorage storage = WriteStorage::contiguous;
  Shape chunk;                    // empty: one long segment ([1, 1, S, M, T]) or 16 segments ([16, M, T])
  int gzip_level = 4;
  std::vector<std::int64_t> labels;      // [F] or [N]
  std::vector<std::uint8_t> leak;        // empty: no /leak dataset
  std::vector<std::string> class_names;  // empty: no attribute
  double sample_rate = 0;                // 0: no attribute
  std::int64_t hop_length = 0;           // 0: no attribute
  std::vector<std::string> files;        // /files: [F] (or [N]) strings; empty: no dataset
  // More attributes of the root group: a number (f64 or i64) or a UTF-8 string.
  std::vector<std::pair<std::string, std::variant<double, std::int64_t, std::string>>> attributes;
  bool appendable = false;               // shape[0] is ignored: rows come from append()
  // Whole utterances (io/dataset.hpp's ragged layout): shape [T, n_mels];
  // appendable, append() adds frames (n_mels values each), else
  // write_segments() writes frames [first, first + n) of the T; either way
  // finish_utterances() writes /lengths with the per-utterance tables.
  bool ragged = false;
};

class H5Writer {
 public:
  H5Writer(const std::string& path, const WriteSpec& spec);
  ~H5Writer();
  H5Writer(const H5Writer&) = delete;
  H5Writer& operator=(const H5Writer&) = delete;

  // Writes segments [first, first + n) (row-major, n_mels * frames floats each).
  // File-structured data: first and n must be whole files.
  void write_segments(std::int64_t first, std::int64_t n, const float* values);
  // Appendable only: adds `rows` rows (files, or segments of flat data) after
  // the last, row-major values as in write_segments.
  void append(std::int64_t rows, const float* values);
  std::int64_t rows() const { return rows_; }
  // Appendable only: the per-row tables (labels, optional leak, optional
  // /files), then close(). Their lengths must equal rows().
  void finish(const std::vector<std::int64_t>& labels, const std::vector<std::uint8_t>& leak,
              const std::vector<std::string>& files);
  // Ragged only: each utterance's frames (summing to rows()), its label,
  // optional leak and /files entry, then close().
  void finish_utterances(const std::vector<std::int64_t>& lengths, const std::vector<std::int64_t>& labels,
                         const std::vector<std::uint8_t>& leak, const std::vector<std::string>& files);
  void close();

 private:
  std::string path_;
  WriteSpec spec_;
  long long file_ = -1, dset_ = -1, ftype_ = -1;
  std::int64_t seg_per_row_ = 1;
  std::int64_t row_elems_ = 0;  // values per row of /segments' first axis
  std::int64_t rows_ = 0;  // rows in the dataset (appendable: appended so far)
  std::vector<f16> half_;  // f16 staging, reused by every write (no allocation per batch)
  static constexpr std::int64_t kWritebackBytes = std::int64_t(8) << 20;
  std::int64_t unsynced_bytes_ = 0;  // appended since the last start_writeback()

  void write_rows(std::int64_t first_row, std::int64_t rows, const float* values);
  void start_writeback();
  void write_tables(const std::vector<std::int64_t>& labels, const std::vector<std::uint8_t>& leak,
                    const std::vector<std::string>& files);
};

}  // namespace mf::io
