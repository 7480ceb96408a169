// What `melforge --version` prints, so a bug report says what was built and
// what ran: the version line, then one aligned "label: value" line each for the
// commit, the build type, the CUDA architectures compiled, and the versions of
// CUDA (runtime and driver), cuDNN, HDF5, libsndfile, FFTW and libsoxr found at
// run time. `melforge info` starts with the same version line.
#pragma once

#include <string>

namespace mf::cli {

// "melforge 0.1.0": the CMake project version (tools/build_info.hpp).
std::string version_line();

// version_line() and the lines above, newline-separated, without a final
// newline. Never throws: a library that is absent reads "not found".
std::string version_report();

}  // namespace mf::cli
