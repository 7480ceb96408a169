// Finding objects in an HDF5 file by name, for the dataset reader's checks at
// open: a name's absolute spelling, whether every component of it exists, and
// what the root group holds (for the message about a missing dataset).
#pragma once

#include <hdf5.h>

#include <string>

namespace mf::io {

// "segments" -> "/segments"; an absolute name is returned as it is.
std::string h5_absolute_path(const std::string& name);

// True when every component of `name` exists as a link (false for "" or "/").
bool h5_path_exists(hid_t file, const std::string& name);

// "the root holds: labels, segments", "the file holds no objects at its root",
// or why the root could not be listed. Never throws on a damaged file: the
// listing runs in a child process (engine/isolate.hpp) because HDF5 1.10.8
// reads past a link name's buffer in H5Literate on a damaged symbol table
// (H5G__ent_to_link -> strdup; found by fuzzing).
std::string h5_root_listing(hid_t file);

}  // namespace mf::io
