// TempDir: a fresh folder for a test's files under the system's temporary
// folder (a unique name: parallel tests and repeated runs never share one),
// removed with everything in it when the object goes. MELFORGE_KEEP_TEST_FILES=1
// keeps it and prints where, for a look at a failing case.
#pragma once

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace mf::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    std::string tmpl = (std::filesystem::temp_directory_path() / ("melforge_" + tag + "_XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("cannot create a temporary folder " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    const char* keep = std::getenv("MELFORGE_KEEP_TEST_FILES");
    if (keep != nullptr && std::string(keep) == "1") {
      std::fprintf(stderr, "kept test files in %s\n", path_.c_str());
      return;
    }
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);  // best effort: a destructor must not throw
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // A path inside, as text (command lines are built from it).
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace mf::testing
