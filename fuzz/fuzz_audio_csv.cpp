// Fuzz target: the CSV tables `melforge data build` reads (audio/dataset_builder.cpp):
// io::read_csv, the labels CSV (audio::read_sources_csv, `--labels`), the
// groups CSV (audio::split_by_groups, `--split-by`) against a small fixed file
// list and against the files the labels CSV listed, the seeded stratified
// split of those files, and `--split` text (audio::parse_split) taken from the
// input's first line (without a leading '#', which makes the line a CSV
// comment, so one input can drive both).
//
// Findings beyond the sanitizers: an exception other than mf::Error, and a
// result that breaks its contract: rows without fields or out of line order,
// a source list that is unsorted, has duplicate paths, labels outside the
// class names or leak values that do not match the leak column, fractions
// that do not sum to 1, splits that are not a partition of the files, a group
// that crosses splits.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "audio/source_files.hpp"
#include "audio/split_files.hpp"
#include "engine/error.hpp"
#include "fuzz/fuzz_support.hpp"
#include "io/csv_table.hpp"

namespace {
constexpr const char* kTarget = "audio_csv";
constexpr std::uint64_t kSeed = 7;

void check_rows(const std::vector<mf::io::CsvRow>& rows) {
  std::int64_t last = 0;
  for (const auto& r : rows) {
    FUZZ_CHECK(r.line > last, kTarget);
    FUZZ_CHECK(!r.fields.empty(), kTarget);
    last = r.line;
  }
}

void check_sources(const mf::audio::SourceList& s) {
  FUZZ_CHECK(!s.files.empty() && !s.class_names.empty(), kTarget);
  FUZZ_CHECK(std::set<std::string>(s.class_names.begin(), s.class_names.end()).size() == s.class_names.size(),
             kTarget);
  for (const auto& c : s.class_names) FUZZ_CHECK(!c.empty(), kTarget);
  for (std::size_t i = 0; i < s.files.size(); ++i) {
    const auto& f = s.files[i];
    FUZZ_CHECK(!f.path.empty(), kTarget);
    FUZZ_CHECK(i == 0 || s.files[i - 1].path < f.path, kTarget);  // sorted, no duplicate
    FUZZ_CHECK(f.label >= 0 && std::size_t(f.label) < s.class_names.size(), kTarget);
    FUZZ_CHECK(s.has_leak ? (f.leak == 0 || f.leak == 1) : f.leak == -1, kTarget);
  }
}

void check_fractions(const mf::audio::SplitFractions& fr) {
  for (const double v : fr.f) FUZZ_CHECK(std::isfinite(v) && v >= 0, kTarget);
  FUZZ_CHECK(fr.f[0] > 0 && std::abs(fr.f[0] + fr.f[1] + fr.f[2] - 1) <= 1e-6, kTarget);
}

// Every index in [0, n) exactly once, each split ascending.
void check_partition(const std::array<std::vector<std::size_t>, 3>& s, std::size_t n) {
  std::vector<int> seen(n, 0);
  for (const auto& v : s) {
    FUZZ_CHECK(std::is_sorted(v.begin(), v.end()), kTarget);
    for (const std::size_t i : v) {
      FUZZ_CHECK(i < n, kTarget);
      ++seen[i];
    }
  }
  for (const int c : seen) FUZZ_CHECK(c == 1, kTarget);
}

// With the labels as the groups: the files of one group are all in one split.
void check_groups_whole(const std::array<std::vector<std::size_t>, 3>& s,
                        const std::vector<mf::audio::SourceFile>& files) {
  std::vector<int> split_of_label(files.size() + 1, -1);  // labels < number of classes <= files
  for (int k = 0; k < 3; ++k)
    for (const std::size_t i : s[std::size_t(k)]) {
      int& where = split_of_label[std::size_t(files[i].label)];
      FUZZ_CHECK(where == -1 || where == k, kTarget);
      where = k;
    }
}

// The first line, without its line end and a leading '#'.
std::string_view first_line(std::string_view in) {
  in = in.substr(0, in.find('\n'));
  if (!in.empty() && in.back() == '\r') in.remove_suffix(1);
  if (!in.empty() && in.front() == '#') in.remove_prefix(1);
  return in;
}

const std::vector<mf::audio::SourceFile>& fixed_files() {
  static const std::vector<mf::audio::SourceFile> files = {
      {"a.wav", 0, -1}, {"b/c.wav", 1, -1}, {"d.flac", 0, -1}, {"e f.wav", 1, -1}, {"x,y.ogg", 0, -1}};
  return files;
}

// Runs f; an mf::Error is the expected answer to a bad table, anything else aborts.
template <class F>
void guarded(F&& f) {
  try {
    f();
  } catch (const mf::Error&) {
  } catch (...) {
    mf::fuzz::fail_uncaught(kTarget);
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mf::fuzz::quiet();
  const std::string path = mf::fuzz::write_input(data, size, ".csv");
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  mf::audio::SplitFractions fr;  // the default 0.7,0.15,0.15 unless the first line parses
  guarded([&] {
    const mf::audio::SplitFractions parsed = mf::audio::parse_split(first_line(text));
    check_fractions(parsed);
    fr = parsed;
  });
  guarded([&] { check_rows(mf::io::read_csv(path)); });
  guarded([&] {
    const auto s = mf::audio::split_by_groups(fixed_files(), path, fr, kSeed);
    check_partition(s, fixed_files().size());
  });
  guarded([&] {
    const mf::audio::SourceList src = mf::audio::read_sources_csv(path);
    check_sources(src);
    check_partition(mf::audio::split_stratified(src.files, std::int64_t(src.class_names.size()), fr, kSeed),
                    src.files.size());
    // The same table as a groups CSV over its own files (path,label: the label
    // is the group; with a leak column, a column count error).
    guarded([&] {
      const auto s = mf::audio::split_by_groups(src.files, path, fr, kSeed);
      check_partition(s, src.files.size());
      if (!src.has_leak) check_groups_whole(s, src.files);
    });
  });
  return 0;
}
