// H5Id: owns one HDF5 identifier (file, group, dataset, attribute, datatype,
// dataspace, property list) and closes it with the function it was given.
// Every reader and writer of HDF5 in melforge holds its identifiers in these,
// so an exception never leaks an open object.
#pragma once

#include <hdf5.h>

#include <utility>

namespace mf::io {

class H5Id {
 public:
  H5Id() = default;
  // `close` is H5Fclose, H5Dclose, H5Aclose, ...: the one that matches `id`.
  // A negative `id` (a failed call) is held but never closed.
  H5Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~H5Id() { reset(); }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  H5Id(H5Id&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  H5Id& operator=(H5Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, -1);
      close_ = o.close_;
    }
    return *this;
  }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

}  // namespace mf::io
