#include "engine/utf8.hpp"

#include <fmt/format.h>

#include <cstdint>

namespace mf {

std::optional<std::size_t> first_invalid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
    if (n < 0 || i + std::size_t(n) >= s.size()) return i;  // a bad lead byte, or cut short
    std::uint32_t cp = n == 0 ? c : c & (0x3fu >> n);
    for (int k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + std::size_t(k)]);
      if ((d & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (d & 0x3f);
    }
    static constexpr std::uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += std::size_t(n) + 1;
  }
  return std::nullopt;
}

std::string invalid_utf8_desc(std::string_view s) {
  const std::optional<std::size_t> at = first_invalid_utf8(s);
  if (!at) return {};
  return fmt::format("byte 0x{:02X} at index {}", static_cast<unsigned char>(s[*at]), *at);
}

}  // namespace mf
