// Reading small CSV tables (label lists, split assignments): comma-separated
// fields, RFC 4180 quoting ("a, b" and "" for a quote inside), CRLF or LF line
// ends, blank lines and lines starting with '#' skipped; every field must be UTF-8.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace mf::io {

struct CsvRow {
  std::int64_t line = 0;  // 1-based line in the file, for messages
  std::vector<std::string> fields;
};

// Every row of the file. Throws mf::Error naming the file (and line) when it
// cannot be read or a quoted field is not closed.
std::vector<CsvRow> read_csv(const std::filesystem::path& path);

// Whether `row` is a header: its first field, trimmed, equals `name` in any
// case ("path", "Path", "PATH").
bool is_header(const CsvRow& row, std::string_view name);

// One field for writing: as is, or quoted when it holds a comma, a quote or a
// line break.
std::string csv_field(const std::string& s);

}  // namespace mf::io
