#include "io/csv_table.hpp"

#include <cctype>
#include <fstream>
#include <sstream>

#include "engine/error.hpp"
#include "engine/utf8.hpp"

namespace mf::io {

namespace {
// Splits one record starting at text[pos]; advances pos past its line end.
// Quoted fields may span lines (line counts them).
CsvRow parse_record(const std::string& text, std::size_t& pos, std::int64_t& line, const std::string& where) {
  CsvRow row;
  row.line = line;
  std::string field;
  bool quoted = false, was_quoted = false;
  while (pos < text.size()) {
    const char c = text[pos++];
    if (quoted) {
      if (c == '"' && pos < text.size() && text[pos] == '"') {
        field += '"';
        ++pos;
      } else if (c == '"') {
        quoted = false;
      } else {
        if (c == '\n') ++line;
        field += c;
      }
    } else if (c == '"' && field.empty() && !was_quoted) {
      quoted = was_quoted = true;
    } else if (c == ',') {
      row.fields.push_back(std::move(field));
      field.clear();
      was_quoted = false;
    } else if (c == '\n') {
      ++line;
      break;
    } else if (c != '\r') {
      field += c;
    }
  }
  MF_CHECK(!quoted, "{}: line {}: a quoted field is not closed", where, row.line);
  row.fields.push_back(std::move(field));
  return row;
}
}  // namespace

std::vector<CsvRow> read_csv(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  MF_CHECK(in.good(), "{}: cannot open the CSV file", path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  MF_CHECK(!in.bad(), "{}: error reading the CSV file", path.string());
  std::string text = ss.str();
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);  // a UTF-8 byte-order mark (spreadsheet exports)
  std::vector<CsvRow> rows;
  std::size_t pos = 0;
  std::int64_t line = 1;
  while (pos < text.size()) {
    const std::size_t start = pos;
    const std::size_t eol = text.find('\n', pos);
    const std::string raw = text.substr(start, eol == std::string::npos ? std::string::npos : eol - start);
    const bool blank = raw.find_first_not_of(" \t\r") == std::string::npos;
    if (blank || raw[0] == '#') {
      pos = eol == std::string::npos ? text.size() : eol + 1;
      ++line;
      continue;
    }
    rows.push_back(parse_record(text, pos, line, path.string()));
    // Fields become dataset names and CSV/JSON output (UTF-8): refused here, by line and field.
    const CsvRow& row = rows.back();
    for (std::size_t k = 0; k < row.fields.size(); ++k)
      MF_CHECK(is_utf8(row.fields[k]), "{}: line {}, field {}: expected UTF-8 text, found {}", path.string(),
               row.line, k + 1, invalid_utf8_desc(row.fields[k]));
  }
  return rows;
}

bool is_header(const CsvRow& row, std::string_view name) {
  if (row.fields.empty()) return false;
  const std::string& f = row.fields[0];
  const auto b = f.find_first_not_of(" \t"), e = f.find_last_not_of(" \t");
  if (b == std::string::npos || e - b + 1 != name.size()) return false;
  for (std::size_t i = 0; i < name.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(f[b + i])) != std::tolower(static_cast<unsigned char>(name[i])))
      return false;
  return true;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace mf::io
