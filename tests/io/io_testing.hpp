// Shared by the io tests: the h5py-written case files (tests/io/h5_cases.py,
// run once per test process into a private temporary directory) and raw
// little-endian reference arrays.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/temp_dir.hpp"

namespace mf::testing {


// The directory holding the h5py-written files (written on first use).
inline const TempDir& h5_cases() {
  static TempDir dir("io_cases");
  static const bool written = [] {
    const std::string cmd = std::string(MELFORGE_ORACLE_PYTHON) + " " + MELFORGE_SOURCE_DIR +
                            "/tests/io/h5_cases.py " + dir.path().string() + " > /dev/null";
    return std::system(cmd.c_str()) == 0;
  }();
  REQUIRE_MESSAGE(written, "tests/io/h5_cases.py failed (needs Debian's python3-h5py)");
  return dir;
}

template <class T>
std::vector<T> read_raw(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot open " << path);
  f.seekg(0, std::ios::end);
  const auto n = std::size_t(f.tellg()) / sizeof(T);
  f.seekg(0);
  std::vector<T> v(n);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(T)));
  return v;
}

}  // namespace mf::testing
