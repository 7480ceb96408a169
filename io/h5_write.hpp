// Small HDF5 writing helpers shared by the dataset writer (io/h5_writer.hpp)
// and the embedding files of `melforge embed` (io/embedding_file.hpp). Each
// throws mf::Error naming `path` and the object on an HDF5 failure.
#pragma once

#include <hdf5.h>

#include <string>
#include <vector>

namespace mf::io {

// A scalar attribute `name` of `obj` (ftype in the file, mtype in memory).
void write_attr_number(hid_t obj, const char* name, hid_t ftype, hid_t mtype, const void* v, const std::string& path);
// A variable-length UTF-8 string attribute.
void write_attr_string(hid_t obj, const char* name, const std::string& v, const std::string& path);
// A 1-D dataset of n elements.
void write_vector(hid_t file, const char* name, hid_t ftype, hid_t mtype, const void* data, hsize_t n,
                  const std::string& path);
// A dataset of the given dimensions (row-major data).
void write_array(hid_t file, const char* name, hid_t ftype, hid_t mtype, const void* data,
                 const std::vector<hsize_t>& dims, const std::string& path);
// A 1-D variable-length UTF-8 string dataset, or (as_attribute) attribute.
void write_strings(hid_t obj, const char* name, const std::vector<std::string>& v, bool as_attribute,
                   const std::string& path);

}  // namespace mf::io
