// Facts about this build of melforge, fixed when the binary was built. The
// definitions are generated at every build (cmake/build_info.cmake), so the
// commit is the one built, not the one configured.
#pragma once

#include <string_view>

namespace mf::build_info {

// The CMake project version (PROJECT_VERSION), e.g. "0.1.0".
std::string_view version();
// The short hash of the commit built, with "-dirty" when tracked files had
// uncommitted changes; "unknown" when not built from a git checkout (a source
// tarball) or without git.
std::string_view commit();
// The build type (CMAKE_BUILD_TYPE, e.g. "Release"); empty when none was set.
std::string_view build_type();
// CMAKE_CUDA_ARCHITECTURES as configured, space-separated (e.g. "90" or
// "80-real 86-real"); empty in the emulated build.
std::string_view cuda_architectures();
// True in the emulated build (MELFORGE_CUDA_EMU): the CUDA code runs on the CPU
// emulator of CUDA, for tests only.
bool cuda_emulated();

}  // namespace mf::build_info
