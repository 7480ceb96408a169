#include "io/h5_lookup.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "engine/error.hpp"
#include "engine/isolate.hpp"

namespace mf::io {

std::string h5_absolute_path(const std::string& name) { return name.starts_with('/') ? name : "/" + name; }

bool h5_path_exists(hid_t file, const std::string& name) {
  std::string acc;
  std::size_t pos = 0;
  while (pos <= name.size()) {
    const std::size_t next = name.find('/', pos);
    const std::string part = name.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    if (!part.empty()) {
      acc += "/" + part;
      if (H5Lexists(file, acc.c_str(), H5P_DEFAULT) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return false;
      }
    }
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  return !acc.empty();
}

namespace {
herr_t collect_names(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}
}  // namespace

std::string h5_root_listing(hid_t file) {
  std::string listing;
  try {
    listing = run_isolated("listing the root group", isolate_timeout_s(30), [&] {
      std::vector<std::string> names;
      H5Literate(file, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect_names, &names);
      return fmt::format("{}", fmt::join(names, ", "));
    });
  } catch (const Error& e) {
    return fmt::format("its root could not be listed ({})", e.message());
  }
  if (listing.empty()) return "the file holds no objects at its root";
  return fmt::format("the root holds: {}", listing);
}

}  // namespace mf::io
