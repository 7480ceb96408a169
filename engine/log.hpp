// Minimal leveled logging to stderr. MELFORGE_LOG=debug|info|warn|error sets
// the threshold (info by default).
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace mf {

enum class LogLevel { debug = 0, info = 1, warn = 2, error = 3 };
LogLevel log_level();
void set_log_level(LogLevel l);
void log_write(LogLevel l, std::string_view message);

template <class... A> void log_debug(fmt::format_string<A...> f, A&&... a) {
  if (log_level() <= LogLevel::debug) log_write(LogLevel::debug, fmt::format(f, std::forward<A>(a)...));
}
template <class... A> void log_info(fmt::format_string<A...> f, A&&... a) {
  if (log_level() <= LogLevel::info) log_write(LogLevel::info, fmt::format(f, std::forward<A>(a)...));
}
template <class... A> void log_warn(fmt::format_string<A...> f, A&&... a) {
  if (log_level() <= LogLevel::warn) log_write(LogLevel::warn, fmt::format(f, std::forward<A>(a)...));
}
template <class... A> void log_error(fmt::format_string<A...> f, A&&... a) {
  log_write(LogLevel::error, fmt::format(f, std::forward<A>(a)...));
}

}  // namespace mf
