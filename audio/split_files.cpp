#include "audio/split_files.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <string>

#include "engine/counter_rng.hpp"
#include "engine/error.hpp"
#include "io/csv_table.hpp"

namespace fs = std::filesystem;

namespace mf::audio {

namespace {
// Fisher-Yates with splitmix64 (std::shuffle's algorithm differs between
// standard libraries, and a split must not).
template <class T> void seeded_shuffle(std::vector<T>& v, std::uint64_t state) {
  for (std::size_t i = v.size(); i > 1; --i) {
    const auto j = std::size_t(unit_double(splitmix64_next(state)) * double(i));
    std::swap(v[i - 1], v[std::min(j, i - 1)]);
  }
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string{} : s.substr(b, e - b + 1);
}
}  // namespace

SplitFractions parse_split(std::string_view text) {
  SplitFractions fr;
  std::size_t pos = 0;
  for (int k = 0; k < 3; ++k) {
    const std::size_t comma = text.find(',', pos);
    const std::string part = trim(std::string(text.substr(pos, comma == std::string_view::npos ? text.npos : comma - pos)));
    double v = -1;
    const auto r = std::from_chars(part.data(), part.data() + part.size(), v);
    MF_CHECK(!part.empty() && r.ec == std::errc{} && r.ptr == part.data() + part.size() && std::isfinite(v) && v >= 0,
             "--split '{}': expected three fractions >= 0 for train,val,test (e.g. 0.7,0.15,0.15); '{}' is not one",
             text, part);
    fr.f[std::size_t(k)] = v;
    MF_CHECK((k < 2) == (comma != std::string_view::npos),
             "--split '{}': expected exactly three fractions (train,val,test)", text);
    pos = comma + 1;
  }
  const double sum = fr.f[0] + fr.f[1] + fr.f[2];
  MF_CHECK(std::abs(sum - 1) <= 1e-6, "--split '{}': the fractions must sum to 1, found {}", text, sum);
  MF_CHECK(fr.f[0] > 0, "--split '{}': the training fraction must be > 0", text);
  return fr;
}

std::array<std::vector<std::size_t>, 3> split_stratified(const std::vector<SourceFile>& files,
                                                         std::int64_t num_classes, const SplitFractions& fr,
                                                         std::uint64_t seed) {
  std::array<std::vector<std::size_t>, 3> out;
  for (std::int64_t c = 0; c < num_classes; ++c) {
    std::vector<std::size_t> idx;
    for (std::size_t i = 0; i < files.size(); ++i)
      if (files[i].label == c) idx.push_back(i);
    seeded_shuffle(idx, splitmix64_hash(seed ^ splitmix64_hash(std::uint64_t(c) + 1)));
    const auto n = std::int64_t(idx.size());
    std::int64_t take[3] = {0, 0, 0};
    for (int k = 1; k < 3; ++k) {
      take[k] = std::llround(double(n) * fr.f[std::size_t(k)]);
      if (fr.f[std::size_t(k)] > 0 && n >= 3) take[k] = std::max<std::int64_t>(take[k], 1);
    }
    take[2] = std::min(take[2], n - take[1]);
    take[0] = n - take[1] - take[2];
    std::size_t p = 0;
    for (int k : {1, 2, 0})
      for (std::int64_t j = 0; j < take[k]; ++j) out[std::size_t(k)].push_back(idx[p++]);
  }
  for (auto& v : out) std::sort(v.begin(), v.end());
  return out;
}

std::array<std::vector<std::size_t>, 3> split_by_groups(const std::vector<SourceFile>& files, const fs::path& csv,
                                                        const SplitFractions& fr, std::uint64_t seed) {
  const auto rows = io::read_csv(csv);
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < files.size(); ++i) index[files[i].path] = i;
  std::vector<std::string> group(files.size());
  std::vector<bool> listed(files.size(), false);
  bool explicit_split = true;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto& f = rows[r].fields;
    if (r == 0 && io::is_header(rows[r], "path")) continue;
    MF_CHECK(f.size() == 2, "--split-by {}: line {}: expected 2 columns (path,group), found {}", csv.string(),
             rows[r].line, f.size());
    const std::string path = fs::path(trim(f[0])).lexically_normal().generic_string();
    const auto it = index.find(path);
    MF_CHECK(it != index.end(), "--split-by {}: line {}: {} is not one of the dataset's audio files", csv.string(),
             rows[r].line, path);
    MF_CHECK(!listed[it->second], "--split-by {}: line {}: {} is listed twice", csv.string(), rows[r].line, path);
    listed[it->second] = true;
    group[it->second] = trim(f[1]);
    const auto& g = group[it->second];
    explicit_split = explicit_split && (g == "train" || g == "val" || g == "test");
  }
  for (std::size_t i = 0; i < files.size(); ++i)
    MF_CHECK(listed[i], "--split-by {}: {} is not listed (every audio file needs a group)", csv.string(),
             files[i].path);
  std::array<std::vector<std::size_t>, 3> out;
  if (explicit_split) {
    for (std::size_t i = 0; i < files.size(); ++i)
      out[group[i] == "train" ? 0 : group[i] == "val" ? 1 : 2].push_back(i);
    return out;
  }
  std::map<std::string, std::vector<std::size_t>> members;
  for (std::size_t i = 0; i < files.size(); ++i) members[group[i]].push_back(i);
  std::vector<std::string> order;
  for (const auto& [g, m] : members) order.push_back(g);
  seeded_shuffle(order, splitmix64_hash(seed));
  const double total = double(files.size());
  double have[3] = {0, 0, 0};
  for (const auto& g : order) {
    int best = 0;
    double best_gap = -1e300;
    for (int k = 0; k < 3; ++k) {
      if (fr.f[std::size_t(k)] <= 0) continue;
      const double gap = fr.f[std::size_t(k)] - have[k] / total;  // furthest below its share
      if (gap > best_gap) best_gap = gap, best = k;
    }
    for (auto i : members[g]) out[std::size_t(best)].push_back(i);
    have[best] += double(members[g].size());
  }
  for (auto& v : out) std::sort(v.begin(), v.end());
  return out;
}

}  // namespace mf::audio
