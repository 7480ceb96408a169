// A dataset's labels, read and checked at open (Dataset::open): the class of
// each file, the class count and names, the normal class, and the leak flags
// (from the leak dataset, or derived as "label != normal class"). Errors are
// mf::Error naming the file, the dataset, the index and the value found.
#pragma once

#include <hdf5.h>

#include <string>

#include "io/dataset.hpp"

namespace mf::io {

// info.file_labels, num_classes, class_names (generated "class_K" when the
// file has none, at most kMaxUnnamedClasses) and normal_class. Needs the
// shape (num_files) and the attributes (class_names) already in `info`.
void read_labels(hid_t file, const std::string& path, const std::string& seg, const DatasetNames& names,
                 DatasetInfo& info);

// info.file_leak and leak_in_file, then the per-segment labels and leak flags.
// Needs read_labels' results.
void read_leak(hid_t file, const std::string& path, const DatasetNames& names, DatasetInfo& info);

}  // namespace mf::io
