#include "io/h5_write.hpp"

#include "io/h5_error.hpp"

namespace mf::io {

void write_attr_number(hid_t obj, const char* name, hid_t ftype, hid_t mtype, const void* v, const std::string& path) {
  const hid_t sp = H5Screate(H5S_SCALAR);
  const hid_t a = MF_H5_CHECK(H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT), "{}: attribute {}", path, name);
  MF_H5_CHECK(H5Awrite(a, mtype, v), "{}: writing attribute {}", path, name);
  H5Aclose(a);
  H5Sclose(sp);
}

void write_vector(hid_t file, const char* name, hid_t ftype, hid_t mtype, const void* data, hsize_t n,
                  const std::string& path) {
  write_array(file, name, ftype, mtype, data, {n}, path);
}

void write_array(hid_t file, const char* name, hid_t ftype, hid_t mtype, const void* data,
                 const std::vector<hsize_t>& dims, const std::string& path) {
  const hid_t sp = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  const hid_t d = MF_H5_CHECK(H5Dcreate2(file, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                              "{}: creating {}", path, name);
  MF_H5_CHECK(H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "{}: writing {}", path, name);
  H5Dclose(d);
  H5Sclose(sp);
}

void write_strings(hid_t obj, const char* name, const std::vector<std::string>& v, bool as_attribute,
                   const std::string& path) {
  const hid_t st = H5Tcopy(H5T_C_S1);
  H5Tset_size(st, H5T_VARIABLE);
  H5Tset_cset(st, H5T_CSET_UTF8);
  const hsize_t n = v.size();
  const hid_t sp = H5Screate_simple(1, &n, nullptr);
  std::vector<const char*> p;
  for (const auto& s : v) p.push_back(s.c_str());
  if (as_attribute) {
    const hid_t a = MF_H5_CHECK(H5Acreate2(obj, name, st, sp, H5P_DEFAULT, H5P_DEFAULT), "{}: attribute {}", path, name);
    MF_H5_CHECK(H5Awrite(a, st, p.data()), "{}: writing attribute {}", path, name);
    H5Aclose(a);
  } else {
    const hid_t d = MF_H5_CHECK(H5Dcreate2(obj, name, st, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                                "{}: creating /{}", path, name);
    MF_H5_CHECK(H5Dwrite(d, st, H5S_ALL, H5S_ALL, H5P_DEFAULT, p.data()), "{}: writing /{}", path, name);
    H5Dclose(d);
  }
  H5Sclose(sp);
  H5Tclose(st);
}

void write_attr_string(hid_t obj, const char* name, const std::string& v, const std::string& path) {
  const hid_t st = H5Tcopy(H5T_C_S1);
  H5Tset_size(st, H5T_VARIABLE);
  H5Tset_cset(st, H5T_CSET_UTF8);
  const hid_t sp = H5Screate(H5S_SCALAR);
  const hid_t a = MF_H5_CHECK(H5Acreate2(obj, name, st, sp, H5P_DEFAULT, H5P_DEFAULT), "{}: attribute {}", path, name);
  const char* p = v.c_str();
  MF_H5_CHECK(H5Awrite(a, st, &p), "{}: writing attribute {}", path, name);
  H5Aclose(a);
  H5Sclose(sp);
  H5Tclose(st);
}

}  // namespace mf::io
