#include "model/checkpoint.hpp"

#include <hdf5.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>

#include "engine/atomic_file.hpp"
#include "engine/error.hpp"
#include "engine/isolate.hpp"
#include "engine/log.hpp"
#include "io/h5_error.hpp"
#include "io/h5_read.hpp"

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
  arrays[name] = HostArray(dtype, shape, data);
}

void Checkpoint::put(const std::string& name, const Tensor& t) {
  const Tensor h = t.is_cuda() ? t.to(Device::cpu()) : t;
  put(name, h.dtype(), h.shape(), h.raw());
}

const HostArray& Checkpoint::array(const std::string& name) const {
  auto it = arrays.find(name);
  MF_CHECK(it != arrays.end(), "checkpoint {}: /arrays/{} is missing (a damaged checkpoint, or not written by melforge?)", source,
           name);
  return it->second;
}

void Checkpoint::read_into(const std::string& name, Tensor& dst) const {
  const HostArray& a = array(name);
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
  MF_CHECK(it != ints.end(), "checkpoint {}: /ints/{} is missing (a damaged checkpoint, or not written by melforge?)", source,
           name);
  return it->second;
}
std::int64_t Checkpoint::get_int_in(const std::string& name, std::int64_t lo, std::int64_t hi) const {
  const std::int64_t v = get_int(name);
  MF_CHECK(v >= lo && v <= hi, "checkpoint {}: /ints/{}: expected an integer in [{}, {}], found {}", source, name, lo,
           hi, v);
  return v;
}
double Checkpoint::get_float(const std::string& name) const {
  auto it = floats.find(name);
  MF_CHECK(it != floats.end(), "checkpoint {}: /floats/{} is missing (a damaged checkpoint, or not written by melforge?)", source,
           name);
  return it->second;
}
const std::string& Checkpoint::get_string(const std::string& name) const {
  auto it = strings.find(name);
  MF_CHECK(it != strings.end(), "checkpoint {}: /strings/{} is missing (a damaged checkpoint, or not written by melforge?)", source,
           name);
  return it->second;
}
bool Checkpoint::has(const std::string& name) const {
  return arrays.count(name) || ints.count(name) || floats.count(name) || strings.count(name);
}

// ---- HDF5 -------------------------------------------------------------------

namespace {

using io::H5Id;

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
  H5Id type(MF_H5_CHECK(H5Tcopy(H5T_C_S1), "{}", ctx), H5Tclose);
  MF_H5_CHECK(H5Tset_size(type, std::max<std::size_t>(1, value.size())), "{}", ctx);
  H5Id space(MF_H5_CHECK(H5Screate(H5S_SCALAR), "{}", ctx), H5Sclose);
  H5Id attr(MF_H5_CHECK(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT), "{}: attribute {}", ctx, name),
           H5Aclose);
  std::string buf = value;
  buf.resize(std::max<std::size_t>(1, value.size()), '\0');
  MF_H5_CHECK(H5Awrite(attr, type, buf.data()), "{}: attribute {}", ctx, name);
}

template <class T>
void write_scalar(hid_t group, const std::string& name, hid_t ftype, hid_t mtype, T v, const std::string& ctx) {
  H5Id space(MF_H5_CHECK(H5Screate(H5S_SCALAR), "{}", ctx), H5Sclose);
  H5Id ds(MF_H5_CHECK(H5Dcreate2(group, name.c_str(), ftype, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                     "{}: creating {}", ctx, name),
         H5Dclose);
  MF_H5_CHECK(H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v), "{}: writing {}", ctx, name);
}

void write_h5(const fs::path& path, const Checkpoint& c) {
  io::silence_hdf5_errors();
  const std::string ctx = fmt::format("writing checkpoint {}", path.string());
  H5Id file(MF_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "{}", ctx), H5Fclose);
  {
    H5Id space(MF_H5_CHECK(H5Screate(H5S_SCALAR), "{}", ctx), H5Sclose);
    H5Id attr(MF_H5_CHECK(H5Acreate2(file, "melforge_checkpoint", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT),
                         "{}", ctx),
             H5Aclose);
    const int v = kCheckpointVersion;
    MF_H5_CHECK(H5Awrite(attr, H5T_NATIVE_INT, &v), "{}", ctx);
  }
  H5Id arrays(MF_H5_CHECK(H5Gcreate2(file, "arrays", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "{}", ctx), H5Gclose);
  for (const auto& [name, a] : c.arrays) {
    std::vector<hsize_t> dims(a.shape.begin(), a.shape.end());
    H5Id space(MF_H5_CHECK(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr),
                          "{}: {}", ctx, name),
              H5Sclose);
    H5Id ds(MF_H5_CHECK(H5Dcreate2(arrays, name.c_str(), file_type(a.dtype), space, H5P_DEFAULT, H5P_DEFAULT,
                                  H5P_DEFAULT),
                       "{}: creating array {}", ctx, name),
           H5Dclose);
    if (!a.bytes.empty())
      MF_H5_CHECK(H5Dwrite(ds, mem_type(a.dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, a.bytes.data()),
                  "{}: writing array {}", ctx, name);
    write_string_attr(ds, "dtype", std::string(dtype_name(a.dtype)), ctx);
    H5Id aspace(MF_H5_CHECK(H5Screate(H5S_SCALAR), "{}", ctx), H5Sclose);
    H5Id crc(MF_H5_CHECK(H5Acreate2(ds, "crc32", H5T_STD_U32LE, aspace, H5P_DEFAULT, H5P_DEFAULT), "{}", ctx),
            H5Aclose);
    const std::uint32_t sum = crc32(a.bytes.data(), a.bytes.size());
    MF_H5_CHECK(H5Awrite(crc, H5T_NATIVE_UINT32, &sum), "{}", ctx);
  }
  H5Id ints(MF_H5_CHECK(H5Gcreate2(file, "ints", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "{}", ctx), H5Gclose);
  for (const auto& [name, v] : c.ints) write_scalar(ints, name, H5T_STD_I64LE, H5T_NATIVE_INT64, v, ctx);
  H5Id floats(MF_H5_CHECK(H5Gcreate2(file, "floats", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "{}", ctx), H5Gclose);
  for (const auto& [name, v] : c.floats) write_scalar(floats, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v, ctx);
  H5Id strings(MF_H5_CHECK(H5Gcreate2(file, "strings", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "{}", ctx), H5Gclose);
  for (const auto& [name, v] : c.strings) {
    H5Id type(MF_H5_CHECK(H5Tcopy(H5T_C_S1), "{}", ctx), H5Tclose);
    MF_H5_CHECK(H5Tset_size(type, std::max<std::size_t>(1, v.size())), "{}", ctx);
    H5Id space(MF_H5_CHECK(H5Screate(H5S_SCALAR), "{}", ctx), H5Sclose);
    H5Id ds(MF_H5_CHECK(H5Dcreate2(strings, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
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

// The file datatype each dtype is written as (file_type above): f32 as IEEE
// floats, the others as integers of the dtype's width (bf16 and f16 as their
// uint16 bit patterns).
void expect_array_type(const io::H5Value& v, DType dt) {
  if (dt == DType::f32) return v.expect_type(H5T_FLOAT, 4, "32-bit floats (its dtype attribute says f32)");
  v.expect_type(H5T_INTEGER, dtype_size(dt),
                fmt::format("{}-bit integers (its dtype attribute says {})", dtype_size(dt) * 8, dtype_name(dt)));
}

// /arrays/<name>: the data, its "dtype" attribute and its CRC-32.
HostArray read_array(hid_t group, const std::string& name, const std::string& ctx) {
  const std::string shown = "/arrays/" + name;
  const io::H5Value ds = io::H5Value::dataset(group, name, ctx, shown);
  const io::H5Value dt_attr = io::H5Value::attribute(ds.id(), "dtype", ctx, shown);
  HostArray a;
  const std::string dt = dt_attr.read_string();
  try {
    a.dtype = parse_dtype(dt);
  } catch (const Error& e) {
    MF_THROW("{}: {}", dt_attr.where(), e.message());
  }
  expect_array_type(ds, a.dtype);
  a.shape = ds.dims();
  a.bytes.resize(ds.checked_count(dtype_size(a.dtype)) * dtype_size(a.dtype));
  ds.read_into(mem_type(a.dtype), a.bytes.data(), a.bytes.size());
  const io::H5Value crc_attr = io::H5Value::attribute(ds.id(), "crc32", ctx, shown);
  const std::int64_t want = crc_attr.read_int();
  MF_CHECK(want >= 0 && want <= 0xffffffffLL, "{}: expected a CRC-32 in [0, 4294967295], found {}", crc_attr.where(),
           want);
  const std::uint32_t got = crc32(a.bytes.data(), a.bytes.size());
  MF_CHECK(got == std::uint32_t(want), "{}: CRC-32 mismatch (stored {:08x}, data {:08x}): the file is corrupt",
           ds.where(), want, got);
  return a;
}

// Calls fn(value) for each member of the group `name` (a scalar each).
template <class Fn>
void for_each_member(hid_t file, const std::string& name, const std::string& ctx, Fn&& fn) {
  H5Id g(MF_H5_CHECK(H5Gopen2(file, name.c_str(), H5P_DEFAULT), "{}: group /{}", ctx, name), H5Gclose);
  for (const std::string& member : member_names(g, ctx))
    fn(member, io::H5Value::dataset(g, member, ctx, fmt::format("/{}/{}", name, member)));
}

// read_checkpoint's work, in whichever process calls it (read_checkpoint runs
// it in a child: see below).
Checkpoint read_checkpoint_here(const fs::path& path) {
  io::silence_hdf5_errors();
  const std::string ctx = fmt::format("checkpoint {}", path.string());
  std::error_code ec;
  MF_CHECK(fs::is_regular_file(path, ec), "{}: no such file", ctx);
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
  if (is_h5 <= 0) {
    io::hdf5_error_stack();  // clear
    MF_THROW("{}: not an HDF5 file (or truncated)", ctx);
  }
  H5Id file(MF_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "opening {}", ctx), H5Fclose);
  MF_CHECK(H5Aexists(file, "melforge_checkpoint") > 0, "{}: not a melforge checkpoint (no melforge_checkpoint attribute)",
           ctx);
  Checkpoint c;
  c.source = path.string();
  {
    const io::H5Value version = io::H5Value::attribute(file, "melforge_checkpoint", ctx, "/");
    const std::int64_t v = version.read_int();
    MF_CHECK(v == kCheckpointVersion, "{}: format version {}, this melforge reads version {}", version.where(), v,
             kCheckpointVersion);
  }
  {
    H5Id g(MF_H5_CHECK(H5Gopen2(file, "arrays", H5P_DEFAULT), "{}: group /arrays", ctx), H5Gclose);
    for (const std::string& name : member_names(g, ctx)) c.arrays[name] = read_array(g, name, ctx);
  }
  for_each_member(file, "ints", ctx, [&](const std::string& name, const io::H5Value& v) { c.ints[name] = v.read_int(); });
  for_each_member(file, "floats", ctx, [&](const std::string& name, const io::H5Value& v) {
    c.floats[name] = v.read_number();
  });
  for_each_member(file, "strings", ctx, [&](const std::string& name, const io::H5Value& v) {
    c.strings[name] = v.read_string();
  });
  return c;
}

// A checkpoint as bytes, for the trip from the isolated reader back to the
// parent (engine/isolate.hpp's ByteWriter/ByteReader: sizes, then contents).
std::string encode(const Checkpoint& c) {
  ByteWriter w;
  w.u64(c.arrays.size());
  for (const auto& [name, a] : c.arrays) {
    w.str(name);
    w.u64(static_cast<unsigned long long>(a.dtype));
    w.u64(a.shape.size());
    for (const std::int64_t dim : a.shape) w.u64(static_cast<unsigned long long>(dim));
    w.str(std::string(a.bytes.begin(), a.bytes.end()));
  }
  w.u64(c.ints.size());
  for (const auto& [name, v] : c.ints) {
    w.str(name);
    w.u64(static_cast<unsigned long long>(v));
  }
  w.u64(c.floats.size());
  for (const auto& [name, v] : c.floats) {
    w.str(name);
    w.f64(v);
  }
  w.u64(c.strings.size());
  for (const auto& [name, v] : c.strings) {
    w.str(name);
    w.str(v);
  }
  return w.take();
}

Checkpoint decode(const std::string& bytes) {
  ByteReader r(bytes);
  Checkpoint c;
  for (auto n = r.u64(); n > 0; --n) {
    const std::string name = r.str();
    HostArray a;
    a.dtype = static_cast<DType>(r.u64());
    for (auto rank = r.u64(); rank > 0; --rank) a.shape.push_back(static_cast<std::int64_t>(r.u64()));
    const std::string data = r.str();
    a.bytes.assign(data.begin(), data.end());
    c.arrays.emplace(name, std::move(a));
  }
  for (auto n = r.u64(); n > 0; --n) {
    const std::string name = r.str();
    c.ints[name] = static_cast<std::int64_t>(r.u64());
  }
  for (auto n = r.u64(); n > 0; --n) {
    const std::string name = r.str();
    c.floats[name] = r.f64();
  }
  for (auto n = r.u64(); n > 0; --n) {
    const std::string name = r.str();
    c.strings[name] = r.str();
  }
  return c;
}

}  // namespace

// The HDF5 library (1.10.8, Debian 12's) reads freed or out-of-bounds memory
// on some damaged object headers (H5Aopen, tests/fuzz_regressions/checkpoint):
// melforge cannot fix that, so the whole read runs in a child process with a
// time limit and only its result comes back (docs/decisions.md, "Damaged files
// and the HDF5 library"). A checkpoint is small (the model and its optimizer
// state), and it is read once per command, so the fork and the copy are cheap.
Checkpoint read_checkpoint(const fs::path& path) {
  const std::string bytes = run_isolated(fmt::format("checkpoint {}", path.string()), isolate_timeout_s(120),
                                         [&] { return encode(read_checkpoint_here(path)); });
  Checkpoint c = decode(bytes);
  c.source = path.string();
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

std::optional<FoundCheckpoint> newest_good_checkpoint(const fs::path& dir, std::vector<std::string>* skipped) {
  CheckpointDir d(dir, 1);
  for (const fs::path& p : d.list()) {
    std::string why;
    try {
      Checkpoint c = read_checkpoint(p);
      return FoundCheckpoint{p, std::move(c)};
    } catch (const Error& e) {
      why = e.message();
    } catch (const std::exception& e) {  // not expected (reads check sizes first), but a damaged file must not stop --resume
      why = e.what();
    }
    log_warn("skipping checkpoint {}: {}", p.string(), why);
    if (skipped) skipped->push_back(why);
  }
  return std::nullopt;
}

}  // namespace mf::model
