#include "audio/source_files.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <set>

#include "engine/error.hpp"
#include "io/csv_table.hpp"

namespace fs = std::filesystem;

namespace mf::audio {

namespace {
std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool hidden(const fs::path& p) {
  const std::string n = p.filename().string();
  return !n.empty() && n[0] == '.';
}

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string{} : s.substr(b, e - b + 1);
}

bool is_integer(const std::string& s, long long& v) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return !s.empty() && r.ec == std::errc{} && r.ptr == s.data() + s.size();
}

// The distinct labels in order: numerically when all are integers, else as text.
std::vector<std::string> sorted_classes(const std::set<std::string>& labels) {
  std::vector<std::string> v(labels.begin(), labels.end());
  long long a = 0, b = 0;
  const bool numeric = std::all_of(v.begin(), v.end(), [&](const std::string& s) { return is_integer(s, a); });
  if (numeric)
    std::sort(v.begin(), v.end(), [&](const std::string& x, const std::string& y) {
      is_integer(x, a);
      is_integer(y, b);
      return a < b;
    });
  return v;
}
}  // namespace

bool has_audio_extension(const fs::path& p) {
  static const std::set<std::string> ext = {".wav", ".wave", ".flac", ".ogg", ".oga", ".opus", ".aif", ".aiff",
                                            ".aifc", ".au", ".snd", ".caf", ".w64", ".rf64", ".mp3"};
  return ext.count(lower(p.extension().string())) > 0;
}

SourceList find_sources_by_folder(const fs::path& root) {
  std::error_code ec;
  MF_CHECK(fs::is_directory(root, ec), "--audio {}: expected a folder with one sub-folder per class, found {}",
           root.string(), fs::exists(root, ec) ? "a file" : "nothing (no such path)");
  SourceList out;
  std::vector<std::pair<std::string, fs::path>> classes;  // name, folder
  for (const auto& e : fs::directory_iterator(root, fs::directory_options::follow_directory_symlink)) {
    if (hidden(e.path())) continue;
    if (e.is_directory())
      classes.emplace_back(e.path().filename().string(), e.path());
    else
      out.ignored.push_back(e.path().lexically_relative(root).generic_string() + " (not inside a class folder)");
  }
  std::sort(classes.begin(), classes.end());
  for (const auto& [name, dir] : classes) {
    std::vector<std::string> found;
    auto it = fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink);
    for (auto i = fs::begin(it); i != fs::end(it); ++i) {
      if (hidden(i->path())) {
        if (i->is_directory()) i.disable_recursion_pending();
        continue;
      }
      if (i->is_directory()) continue;
      // Lexical: fs::relative would resolve every component's links (a dozen system calls per file).
      const std::string rel = i->path().lexically_relative(root).generic_string();
      if (has_audio_extension(i->path()))
        found.push_back(rel);
      else
        out.ignored.push_back(rel + " (not an audio file extension)");
    }
    if (found.empty()) continue;  // a folder without audio is not a class
    const auto label = std::int64_t(out.class_names.size());
    out.class_names.push_back(name);
    for (auto& f : found) out.files.push_back(SourceFile{std::move(f), label, -1});
  }
  MF_CHECK(!out.files.empty(), "--audio {}: no audio files found in class sub-folders (ROOT/<class>/*.wav, .flac, ...)",
           root.string());
  std::sort(out.files.begin(), out.files.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
  return out;
}

SourceList read_sources_csv(const fs::path& csv) {
  const auto rows = io::read_csv(csv);
  const std::string where = csv.string();
  std::size_t first = 0;
  if (!rows.empty() && io::is_header(rows[0], "path")) first = 1;
  MF_CHECK(rows.size() > first, "--labels {}: no rows (expected path,label[,leak])", where);
  const std::size_t cols = rows[first].fields.size();
  MF_CHECK(cols == 2 || cols == 3, "--labels {}: line {}: expected 2 or 3 columns (path,label[,leak]), found {}",
           where, rows[first].line, cols);
  std::set<std::string> labels, seen;
  for (std::size_t r = first; r < rows.size(); ++r) {
    const auto& f = rows[r].fields;
    MF_CHECK(f.size() == cols, "--labels {}: line {}: expected {} columns like the first row, found {}", where,
             rows[r].line, cols, f.size());
    const std::string path = fs::path(trim(f[0])).lexically_normal().generic_string();
    MF_CHECK(!path.empty() && !trim(f[1]).empty(), "--labels {}: line {}: empty path or label", where, rows[r].line);
    MF_CHECK(seen.insert(path).second, "--labels {}: line {}: {} is listed twice", where, rows[r].line, path);
    labels.insert(trim(f[1]));
  }
  SourceList out;
  out.class_names = sorted_classes(labels);
  out.has_leak = cols == 3;
  std::map<std::string, std::int64_t> index;
  for (std::size_t c = 0; c < out.class_names.size(); ++c) index[out.class_names[c]] = std::int64_t(c);
  for (std::size_t r = first; r < rows.size(); ++r) {
    const auto& f = rows[r].fields;
    SourceFile s{fs::path(trim(f[0])).lexically_normal().generic_string(), index.at(trim(f[1])), -1};
    if (cols == 3) {
      const std::string v = trim(f[2]);
      MF_CHECK(v == "0" || v == "1", "--labels {}: line {}: leak must be 0 or 1, found '{}'", where, rows[r].line, v);
      s.leak = v == "1";
    }
    out.files.push_back(std::move(s));
  }
  std::sort(out.files.begin(), out.files.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
  return out;
}

}  // namespace mf::audio
