// Files that make the HDF5 library itself hang or crash (docs/decisions.md,
// "Damaged files and the HDF5 library"): Dataset::open must
// end with an error naming the file, in bounded time.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "engine/error.hpp"
#include "io/dataset.hpp"

TEST_CASE("a damaged global heap under class_names is an error naming the file, not a hang") {
  // HDF5 1.10.8 loops forever in H5HG_read on this file (the free-space object
  // of the GCOL collection holding the class names has size 0).
  const std::string path = MELFORGE_SOURCE_DIR "/tests/fuzz_regressions/dataset/gcol-free-size-zero.h5";
  ::setenv("MELFORGE_ISOLATE_TIMEOUT", "2", 1);
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg = "(no error)";
  try {
    mf::io::Dataset::open(path);
  } catch (const mf::Error& e) {
    msg = e.message();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::unsetenv("MELFORGE_ISOLATE_TIMEOUT");
  INFO(msg);
  CHECK(msg.find(path + ": reading the attributes of /segments: did not finish within 2 s") == 0);
  CHECK(s < 30);
}
