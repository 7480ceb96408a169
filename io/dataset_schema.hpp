// The segments dataset's schema, read and checked at open (Dataset::open):
// its element type, its shape and what the shape means (flat or
// file-structured), and the optional attributes. Each function fills its part
// of DatasetInfo or throws mf::Error naming the file, the dataset, what was
// expected and what was found (io/dataset.hpp has the schema).
#pragma once

#include <hdf5.h>

#include <string>

#include "io/dataset.hpp"

namespace mf::io {

// info.dtype: the segments must be little-endian IEEE float16 or float32.
void check_segment_type(hid_t dset, const std::string& path, const std::string& seg, DatasetInfo& info);

// info.shape, layout, segment and file counts, n_mels, frames: the shape as
// the file declares it (rank 3 or 5, non-empty, its byte count within 64 bits).
// Not yet checked against what the file stores: resolve_storage does that.
// Needs info.dtype.
void set_segment_shape(hid_t dset, const std::string& path, const std::string& seg, DatasetInfo& info);

// Ragged data (io/dataset_ragged.cpp): /lengths read and checked (integers,
// [F] with 1 <= F <= T, each >= 1, their running sum within T and equal to T
// at the end: an error names the file, the dataset and the first bad entry),
// then info.utterance_offsets, num_files = num_segments = F and frames (the
// crop: names.crop_frames, or the shortest utterance). Needs the shape
// checked against the file (resolve_storage) first.
void read_utterance_lengths(hid_t file, const std::string& path, DatasetInfo& info);
// What Dataset reads a ragged file's crops through: its frames as rows of one
// frame ([T, 1, n_mels], SegmentLayout::ragged_frames).
DatasetInfo ragged_frames_view(const DatasetInfo& info);

// info.class_names, sample_rate, hop_length, and the check of an n_mels
// attribute against the shape: the attributes on the segments dataset or, when
// it has none of that name, on the root group. The HDF5 calls run in a child
// process (engine/isolate.hpp): Debian 12's HDF5 1.10.8 loops forever in
// H5HG_read on a damaged global heap (where class_names' strings live),
// overlaps a memcpy there, and reads out of bounds in H5Aexists on a damaged
// object header; no HDF5 release fixes all of it. A crash or a read running
// past the limit becomes an error naming the file (docs/decisions.md,
// "Damaged files and the HDF5 library"). Needs the shape.
void read_attributes_isolated(hid_t dset, hid_t file, const std::string& path, const std::string& seg,
                              DatasetInfo& info);
// The strings of dataset `name` (a list of variable- or fixed-length UTF-8
// strings, as /files), read in a child process for the same reason: they
// live in the same global heap.
std::vector<std::string> read_strings_isolated(hid_t file, const std::string& path, const std::string& name);

}  // namespace mf::io
