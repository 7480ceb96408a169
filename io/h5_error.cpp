#include "io/h5_error.hpp"

#include <mutex>
#include <vector>

namespace mf::io {

void silence_hdf5_errors() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

namespace {
herr_t collect(unsigned n, const H5E_error2_t* e, void* client) {
  auto* out = static_cast<std::vector<std::string>*>(client);
  if (n < 8 && e && e->desc) out->push_back(fmt::format("{}: {}", e->func_name ? e->func_name : "?", e->desc));
  return 0;
}
}  // namespace

std::string hdf5_error_stack() {
  std::vector<std::string> lines;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect, &lines);
  H5Eclear2(H5E_DEFAULT);
  return fmt::format("{}", fmt::join(lines, "; "));
}

void throw_hdf5(const char* file, int line, const char* call, const std::string& context) {
  const std::string stack = hdf5_error_stack();
  ::mf::detail::throw_error(file, line,
                            stack.empty() ? fmt::format("{}: HDF5 call {} failed", context, call)
                                          : fmt::format("{}: HDF5 call {} failed ({})", context, call, stack));
}

}  // namespace mf::io
