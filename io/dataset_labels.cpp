#include "io/dataset_labels.hpp"

#include <algorithm>
#include <cctype>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/error.hpp"
#include "io/h5_error.hpp"
#include "io/h5_id.hpp"
#include "io/h5_lookup.hpp"
#include "io/h5_read.hpp"

namespace mf::io {

namespace {

// Reads an integer (or bool enum) dataset of rank 1 and `expected` elements as int64.
std::vector<std::int64_t> read_int_vector(hid_t file, const std::string& name, std::int64_t expected,
                                          const std::string& expected_desc, const std::string& path,
                                          bool allow_bool) {
  const H5Value d = H5Value::dataset(file, name, path, name);
  const H5T_class_t c = d.type_class();
  const bool is_enum = c == H5T_ENUM;
  if (c != H5T_INTEGER && !(allow_bool && is_enum))
    MF_THROW("{}: dataset {} must hold integers{}, found {}", path, name, allow_bool ? " or bools" : "",
             d.type_desc());
  if (d.null_space() || d.dims().size() != 1 || d.dims()[0] != expected)
    MF_THROW("{}: dataset {} has {}, expected [{}] ({}): the count does not match {}", path, name,
             d.null_space() ? d.shape_desc() : "shape " + shape_str(d.dims()), expected, expected_desc,
             "the segments");
  if (!is_enum) return d.read_vector<std::int64_t>(H5T_NATIVE_INT64);
  H5Id super(MF_H5_CHECK(H5Tget_super(d.type()), "{}: dataset {}", path, name), H5Tclose);
  const std::size_t sz = H5Tget_size(super);
  if (sz != 1) MF_THROW("{}: dataset {} is an enum of {} bytes; only 1-byte bools are supported", path, name, sz);
  H5Id mt(MF_H5_CHECK(H5Tget_native_type(d.type(), H5T_DIR_ASCEND), "{}: dataset {}", path, name), H5Tclose);
  const std::vector<std::int8_t> b = d.read_vector<std::int8_t>(mt);
  return std::vector<std::int64_t>(b.begin(), b.end());
}

void set_normal_class(const std::string& path, const DatasetNames& names, const std::vector<std::int64_t>& raw_labels,
                      DatasetInfo& info);

// DatasetNames::classes given: the file's labels become indices into
// `classes`, by name where the file names its classes, else index for index.
void map_onto_classes(const std::string& path, const std::string& lab, const DatasetNames& names,
                      std::vector<std::int64_t>& raw_labels, std::int64_t max_label, DatasetInfo& info) {
  const std::vector<std::string>& classes = names.classes;
  const std::string model_list = fmt::format("[{}]", fmt::join(classes, ", "));
  // Bounded before anything is sized from the largest label.
  const std::size_t known = info.class_names_in_file ? info.class_names.size() : classes.size();
  MF_CHECK(max_label < std::int64_t(known),
           "{}: dataset {} holds label {}, out of range: expected 0..{} ({})", path, lab, max_label,
           std::int64_t(known) - 1,
           info.class_names_in_file ? fmt::format("{} classes from the class_names attribute", known)
                                    : fmt::format("the file names no classes; {} has {}: {}", names.classes_from,
                                                             known, model_list));
  std::vector<std::int64_t> to(std::size_t(max_label) + 1, -1);
  if (info.class_names_in_file) {
    const std::vector<std::string>& own = info.class_names;
    for (std::int64_t c = 0; c <= max_label; ++c) {
      const auto it = std::find(classes.begin(), classes.end(), own[std::size_t(c)]);
      if (it != classes.end()) to[std::size_t(c)] = it - classes.begin();
    }
    for (std::size_t i = 0; i < raw_labels.size(); ++i)
      MF_CHECK(to[std::size_t(raw_labels[i])] >= 0,
               "{}: its classes (attribute class_names) are [{}], {} has {}: class '{}' (label {}) is not one of "
               "them; classes are matched by name", path, fmt::join(own, ", "), names.classes_from, model_list,
               own[std::size_t(raw_labels[i])], raw_labels[i]);
  } else {
    for (std::int64_t c = 0; c <= max_label; ++c) to[std::size_t(c)] = c;
  }
  std::vector<bool> seen(classes.size(), false);
  for (std::int64_t& l : raw_labels) {
    l = to[std::size_t(l)];
    seen[std::size_t(l)] = true;
  }
  info.class_names = classes;
  info.num_classes = int(classes.size());
  info.classes_present.clear();
  for (std::size_t c = 0; c < classes.size(); ++c)
    if (seen[c]) info.classes_present.push_back(classes[c]);
}

}  // namespace

int find_normal_class(const std::vector<std::string>& class_names) {
  int found = -1;
  for (std::size_t c = 0; c < class_names.size(); ++c) {
    std::string s = class_names[c];
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
    if (s == "normal") found = int(c);  // the last one, as always
  }
  return found;
}

// The labels (one per file), the class count and names, the normal class.
void read_labels(hid_t file, const std::string& path, const std::string& seg, const DatasetNames& names,
                 DatasetInfo& info) {
  const std::string lab = h5_absolute_path(names.labels);
  const std::int64_t F = info.num_files;
  if (!h5_path_exists(file, lab))
    MF_THROW("{}: dataset {} is missing (expected integer labels [{}]); {}", path, lab, F, h5_root_listing(file));
  const std::string per = info.layout == SegmentLayout::flat ? "one per segment of " + seg
                          : info.ragged()                    ? "one per utterance of /lengths, for " + seg
                                                             : "one per file, the first axis of " + seg;
  auto raw_labels =
      read_int_vector(file, lab, F, fmt::format("{} {}", per, shape_str(info.shape)), path, false);
  std::int64_t max_label = 0;
  for (std::size_t i = 0; i < raw_labels.size(); ++i) {
    if (raw_labels[i] < 0)
      MF_THROW("{}: dataset {} holds a negative label {} at index {}: expected class indices 0..C-1", path, lab,
               raw_labels[i], i);
    // Class counts are ints: a larger label is no class index (and would wrap max_label + 1).
    if (raw_labels[i] >= std::numeric_limits<int>::max())
      MF_THROW("{}: dataset {} label value {} at index {} exceeds the largest supported class index {}", path, lab,
               raw_labels[i], i, std::numeric_limits<int>::max() - 1);
    max_label = std::max(max_label, raw_labels[i]);
  }
  info.class_names_in_file = !info.class_names.empty();
  if (!names.classes.empty()) {
    map_onto_classes(path, lab, names, raw_labels, max_label, info);
    set_normal_class(path, names, raw_labels, info);
    return;
  }
  std::string c_from;
  if (names.num_classes > 0) {
    info.num_classes = names.num_classes;
    c_from = "as " + names.num_classes_from + " says";
  } else if (!info.class_names.empty()) {
    info.num_classes = int(info.class_names.size());
    c_from = "from the class_names attribute";
  } else {
    info.num_classes = int(max_label + 1);
    c_from = "from the largest label";
  }
  for (std::size_t i = 0; i < raw_labels.size(); ++i)
    if (raw_labels[i] >= info.num_classes)
      MF_THROW("{}: dataset {} holds label {} at index {}, out of range: expected 0..{} ({} classes {})", path, lab,
               raw_labels[i], i, info.num_classes - 1, info.num_classes, c_from);
  if (!info.class_names.empty() && int(info.class_names.size()) != info.num_classes)
    MF_THROW("{}: attribute class_names has {} names, but {} is {}: they must agree (0 takes the file's)", path,
             info.class_names.size(), names.num_classes_from, info.num_classes);
  if (info.class_names.empty()) {
    // Generated names cost memory per class: bound the count a file (one large
    // label) or a setting can ask for before making them.
    MF_CHECK(info.num_classes <= kMaxUnnamedClasses,
             "{}: {} classes {} but the file has no class_names attribute: expected at most {} unnamed classes "
             "(write class_names, or check the labels in {})",
             path, info.num_classes, c_from, kMaxUnnamedClasses, lab);
    for (int c = 0; c < info.num_classes; ++c) info.class_names.push_back(fmt::format("class_{}", c));
  }

  set_normal_class(path, names, raw_labels, info);
}

namespace {

// The normal class (DatasetNames::normal_class, else the class named normal)
// and the per-file labels.
void set_normal_class(const std::string& path, const DatasetNames& names, const std::vector<std::int64_t>& raw_labels,
                      DatasetInfo& info) {
  const std::int64_t F = info.num_files;
  info.normal_class = names.normal_class;
  if (info.normal_class < 0) info.normal_class = std::max(0, find_normal_class(info.class_names));
  if (info.normal_class >= info.num_classes)
    MF_THROW("{}: the normal class {} ({}) is out of range: expected 0..{} ({} classes)", path, info.normal_class,
             names.normal_class >= 0 ? names.normal_class_from : "the class named normal", info.num_classes - 1,
             info.num_classes);
  info.file_labels.resize(std::size_t(F));
  for (std::int64_t f = 0; f < F; ++f) info.file_labels[std::size_t(f)] = std::int32_t(raw_labels[std::size_t(f)]);
}

}  // namespace

// The leak flags: the leak dataset when present, else "label != normal class";
// then the per-segment labels and flags.
void read_leak(hid_t file, const std::string& path, const DatasetNames& names, DatasetInfo& info) {
  const std::int64_t F = info.num_files, N = info.num_segments;
  info.file_leak.resize(std::size_t(F));
  for (std::int64_t f = 0; f < F; ++f) info.file_leak[std::size_t(f)] = info.file_labels[std::size_t(f)] != info.normal_class;
  if (!names.leak.empty() && h5_path_exists(file, h5_absolute_path(names.leak))) {
    const std::string lk = h5_absolute_path(names.leak);
    const auto raw_leak =
        read_int_vector(file, lk, F, fmt::format("shaped like {}", h5_absolute_path(names.labels)), path, true);
    for (std::size_t i = 0; i < raw_leak.size(); ++i) {
      if (raw_leak[i] != 0 && raw_leak[i] != 1)
        MF_THROW("{}: dataset {} holds {} at index {}: expected 0 or 1", path, lk, raw_leak[i], i);
      info.file_leak[i] = std::uint8_t(raw_leak[i]);
    }
    info.leak_in_file = true;
  }
  info.labels.resize(std::size_t(N));
  info.leak.resize(std::size_t(N));
  for (std::int64_t s = 0; s < N; ++s) {
    info.labels[std::size_t(s)] = info.file_labels[std::size_t(info.file_of(s))];
    info.leak[std::size_t(s)] = info.file_leak[std::size_t(info.file_of(s))];
  }
}

}  // namespace mf::io
