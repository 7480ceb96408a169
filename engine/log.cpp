#include "engine/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace mf {

namespace {
LogLevel initial_level() {
  const char* env = std::getenv("MELFORGE_LOG");
  if (!env) return LogLevel::info;
  const std::string v(env);
  if (v == "debug") return LogLevel::debug;
  if (v == "info") return LogLevel::info;
  if (v == "warn") return LogLevel::warn;
  if (v == "error") return LogLevel::error;
  // Read before main() may run: say so rather than throw, and keep the default.
  std::fprintf(stderr, "melforge: MELFORGE_LOG='%s': expected debug, info, warn or error; logging at info\n",
               v.c_str());
  return LogLevel::info;
}
std::atomic<LogLevel>& level() {
  static std::atomic<LogLevel> l{initial_level()};
  return l;
}
}  // namespace

LogLevel log_level() { return level().load(std::memory_order_relaxed); }
void set_log_level(LogLevel l) { level().store(l); }

void log_write(LogLevel l, std::string_view message) {
  static constexpr const char* tags[] = {"debug", "info", "warn", "error"};
  std::fprintf(stderr, "melforge %s: %.*s\n", tags[int(l)], int(message.size()), message.data());
}

}  // namespace mf
