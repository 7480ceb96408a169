#include "engine/error.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>

namespace mf {

std::string user_message(const std::exception& e) {
  if (const auto* m = dynamic_cast<const Error*>(&e)) return m->message();
  return e.what();
}

}  // namespace mf

namespace mf::detail {

std::string where(const char* file, int line) {
  // Keep the path from the project root down: short, yet unambiguous.
  std::string_view f(file);
  std::size_t best = std::string_view::npos;
  for (std::string_view top : {"/engine/", "/kernels/", "/io/", "/model/", "/train/", "/audio/", "/tools/", "/bench/",
                               "/fuzz/", "/tests/"})
    best = std::min(best, f.find(top));
  if (best != std::string_view::npos) f = f.substr(best + 1);
  return fmt::format("{}:{}", f, line);
}

void throw_error(const char* file, int line, std::string message) {
  throw Error(std::move(message), where(file, line));
}

static std::string cuda_message(const char* call, const char* library, int code,
                                std::string_view text) {
  return fmt::format("{} call failed: {} returned {} ({})", library, call, code, text);
}

void throw_cuda(const char* file, int line, const char* call, const char* library,
                int code, std::string_view text) {
  throw CudaError(cuda_message(call, library, code, text), where(file, line), code);
}

void print_cuda(const char* file, int line, const char* call, const char* library,
                int code, std::string_view text) noexcept {
  try {
    std::fprintf(stderr, "melforge: %s [%s]\n", cuda_message(call, library, code, text).c_str(),
                 where(file, line).c_str());
  } catch (...) {
    std::fputs("melforge: error while reporting a CUDA error\n", stderr);
  }
}

}  // namespace mf::detail
