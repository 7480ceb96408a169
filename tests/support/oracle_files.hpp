// The file exchange with the PyTorch oracles (tests/oracle/*.py, run by
// testing::run_oracle): a suite writes its inputs as raw little-endian arrays
// (f32 for values, i32 for labels) into a case folder, the script writes its
// results back as raw float64 (or other) arrays, and the suite reads them.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <vector>

namespace mf::testing {

// The elements of a contiguous container (std::vector, std::array) as raw bytes.
template <class V>
void write_bin(const std::filesystem::path& path, const V& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(v[0])));
  REQUIRE_MESSAGE(bool(f), "cannot write the oracle input ", path.string());
}

// n values of type T; a shorter file fails the test, naming it.
template <class T>
std::vector<T> read_bin(const std::filesystem::path& path, std::size_t n) {
  std::vector<T> v(n);
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(T)));
  REQUIRE_MESSAGE(std::size_t(f.gcount()) == n * sizeof(T), "oracle output ", path.string(), " is short");
  return v;
}

inline std::vector<double> read_f64(const std::filesystem::path& path, std::size_t n) {
  return read_bin<double>(path, n);
}

}  // namespace mf::testing
