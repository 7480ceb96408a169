// UTF-8 validation: the one check of text that comes from files and flags.
//
// Every string melforge reads (class names, file names, checkpoint strings,
// configuration values, CSV cells, trial lists) ends up in UTF-8 outputs:
// config.toml, report.json, metrics, CSV. Text that is not UTF-8 is refused
// where it is read, naming the file and the entry, not when an output is
// written at the end of a run.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace mf {

// The index of the first byte of `s` that does not start or continue a
// well-formed UTF-8 sequence (a bad lead byte, a missing continuation, an
// overlong form, a surrogate or a code point above U+10FFFF); nullopt when
// all of `s` is UTF-8.
std::optional<std::size_t> first_invalid_utf8(std::string_view s);
inline bool is_utf8(std::string_view s) { return !first_invalid_utf8(s).has_value(); }

// "byte 0xFF at index 3": where `s` stops being UTF-8, for messages ("" when it is UTF-8).
std::string invalid_utf8_desc(std::string_view s);

}  // namespace mf
