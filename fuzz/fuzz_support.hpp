// Shared pieces of the fuzz targets (docs/fuzzing.md).
//
// Every target is a LLVMFuzzerTestOneInput that hands the input to the entry
// point the product uses. A clear mf::Error is the expected answer to a bad
// input; anything else is a finding:
//   - a sanitizer report, a crash or a hang (libFuzzer's -timeout);
//   - any other exception escaping the reader (a JSON or TOML library error, a
//     std::bad_alloc, a std::filesystem error: messages that do not name the
//     file and what was expected) -> fail_uncaught aborts;
//   - a violated invariant of what the reader returned (fuzz_check aborts);
//   - an HDF5 object left open after the reader returned or threw.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mf::fuzz {

// Writes the input to a fresh temporary file (unlinked and created again each
// time, so HDF5 never mistakes it for a file it still holds) and returns its
// path. The folder is $MELFORGE_FUZZ_TMP, else /dev/shm, else /tmp; `suffix`
// is the extension the product looks at (".h5", ".safetensors").
std::string write_input(const std::uint8_t* data, std::size_t size, const char* suffix);

// Aborts with a report when HDF5 still has a file, group, dataset, attribute or
// datatype open (a handle leaked by the reader under test).
void check_no_open_hdf5_objects(const char* target);

// For catch (...) after catch (const mf::Error&): prints what escaped and aborts.
[[noreturn]] void fail_uncaught(const char* target);

// Prints the failed invariant and aborts.
[[noreturn]] void fail_check(const char* target, const char* what, const char* file, int line);

// Quiets melforge's info logging and HDF5's error printing (once).
void quiet();

}  // namespace mf::fuzz

#define FUZZ_CHECK(cond, target) \
  ((cond) ? (void)0 : ::mf::fuzz::fail_check(target, #cond, __FILE__, __LINE__))
