// HDF5 errors: HDF5's own error-stack printing is turned off, and the stack is
// folded into the exception's message instead, together with what melforge was
// doing (file, dataset) so a user can act on it.
#pragma once

#include <hdf5.h>

#include <string>

#include "engine/error.hpp"

namespace mf::io {

// Turns off HDF5's automatic error printing for the whole process (idempotent).
void silence_hdf5_errors();

// The current HDF5 error stack as one line ("H5Dread: ...; H5D__read: ..."),
// then clears it. Empty when the stack is empty.
std::string hdf5_error_stack();

[[noreturn]] void throw_hdf5(const char* file, int line, const char* call, const std::string& context);

}  // namespace mf::io

// MF_H5_CHECK(call, "reading /segments of {}", path): HDF5 calls return a
// negative value (herr_t or hid_t) on failure.
#define MF_H5_CHECK(call, ...)                                                   \
  ([&]() {                                                                       \
    auto mf_r_ = (call);                                                         \
    if (mf_r_ < 0) [[unlikely]]                                                  \
      ::mf::io::throw_hdf5(__FILE__, __LINE__, #call, ::fmt::format(__VA_ARGS__)); \
    return mf_r_;                                                                \
  }())
