// Checked reads from HDF5: every dataset and attribute melforge reads goes
// through H5Value (the fast pread path of io/dataset.cpp reads the segments'
// bytes itself, after the same kind of checks).
//
// A file is untrusted input. Before anything is allocated or read, H5Value
// compares the object's rank, extent and datatype (class and size) with what
// the caller expects, computes every size with overflow checks, and compares
// the bytes the object declares with what the file can really hold:
//   - a dataset: its storage size (H5Dget_storage_size, at most the file size);
//     with a filter pipeline the data may be compressed, up to deflate's
//     largest ratio (kMaxFilterRatio);
//   - an attribute: the file size (its value lives in an object header).
// So a 40-byte change that declares a [2^40] array is refused with a message,
// never a std::bad_alloc, and a 2-D array where a scalar is expected is
// refused, never read into a one-element buffer.
//
// Errors are mf::Error: "FILE: dataset /ints/step: expected ..., found ...".
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor.hpp"
#include "io/h5_id.hpp"

namespace mf::io {

// The largest expansion of a compressed chunk melforge accepts when it bounds
// a filtered dataset's declared size by its stored size: zlib's deflate cannot
// expand more than 1032:1.
inline constexpr std::uint64_t kMaxFilterRatio = 1032;

// "16-bit integer", "32-bit float", "string", ...: an HDF5 datatype in words.
std::string h5_type_desc(hid_t type);

// The extent of a dataset or attribute ([] for a scalar or a null dataspace).
// Throws mf::Error naming `where` when it cannot be read or a dimension does
// not fit in int64 (a damaged file).
Shape h5_dims(hid_t obj, const std::string& where);

// One dataset or attribute opened for a checked read.
class H5Value {
 public:
  // The dataset `name` under `loc` (a file or group). `file` is the file's path
  // and `shown` the dataset's path in it ("/ints/step"), both for messages.
  static H5Value dataset(hid_t loc, const std::string& name, const std::string& file, const std::string& shown);
  // The attribute `name` of `obj`; `owner` is obj's path in the file ("/" for
  // the root group, "/arrays/w"), for messages.
  static H5Value attribute(hid_t obj, const std::string& name, const std::string& file, const std::string& owner);
  // An attribute or dataset the caller opened itself; `what` names it for
  // messages ("attribute class_names of /segments").
  H5Value(H5Id id, const std::string& file, std::string what);

  hid_t id() const { return id_; }
  hid_t type() const { return type_; }
  bool is_attribute() const { return is_attr_; }
  // "FILE: dataset /ints/step" or "FILE: attribute crc32 of /arrays/w".
  const std::string& where() const { return where_; }

  // The extent: [] for a scalar; `null_space` for an empty (H5S_NULL) one.
  const Shape& dims() const { return dims_; }
  bool null_space() const { return null_; }
  // Elements (0 for a null dataspace); fits in int64 (checked at open).
  std::int64_t count() const { return count_; }
  // "a scalar", "shape [3, 4]", "an empty (null) dataspace".
  std::string shape_desc() const;
  H5T_class_t type_class() const;
  std::size_t type_size() const;
  std::string type_desc() const { return h5_type_desc(type_); }

  // Throws unless the datatype is of class `cls` and, when `size` > 0, of
  // `size` bytes; `expected` says it in words ("a 32-bit float").
  void expect_type(H5T_class_t cls, std::size_t size, const std::string& expected) const;
  // Throws unless the extent is exactly `dims` (rank and every dimension).
  void expect_dims(const Shape& dims, const std::string& why = {}) const;

  // One value: a scalar or an array of one element, of integer class (read_int),
  // integer or float class (read_number), string class (read_string, fixed or
  // variable length).
  std::int64_t read_int() const;
  double read_number() const;
  std::string read_string() const;
  // A scalar or 1-D array of strings (fixed or variable length), each checked
  // to be UTF-8 text (an error names the entry and the first bad byte).
  std::vector<std::string> read_strings() const;

  // The number of elements a whole read fills, after checking that the file
  // holds the bytes the object declares and that `mem_elem_bytes` per element
  // fits in memory's size_t. Call before allocating the destination.
  std::size_t checked_count(std::size_t mem_elem_bytes) const;
  // Reads the whole object as `mem_type` elements (HDF5 converts) into `dst`,
  // which holds `dst_bytes` = checked_count(size of mem_type) * that size.
  void read_into(hid_t mem_type, void* dst, std::size_t dst_bytes) const;
  // The whole object as a vector of T (`mem_type` must describe T).
  template <class T> std::vector<T> read_vector(hid_t mem_type) const {
    std::vector<T> v(checked_count(sizeof(T)));
    read_into(mem_type, v.data(), v.size() * sizeof(T));
    return v;
  }

 private:
  H5Value() = default;
  void init(H5Id id, const std::string& file, std::string what);
  void expect_one(const char* expected) const;
  std::vector<std::string> read_raw_strings() const;  // read_strings before the UTF-8 check
  std::uint64_t file_size() const;
  // The most bytes of data the file can hold for this object.
  std::uint64_t stored_limit() const;

  H5Id id_, type_;
  bool is_attr_ = false, null_ = false;
  Shape dims_;
  std::int64_t count_ = 0;
  std::string where_;
};

}  // namespace mf::io
