#include "io/dataset_schema.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "engine/error.hpp"
#include "engine/isolate.hpp"
#include "io/h5_error.hpp"
#include "io/h5_id.hpp"
#include "io/h5_read.hpp"

namespace mf::io {

// The segments' element type: little-endian IEEE float16 or float32.
void check_segment_type(hid_t dset, const std::string& path, const std::string& seg, DatasetInfo& info) {
  H5Id type(MF_H5_CHECK(H5Dget_type(dset), "{}: reading the datatype of {}", path, seg), H5Tclose);
  if (H5Tget_class(type) != H5T_FLOAT)
    MF_THROW("{}: dataset {} must hold float16 or float32 values, found {}", path, seg, h5_type_desc(type));
  const std::size_t sz = H5Tget_size(type);
  if (sz != 2 && sz != 4)
    MF_THROW("{}: dataset {} has an unsupported float width: expected 16 or 32 bits, found {} bits", path, seg,
             sz * 8);
  if (H5Tget_order(type) != H5T_ORDER_LE)
    MF_THROW("{}: dataset {} is big-endian: expected little-endian IEEE floats", path, seg);
  std::size_t spos, epos, esize, mpos, msize;
  H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize);
  const bool ieee = sz == 2 ? (spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10)
                            : (spos == 31 && epos == 23 && esize == 8 && mpos == 0 && msize == 23);
  if (!ieee)
    MF_THROW("{}: dataset {} is a {}-bit float with {} exponent and {} mantissa bits: expected IEEE {}", path,
             seg, sz * 8, esize, msize, sz == 2 ? "half (5/10)" : "single (8/23)");
  info.dtype = sz == 2 ? DType::f16 : DType::f32;
}

// The shape as the file declares it and what it means (not yet checked
// against what the file holds: that is resolve_storage's job).
void set_segment_shape(hid_t dset, const std::string& path, const std::string& seg, DatasetInfo& info) {
  info.shape = h5_dims(dset, fmt::format("{}: dataset {}", path, seg));
  const auto& sh = info.shape;
  if (sh.size() != 2 && sh.size() != 3 && sh.size() != 5)
    MF_THROW("{}: dataset {} has the wrong rank: expected 3 ([N, n_mels, frames]), 5 ([F, L, S, n_mels, "
             "frames]) or 2 (whole utterances [T, n_mels] with /lengths), found rank {} {}", path, seg, sh.size(),
             shape_str(sh));
  const std::optional<std::int64_t> numel = checked_numel(sh);
  std::uint64_t bytes = 0;
  if (!numel || __builtin_mul_overflow(std::uint64_t(*numel), dtype_size(info.dtype), &bytes))
    MF_THROW("{}: dataset {} has shape {}: expected a size that fits in 64 bits, found one that overflows "
             "(damaged file?)", path, seg, shape_str(sh));
  if (*numel == 0) MF_THROW("{}: dataset {} is empty: shape {}", path, seg, shape_str(sh));
  // Every partial product below is at most numel: no overflow.
  if (sh.size() == 2) {  // whole utterances: the counts come from /lengths (read_utterance_lengths)
    info.layout = SegmentLayout::ragged;
    info.n_mels = sh[1];
    info.frames = 0;
    return;
  }
  if (sh.size() == 3) {
    info.layout = SegmentLayout::flat;
    info.num_segments = sh[0];
    info.num_files = sh[0];
  } else {
    info.layout = SegmentLayout::file_structured;
    info.num_files = sh[0];
    info.long_per_file = sh[1];
    info.short_per_long = sh[2];
    info.segments_per_file = sh[1] * sh[2];
    info.num_segments = sh[0] * sh[1] * sh[2];
  }
  info.n_mels = sh[sh.size() - 2];
  info.frames = sh[sh.size() - 1];
}

namespace {

// An attribute on the dataset or, failing that, on the root group.
H5Id find_attr(hid_t dset, hid_t file, const char* name) {
  for (hid_t obj : {dset, file}) {
    if (H5Aexists(obj, name) > 0) return H5Id(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
    H5Eclear2(H5E_DEFAULT);
  }
  return {};
}

// A number attribute (sample_rate, hop_length, n_mels): one finite value.
double read_number_attr(H5Id attr, const std::string& path, const char* name) {
  const H5Value v(std::move(attr), path, fmt::format("attribute {}", name));
  const double x = v.read_number();
  MF_CHECK(std::isfinite(x), "{}: expected a finite number, found {}", v.where(), x);
  return x;
}

// The front-end's attributes (n_fft, fmin, fmax, frames), read only when all
// four are there; frames must equal the segments' frame axis.
void read_frontend_attributes(hid_t dset, hid_t file, const std::string& path, DatasetInfo& info) {
  const char* names[] = {"n_fft", "fmin", "fmax", "frames"};
  double v[4] = {0, 0, 0, 0};
  for (int i = 0; i < 4; ++i) {
    H5Id a = find_attr(dset, file, names[i]);
    if (a.get() < 0) return;
    v[i] = read_number_attr(std::move(a), path, names[i]);
  }
  MF_CHECK(v[0] >= 2 && v[0] <= 65536 && v[0] == std::floor(v[0]),
           "{}: attribute n_fft: expected a whole number in [2, 65536], found {}", path, v[0]);
  MF_CHECK(v[1] >= 0 && v[2] > v[1], "{}: attributes fmin = {}, fmax = {}: expected 0 <= fmin < fmax", path, v[1], v[2]);
  // Whole utterances have no fixed frame count: the attribute is the front-end's segment length.
  MF_CHECK(info.ragged() || v[3] == double(info.frames),
           "{}: attribute frames = {} disagrees with the segments' {} frames", path, v[3], info.frames);
  info.n_fft = std::int64_t(v[0]);
  info.fmin = v[1];
  info.fmax = v[2];
  info.frames_attr = std::int64_t(v[3]);
}

// Classes are matched by name (a model's, another split's): each must be a
// name, and a name must mean one class.
void check_class_names(const std::vector<std::string>& names, const std::string& where) {
  std::unordered_map<std::string_view, std::size_t> first;
  for (std::size_t i = 0; i < names.size(); ++i) {
    MF_CHECK(!names[i].empty(), "{}: entry {} is empty: every class needs a name", where, i);
    const auto [it, fresh] = first.emplace(names[i], i);
    MF_CHECK(fresh, "{}: entries {} and {} are both '{}': class names must be unique (classes are matched by name)",
             where, it->second, i, names[i]);
  }
}

// The optional attributes, on the segments dataset or the root group.
void read_attributes(hid_t dset, hid_t file, const std::string& path, const std::string& seg, DatasetInfo& info) {
  if (H5Id a = find_attr(dset, file, "class_names"); a.get() >= 0) {
    const H5Value v(std::move(a), path, fmt::format("attribute class_names (of {} or /)", seg));
    info.class_names = v.read_strings();
    check_class_names(info.class_names, v.where());
  }
  if (H5Id a = find_attr(dset, file, "sample_rate"); a.get() >= 0)
    info.sample_rate = read_number_attr(std::move(a), path, "sample_rate");
  if (H5Id a = find_attr(dset, file, "hop_length"); a.get() >= 0) {
    const double hop = read_number_attr(std::move(a), path, "hop_length");
    MF_CHECK(hop >= 0 && hop <= 9007199254740992.0 && hop == std::floor(hop),
             "{}: attribute hop_length: expected a whole number in [0, 2^53], found {}", path, hop);
    info.hop_length = std::int64_t(hop);
  }
  read_frontend_attributes(dset, file, path, info);
  if (H5Id a = find_attr(dset, file, "db_per_unit"); a.get() >= 0) {
    info.db_per_unit = read_number_attr(std::move(a), path, "db_per_unit");
    MF_CHECK(info.db_per_unit > 0 && info.db_per_unit <= 100,
             "{}: attribute db_per_unit: expected a number in (0, 100], found {}", path, info.db_per_unit);
  }
  if (H5Id a = find_attr(dset, file, "n_mels"); a.get() >= 0) {
    const double nm = read_number_attr(std::move(a), path, "n_mels");
    if (nm != double(info.n_mels))
      MF_THROW("{}: attribute n_mels = {} disagrees with {} {}: expected n_mels = {} (the mel axis)", path, nm, seg,
               shape_str(info.shape), info.n_mels);
  }
}

}  // namespace

void read_attributes_isolated(hid_t dset, hid_t file, const std::string& path, const std::string& seg,
                              DatasetInfo& info) {
  const std::string bytes = run_isolated(fmt::format("{}: reading the attributes of {}", path, seg),
                                         isolate_timeout_s(30), [&] {
    read_attributes(dset, file, path, seg, info);  // the child's copy of info
    ByteWriter w;
    w.u64(info.class_names.size());
    for (const std::string& n : info.class_names) w.str(n);
    w.f64(info.sample_rate);
    w.u64(static_cast<unsigned long long>(info.hop_length));
    w.u64(static_cast<unsigned long long>(info.n_fft));
    w.u64(static_cast<unsigned long long>(info.frames_attr));
    w.f64(info.fmin);
    w.f64(info.fmax);
    w.f64(info.db_per_unit);
    return w.take();
  });
  ByteReader r(bytes);
  info.class_names.resize(std::min<std::size_t>(r.u64(), bytes.size() / 8));
  for (std::string& n : info.class_names) n = r.str();
  info.sample_rate = r.f64();
  info.hop_length = static_cast<std::int64_t>(r.u64());
  info.n_fft = static_cast<std::int64_t>(r.u64());
  info.frames_attr = static_cast<std::int64_t>(r.u64());
  info.fmin = r.f64();
  info.fmax = r.f64();
  info.db_per_unit = r.f64();
}

std::vector<std::string> read_strings_isolated(hid_t file, const std::string& path, const std::string& name) {
  const std::string bytes = run_isolated(fmt::format("{}: reading {}", path, name), isolate_timeout_s(30), [&] {
    const std::vector<std::string> v = H5Value::dataset(file, name, path, name).read_strings();
    ByteWriter w;
    w.u64(v.size());
    for (const std::string& s : v) w.str(s);
    return w.take();
  });
  ByteReader r(bytes);
  std::vector<std::string> out(std::min<std::size_t>(r.u64(), bytes.size() / 8));
  for (std::string& s : out) s = r.str();
  return out;
}

}  // namespace mf::io
