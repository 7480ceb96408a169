#include "model/checkpoint.hpp"

#include <hdf5.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>

#include "engine/atomic_file.hpp"
#include "engine/error.hpp"
#include "engine/log.hpp"
#include "io/h5_error.hpp"

namespace fs = std::filesystem;

namespace mf::model {

// ---- CRC-32 -----------------------------------------------------------------

namespace {
constexpr std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xedb88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kCrcTable = make_crc_table();
}  // namespace

std::uint32_t crc32(const void* data, std::size_t n, std::uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (std::size_t i = 0; i < n; ++i) crc = kCrcTable[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
  return ~crc;
}

// ---- Checkpoint accessors -----------------------------------------------------

void Checkpoint::put(const std::string& name, DType dtype, const Shape& shape, const void* data) {
  MF_CHECK(!name.empty() && name.find('/') == std::string::npos,
           "checkpoint: array name '{}' must be non-empty and contain no '/'", name);
  CheckpointArray a;
  a.dtype = dtype;
  a.shape = shape;
  const std::size_t bytes = std::size_t(shape_numel(shape)) * dtype_size(dtype);
  a.bytes.resize(bytes);
  if (bytes) std::memcpy(a.bytes.data(), data, bytes);
  arrays[name] = std::move(a);
}

void Checkpoint::put(const std::string& name, const Tensor& t) {
  const Tensor h = t.is_cuda() ? t.to(Device::cpu()) : t;
  put(name, h.dtype(), h.shape(), h.raw());
}

const CheckpointArray& Checkpoint::array(const std::string& name) const {
  auto it = arrays.find(name);
  MF_CHECK(it != arrays.end(), "checkpoint {}: no array '{}'", source, name);
  return it->second;
}

void Checkpoint::read_into(const std::string& name, Tensor& dst) const {
  const CheckpointArray& a = array(name);
  MF_CHECK(a.dtype == dst.dtype() && shape_numel(a.shape) == dst.numel(),
           "checkpoint {}: array '{}' is {}{}, expected {}{}", source, name, dtype_name(a.dtype), shape_str(a.shape),
           dtype_name(dst.dtype()), shape_str(dst.shape()));
  if (dst.is_cuda()) {
    Tensor h = Tensor::empty(dst.shape(), dst.dtype());
    if (!a.bytes.empty()) std::memcpy(h.raw(), a.bytes.data(), a.bytes.size());
    dst.copy_from(h);
  } else if (!a.bytes.empty()) {
    std::memcpy(dst.raw(), a.bytes.data(), a.bytes.size());
  }
}

std::int64_t Checkpoint::get_int(const std::string& name) const {
  auto it = ints.find(name);
  MF_CHECK(it != ints.end(), "checkpoint {}: no integer '{}'", source, name);
  return it->second;
}
double Checkpoint::get_float(const std::string& name) const {
  auto it = floats.find(name);
  MF_CHECK(it != floats.end(), "checkpoint {}: no float '{}'", source, name);
  return it->second;
}
const std::string& Checkpoint::get_string(const std::string& name) const {
  auto it = strings.find(name);
  MF_CHECK(it != strings.end(), "checkpoint {}: no string '{}'", source, name);
  return it->second;
}
bool Checkpoint::has(const std::string& name) const {
  return arrays.count(name) || ints.count(name) || floats.count(name) || strings.count(name);
}

// ---- HDF5 -------------------------------------------------------------------

namespace {

// Owns one HDF5 identifier.
class Hid {
 public:
  Hid(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Hid() {
    if (id_ >= 0) close_(id_);
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  operator hid_t() const { return id_; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

hid_t file_type(DType t) {
  switch (t) {
    case DType::f32: return H5T_IEEE_F32LE;
    case DType::f16:
    case DType::bf16: return H5T_STD_U16LE;
    case DType::i32: return H5T_STD_I32LE;
    case DType::u8: return H5T_STD_U8LE;
  }
  return H5T_STD_U8LE;
}
hid_t mem_type(DType t) {
  switch (t) {
    case DType::f32: return H5T_NATIVE_FLOAT;
    case DType::f16:
    case DType::bf16: return H5T_NATIVE_UINT16;
    case DType::i32: return H5T_NATIVE_INT32;
    case DType::u8: return H5T_NATIVE_UINT8;
  }
  return H5T_NATIVE_UINT8;
}

void write_string_attr(hid_t obj, const char* name, const std::string& value, const std::string& ctx) {
  Hid type(MF_H5_CHECK(H5Tcopy(H5T_C_S1), "{}", ctx), H5Tclose);
  MF_H5_CHECK(H5Tset_size(type, std::max<std::size_t>(1, value.size())), "{}", ctx);
  Hid space(MF_H5_CHECK(H5Screate(H5S_SCALAR), "{}", ctx), H5Sclose);
  Hid attr(MF_H5_CHECK(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT), "{}: attribute {}", ctx, name),
           H5Aclose);
  std::string buf = value;
  buf.resize(std::max<std::size_t>(1, value.size()), '\0');
  MF_H5_CHECK(H5Awrite(attr, type, buf.data()), "{}: attribute {}", ctx, name);
}

std::string read_string(hid_t obj_or_attr, bool is_attr, const std::string& ctx) {
  Hid type(MF_H5_CHECK(is_attr ? H5Aget_type(obj_or_attr) : H5Dget_type(obj_or_attr), "{}", ctx), H5Tclose);
  MF_CHECK(H5Tget_class(type) == H5T_STRING && !H5Tis_variable_str(type), "{}: expected a fixed-length string",
           ctx);
  const std::size_t n = H5Tget_size(type);
  std::string buf(n, '\0');
  MF_H5_CHECK(is_attr ? H5Aread(obj_or_attr, type, buf.data()) : H5Dread(obj_or_attr, type, H5S_ALL, H5S_ALL,
                                                                         H5P_DEFAULT, buf.data()),
              "{}", ctx);
  while (!buf.empty() && buf.back() == '\0') buf.pop_back();
  return buf;
}

template <class T>
void write_scalar(hid_t group, const std::string& name, hid_t ftype, hid_t mtype, T v, const std::string& ctx) {
  Hid space(MF_H5_CHECK(H5Screate(H5S_SCALAR), "{}", ctx), H5Sclose);
  Hid ds(MF_H5_CHECK(H5Dcreate2(group, name.c_str(), ftype, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                     "{}: creating {}", ctx, name),
         H5Dclose);
  MF_H5_CHECK(H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v), "{}: writing {}", ctx, name);
}

void write_h5(const fs::path& path, const Checkpoint& c) {
  io::silence_hdf5_errors();
  const std::string ctx = fmt::format("writing checkpoint {}", path.string());
  Hid file(MF_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "{}", ctx), H5Fclose);
  {
    Hid space(MF_H5_CHECK(H5Screate(H5S_SCALAR), "{}", ctx), H5Sclose);
    Hid attr(MF_H5_CHECK(H5Acreate2(file, "melforge_checkpoint", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT),
                         "{}", ctx),
             H5Aclose);
    const int v = kCheckpointVersion;
    MF_H5_CHECK(H5Awrite(attr, H5T_NATIVE_INT, &v), "{}", ctx);
  }
  Hid arrays(MF_H5_CHECK(H5Gcreate2(file, "arrays", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "{}", ctx), H5Gclose);
  for (const auto& [name, a] : c.arrays) {
    std::vector<hsize_t> dims(a.shape.begin(), a.shape.end());
    Hid space(MF_H5_CHECK(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr),
                          "{}: {}", ctx, name),
              H5Sclose);
    Hid ds(MF_H5_CHECK(H5Dcreate2(arrays, name.c_str(), file_type(a.dtype), space, H5P_DEFAULT, H5P_DEFAULT,
                                  H5P_DEFAULT),
                       "{}: creating array {}", ctx, name),
           H5Dclose);
    if (!a.bytes.empty())
      MF_H5_CHECK(H5Dwrite(ds, mem_type(a.dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, a.bytes.data()),
                  "{}: writing array {}", ctx, name);
    write_string_attr(ds, "dtype", std::string(dtype_name(a.dtype)), ctx);
    Hid aspace(MF_H5_CHECK(H5Screate(H5S_SCALAR), "{}", ctx), H5Sclose);
    Hid crc(MF_H5_CHECK(H5Acreate2(ds, "crc32", H5T_STD_U32LE, aspace, H5P_DEFAULT, H5P_DEFAULT), "{}", ctx),
            H5Aclose);
    const std::uint32_t sum = crc32(a.bytes.data(), a.bytes.size());
    MF_H5_CHECK(H5Awrite(crc, H5T_NATIVE_UINT32, &sum), "{}", ctx);
  }
  Hid ints(MF_H5_CHECK(H5Gcreate2(file, "ints", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "{}", ctx), H5Gclose);
  for (const auto& [name, v] : c.ints) write_scalar(ints, name, H5T_STD_I64LE, H5T_NATIVE_INT64, v, ctx);
  Hid floats(MF_H5_CHECK(H5Gcreate2(file, "floats", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "{}", ctx), H5Gclose);
  for (const auto& [name, v] : c.floats) write_scalar(floats, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v, ctx);
  Hid strings(MF_H5_CHECK(H5Gcreate2(file, "strings", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "{}", ctx), H5Gclose);
  for (const auto& [name, v] : c.strings) {
    Hid type(MF_H5_CHECK(H5Tcopy(H5T_C_S1), "{}", ctx), H5Tclose);
    MF_H5_CHECK(H5Tset_size(type, std::max<std::size_t>(1, v.size())), "{}", ctx);
    Hid space(MF_H5_CHECK(H5Screate(H5S_SCALAR), "{}", ctx), H5Sclose);
    Hid ds(MF_H5_CHECK(H5Dcreate2(strings, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                       "{}: creating {}", ctx, name),
           H5Dclose);
    std::string buf = v;
    buf.resize(std::max<std::size_t>(1, v.size()), '\0');
    MF_H5_CHECK(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), "{}: writing {}", ctx, name);
  }
  MF_H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL), "{}", ctx);
}

std::vector<std::string> member_names(hid_t group, const std::string& ctx) {
  std::vector<std::string> names;
  H5G_info_t info;
  MF_H5_CHECK(H5Gget_info(group, &info), "{}", ctx);
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t n = MF_H5_CHECK(H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT),
                                  "{}", ctx);
    std::string s(std::size_t(n) + 1, '\0');
    MF_H5_CHECK(H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, s.data(), s.size(), H5P_DEFAULT),
                "{}", ctx);
    s.resize(std::size_t(n));
    names.push_back(std::move(s));
  }
  return names;
}


}  // namespace

Checkpoint read_checkpoint(const fs::path& path) {
  io::silence_hdf5_errors();
  const std::string ctx = fmt::format("checkpoint {}", path.string());
  std::error_code ec;
  MF_CHECK(fs::is_regular_file(path, ec), "{}: no such file", ctx);
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
  if (is_h5 <= 0) {
    io::hdf5_error_stack();  // clear
    MF_THROW("{}: not an HDF5 file (or truncated)", ctx);
  }
  Hid file(MF_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "opening {}", ctx), H5Fclose);
  MF_CHECK(H5Aexists(file, "melforge_checkpoint") > 0, "{}: not a melforge checkpoint (no melforge_checkpoint attribute)",
           ctx);
  Checkpoint c;
  c.source = path.string();
  {
    Hid attr(MF_H5_CHECK(H5Aopen(file, "melforge_checkpoint", H5P_DEFAULT), "{}", ctx), H5Aclose);
    int v = 0;
    MF_H5_CHECK(H5Aread(attr, H5T_NATIVE_INT, &v), "{}", ctx);
    MF_CHECK(v == kCheckpointVersion, "{}: format version {}, this melforge reads version {}", ctx, v,
             kCheckpointVersion);
  }
  {
    Hid g(MF_H5_CHECK(H5Gopen2(file, "arrays", H5P_DEFAULT), "{}: group /arrays", ctx), H5Gclose);
    for (const std::string& name : member_names(g, ctx)) {
      const std::string actx = fmt::format("{}: array {}", ctx, name);
      Hid ds(MF_H5_CHECK(H5Dopen2(g, name.c_str(), H5P_DEFAULT), "{}", actx), H5Dclose);
      Hid dt_attr(MF_H5_CHECK(H5Aopen(ds, "dtype", H5P_DEFAULT), "{}", actx), H5Aclose);
      CheckpointArray a;
      a.dtype = parse_dtype(read_string(dt_attr, true, actx));
      Hid space(MF_H5_CHECK(H5Dget_space(ds), "{}", actx), H5Sclose);
      const int rank = MF_H5_CHECK(H5Sget_simple_extent_ndims(space), "{}", actx);
      std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
      if (rank > 0) MF_H5_CHECK(H5Sget_simple_extent_dims(space, dims.data(), nullptr), "{}", actx);
      a.shape.assign(dims.begin(), dims.end());
      a.bytes.resize(std::size_t(shape_numel(a.shape)) * dtype_size(a.dtype));
      if (!a.bytes.empty())
        MF_H5_CHECK(H5Dread(ds, mem_type(a.dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, a.bytes.data()), "{}", actx);
      Hid crc_attr(MF_H5_CHECK(H5Aopen(ds, "crc32", H5P_DEFAULT), "{}", actx), H5Aclose);
      std::uint32_t want = 0;
      MF_H5_CHECK(H5Aread(crc_attr, H5T_NATIVE_UINT32, &want), "{}", actx);
      const std::uint32_t got = crc32(a.bytes.data(), a.bytes.size());
      MF_CHECK(got == want, "{}: CRC-32 mismatch (stored {:08x}, data {:08x}): the file is corrupt", actx, want, got);
      c.arrays[name] = std::move(a);
    }
  }
  {
    Hid g(MF_H5_CHECK(H5Gopen2(file, "ints", H5P_DEFAULT), "{}: group /ints", ctx), H5Gclose);
    for (const std::string& name : member_names(g, ctx)) {
      Hid ds(MF_H5_CHECK(H5Dopen2(g, name.c_str(), H5P_DEFAULT), "{}: /ints/{}", ctx, name), H5Dclose);
      std::int64_t v = 0;
      MF_H5_CHECK(H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v), "{}: /ints/{}", ctx, name);
      c.ints[name] = v;
    }
  }
  {
    Hid g(MF_H5_CHECK(H5Gopen2(file, "floats", H5P_DEFAULT), "{}: group /floats", ctx), H5Gclose);
    for (const std::string& name : member_names(g, ctx)) {
      Hid ds(MF_H5_CHECK(H5Dopen2(g, name.c_str(), H5P_DEFAULT), "{}: /floats/{}", ctx, name), H5Dclose);
      double v = 0;
      MF_H5_CHECK(H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v), "{}: /floats/{}", ctx, name);
      c.floats[name] = v;
    }
  }
  {
    Hid g(MF_H5_CHECK(H5Gopen2(file, "strings", H5P_DEFAULT), "{}: group /strings", ctx), H5Gclose);
    for (const std::string& name : member_names(g, ctx)) {
      Hid ds(MF_H5_CHECK(H5Dopen2(g, name.c_str(), H5P_DEFAULT), "{}: /strings/{}", ctx, name), H5Dclose);
      c.strings[name] = read_string(ds, false, fmt::format("{}: /strings/{}", ctx, name));
    }
  }
  return c;
}

void write_checkpoint(const fs::path& path, const Checkpoint& c) {
  write_file_atomic(path, [&](const fs::path& tmp) { write_h5(tmp, c); });  // write_h5 closes the file
}

// ---- CheckpointDir ------------------------------------------------------------

namespace {
// The step of "ckpt-<digits>.h5", or -1.
std::int64_t ckpt_step(const fs::path& p) {
  const std::string n = p.filename().string();
  if (n.size() < 9 || n.rfind("ckpt-", 0) != 0 || n.substr(n.size() - 3) != ".h5") return -1;
  const std::string digits = n.substr(5, n.size() - 8);
  if (digits.empty() || digits.size() > 18 ||  // more digits would overflow std::stoll
      !std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
    return -1;
  return std::stoll(digits);
}
}  // namespace

CheckpointDir::CheckpointDir(fs::path dir, std::int64_t keep_last) : dir_(std::move(dir)), keep_last_(keep_last) {
  MF_CHECK(keep_last_ >= 1, "checkpoint.keep_last: expected an integer > 0, found {}", keep_last_);
}

std::vector<fs::path> CheckpointDir::list() const {
  std::vector<std::pair<std::int64_t, fs::path>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::int64_t s = ckpt_step(e.path());
    if (s >= 0 && e.is_regular_file(ec)) found.emplace_back(s, e.path());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<fs::path> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

fs::path CheckpointDir::save(const Checkpoint& c, std::int64_t step, bool best) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  MF_CHECK(!ec, "checkpoint: creating {}: {}", dir_.string(), ec.message());
  // Temporary files left by a process that died mid-write.
  for (const auto& e : fs::directory_iterator(dir_, ec))
    if (e.path().filename().string().rfind(".tmp-", 0) == 0) fs::remove(e.path(), ec);
  const fs::path path = dir_ / fmt::format("ckpt-{:010d}.h5", step);
  write_checkpoint(path, c);
  if (best) {
    // best.h5 becomes a second name of the file just written (an atomically
    // renamed hard link); a copy where hard links are not supported.
    write_file_atomic(best_path(), [&](const fs::path& tmp) {
      std::error_code e;
      fs::create_hard_link(path, tmp, e);
      if (e) fs::copy_file(path, tmp, fs::copy_options::overwrite_existing);
    });
  }
  const auto all = list();
  for (std::size_t i = std::size_t(keep_last_); i < all.size(); ++i) fs::remove(all[i], ec);
  return path;
}

std::optional<FoundCheckpoint> newest_good_checkpoint(const fs::path& dir) {
  CheckpointDir d(dir, 1);
  for (const fs::path& p : d.list()) {
    try {
      Checkpoint c = read_checkpoint(p);
      return FoundCheckpoint{p, std::move(c)};
    } catch (const Error& e) {
      log_warn("skipping checkpoint {}: {}", p.string(), e.message());
    } catch (const std::exception& e) {  // e.g. std::bad_alloc for a damaged file's absurd array shape
      log_warn("skipping checkpoint {}: {}", p.string(), e.what());
    }
  }
  return std::nullopt;
}

}  // namespace mf::model
