#include "io/h5_read.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "engine/error.hpp"
#include "engine/utf8.hpp"
#include "io/h5_error.hpp"

namespace mf::io {

std::string h5_type_desc(hid_t t) {
  const H5T_class_t c = H5Tget_class(t);
  const std::size_t bits = H5Tget_size(t) * 8;
  switch (c) {
    case H5T_INTEGER: return fmt::format("{}-bit {}integer", bits, H5Tget_sign(t) == H5T_SGN_NONE ? "unsigned " : "");
    case H5T_FLOAT: return fmt::format("{}-bit float", bits);
    case H5T_STRING: return H5Tis_variable_str(t) > 0 ? "variable-length string" : fmt::format("{}-byte string", bits / 8);
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return fmt::format("{}-bit enum (bool?)", bits);
    case H5T_ARRAY: return "array";
    case H5T_VLEN: return "variable-length sequence";
    case H5T_REFERENCE: return "reference";
    case H5T_OPAQUE: return "opaque";
    case H5T_BITFIELD: return "bitfield";
    default: return fmt::format("HDF5 type class {}", int(c));
  }
}

Shape h5_dims(hid_t obj, const std::string& where) {
  const bool attr = H5Iget_type(obj) == H5I_ATTR;
  H5Id space(MF_H5_CHECK(attr ? H5Aget_space(obj) : H5Dget_space(obj), "{}: reading the dataspace", where), H5Sclose);
  const int rank = MF_H5_CHECK(H5Sget_simple_extent_ndims(space), "{}: reading the rank", where);
  std::vector<hsize_t> d(static_cast<std::size_t>(rank));
  if (rank > 0) MF_H5_CHECK(H5Sget_simple_extent_dims(space, d.data(), nullptr), "{}: reading the extent", where);
  Shape dims;
  for (hsize_t x : d) {
    MF_CHECK(x <= hsize_t(std::numeric_limits<std::int64_t>::max()),
             "{}: expected dimensions below 2^63, found a dimension of {} (damaged file?)", where, x);
    dims.push_back(std::int64_t(x));
  }
  return dims;
}

H5Value H5Value::dataset(hid_t loc, const std::string& name, const std::string& file, const std::string& shown) {
  H5Id id(MF_H5_CHECK(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), "{}: opening dataset {}", file, shown), H5Dclose);
  H5Value v;
  v.init(std::move(id), file, "dataset " + shown);
  return v;
}

H5Value H5Value::attribute(hid_t obj, const std::string& name, const std::string& file, const std::string& owner) {
  H5Id id(MF_H5_CHECK(H5Aopen(obj, name.c_str(), H5P_DEFAULT), "{}: opening attribute {} of {}", file, name, owner),
          H5Aclose);
  H5Value v;
  v.init(std::move(id), file, fmt::format("attribute {} of {}", name, owner));
  return v;
}

H5Value::H5Value(H5Id id, const std::string& file, std::string what) { init(std::move(id), file, std::move(what)); }

void H5Value::init(H5Id id, const std::string& file, std::string what) {
  id_ = std::move(id);
  where_ = fmt::format("{}: {}", file, what);
  is_attr_ = H5Iget_type(id_) == H5I_ATTR;
  type_ = H5Id(MF_H5_CHECK(is_attr_ ? H5Aget_type(id_) : H5Dget_type(id_), "{}: reading the datatype", where_),
               H5Tclose);
  H5Id space(MF_H5_CHECK(is_attr_ ? H5Aget_space(id_) : H5Dget_space(id_), "{}: reading the dataspace", where_),
             H5Sclose);
  const H5S_class_t sc = H5Sget_simple_extent_type(space);
  MF_CHECK(sc == H5S_SCALAR || sc == H5S_SIMPLE || sc == H5S_NULL,
           "{}: expected a scalar, simple or null dataspace, found dataspace class {} (damaged file?)", where_,
           int(sc));
  null_ = sc == H5S_NULL;
  dims_ = h5_dims(id_, where_);
  if (null_) {
    count_ = 0;
    return;
  }
  const std::optional<std::int64_t> n = checked_numel(dims_);
  MF_CHECK(n.has_value(), "{}: expected an element count that fits in 64 bits, found shape {} (damaged file?)",
           where_, shape_str(dims_));
  count_ = *n;
}

std::string H5Value::shape_desc() const {
  if (null_) return "an empty (null) dataspace";
  if (dims_.empty()) return "a scalar";
  return fmt::format("shape {}", shape_str(dims_));
}

H5T_class_t H5Value::type_class() const { return H5Tget_class(type_); }
std::size_t H5Value::type_size() const { return H5Tget_size(type_); }

void H5Value::expect_type(H5T_class_t cls, std::size_t size, const std::string& expected) const {
  if (type_class() != cls || (size > 0 && type_size() != size))
    MF_THROW("{}: expected {}, found {}", where_, expected, type_desc());
}

void H5Value::expect_dims(const Shape& dims, const std::string& why) const {
  if (null_ || dims_ != dims)
    MF_THROW("{}: expected shape {}{}, found {}", where_, shape_str(dims), why.empty() ? "" : " (" + why + ")",
             shape_desc());
}

void H5Value::expect_one(const char* expected) const {
  if (count_ != 1) MF_THROW("{}: expected {} (a scalar), found {}", where_, expected, shape_desc());
}

std::uint64_t H5Value::file_size() const {
  H5Id f(MF_H5_CHECK(H5Iget_file_id(id_), "{}: finding the file", where_), H5Fclose);
  hsize_t size = 0;
  MF_H5_CHECK(H5Fget_filesize(f, &size), "{}: reading the file size", where_);
  return size;
}

std::uint64_t H5Value::stored_limit() const {
  const std::uint64_t fsize = file_size();
  if (is_attr_) return fsize;
  H5Id dcpl(MF_H5_CHECK(H5Dget_create_plist(id_), "{}: reading the storage properties", where_), H5Pclose);
  // External and virtual storage live in other files; their sizes are not this file's.
  if (H5Pget_external_count(dcpl) > 0 || H5Pget_layout(dcpl) == H5D_VIRTUAL)
    return std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t stored = std::min<std::uint64_t>(H5Dget_storage_size(id_), fsize);
  if (H5Pget_nfilters(dcpl) <= 0) return stored;
  std::uint64_t limit = 0;
  return __builtin_mul_overflow(stored, kMaxFilterRatio, &limit) ? std::numeric_limits<std::uint64_t>::max() : limit;
}

std::size_t H5Value::checked_count(std::size_t mem_elem_bytes) const {
  std::uint64_t declared = 0, mem = 0;
  const std::uint64_t n = std::uint64_t(count_);
  MF_CHECK(!__builtin_mul_overflow(n, std::uint64_t(type_size()), &declared) &&
               !__builtin_mul_overflow(n, std::uint64_t(mem_elem_bytes), &mem) &&
               mem <= std::uint64_t(std::numeric_limits<std::ptrdiff_t>::max()),
           "{}: {} of {} elements ({}) is too large: its byte count overflows 64 bits (damaged file?)", where_,
           shape_desc(), h5_type_desc(type_), count_);
  if (declared > 0) {
    const std::uint64_t limit = stored_limit();
    if (declared > limit) {
      if (is_attr_)
        MF_THROW("{}: {} of {} declares {} bytes, more than the whole file ({} bytes): the file is damaged", where_,
                 shape_desc(), type_desc(), declared, limit);
      MF_THROW("{}: {} of {} declares {} bytes, but the file stores {} bytes of its data (at most {} with its "
               "filters): the file is damaged, truncated, or the data was never written",
               where_, shape_desc(), type_desc(), declared,
               std::min<std::uint64_t>(H5Dget_storage_size(id_), file_size()), limit);
    }
  }
  return std::size_t(n);
}

void H5Value::read_into(hid_t mem_type, void* dst, std::size_t dst_bytes) const {
  const std::size_t n = checked_count(H5Tget_size(mem_type));
  MF_CHECK(dst_bytes == n * H5Tget_size(mem_type), "{}: a read of {} elements needs {} bytes, the buffer has {}",
           where_, n, n * H5Tget_size(mem_type), dst_bytes);
  if (n == 0) return;
  MF_H5_CHECK(is_attr_ ? H5Aread(id_, mem_type, dst) : H5Dread(id_, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst),
              "{}: reading", where_);
}

std::int64_t H5Value::read_int() const {
  expect_type(H5T_INTEGER, 0, "an integer");
  expect_one("one integer");
  std::int64_t v = 0;
  read_into(H5T_NATIVE_INT64, &v, sizeof v);
  return v;
}

double H5Value::read_number() const {
  if (type_class() != H5T_INTEGER && type_class() != H5T_FLOAT)
    MF_THROW("{}: expected a number (integer or float), found {}", where_, type_desc());
  expect_one("one number");
  double v = 0;
  read_into(H5T_NATIVE_DOUBLE, &v, sizeof v);
  return v;
}

std::string H5Value::read_string() const {
  expect_type(H5T_STRING, 0, "a string");
  expect_one("one string");
  return read_strings().front();
}

std::vector<std::string> H5Value::read_strings() const {
  std::vector<std::string> out = read_raw_strings();
  // Names end up in report.json, CSV and config files (UTF-8): refused here,
  // where the file and the entry can be named, not when a run's outputs are written.
  for (std::size_t i = 0; i < out.size(); ++i)
    if (!is_utf8(out[i]))
      MF_THROW("{}: {} not UTF-8 text ({}); melforge writes the text it reads to UTF-8 files (report.json, CSV, "
               "TOML): store it as UTF-8 (h5py: str, not bytes)",
               where_, out.size() > 1 || !dims_.empty() ? fmt::format("entry {} is", i) : std::string("is"),
               invalid_utf8_desc(out[i]));
  return out;
}

std::vector<std::string> H5Value::read_raw_strings() const {
  expect_type(H5T_STRING, 0, "strings");
  if (dims_.size() > 1) MF_THROW("{}: expected a scalar or a list of strings, found {}", where_, shape_desc());
  std::vector<std::string> out;
  if (H5Tis_variable_str(type_) > 0) {
    H5Id mt(MF_H5_CHECK(H5Tcopy(H5T_C_S1), "{}", where_), H5Tclose);
    MF_H5_CHECK(H5Tset_size(mt, H5T_VARIABLE), "{}", where_);
    MF_H5_CHECK(H5Tset_cset(mt, H5Tget_cset(type_)), "{}", where_);
    std::vector<char*> p(checked_count(sizeof(char*)), nullptr);
    // HDF5 allocates each string; they are given back however this scope ends.
    struct Reclaim {
      hid_t obj, mt;
      bool attr;
      std::vector<char*>& p;
      ~Reclaim() {
        H5Id space(attr ? H5Aget_space(obj) : H5Dget_space(obj), H5Sclose);
        if (space >= 0) H5Dvlen_reclaim(mt, space, H5P_DEFAULT, p.data());
      }
    } reclaim{id_, mt, is_attr_, p};
    read_into(mt, p.data(), p.size() * sizeof(char*));
    out.reserve(p.size());
    for (char* s : p) out.emplace_back(s ? s : "");
    return out;
  }
  // Fixed length: elements of type_size() bytes, NUL-padded (or -terminated).
  const std::size_t sz = type_size();
  const std::size_t n = checked_count(sz);
  std::vector<char> buf(n * sz);
  read_into(type_, buf.data(), buf.size());
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) out.emplace_back(buf.data() + i * sz, strnlen(buf.data() + i * sz, sz));
  return out;
}

}  // namespace mf::io
