// Splitting a dataset's files into train / val / test: by file, stratified per
// class and seeded (`--split 0.7,0.15,0.15 --seed S`), or by groups that must
// not cross splits (`--split-by FILE.csv`: speakers, sites, recording days).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

#include "audio/source_files.hpp"

namespace mf::audio {

inline constexpr std::array<const char*, 3> kSplitNames = {"train", "val", "test"};

struct SplitFractions {
  std::array<double, 3> f{0.7, 0.15, 0.15};  // train, val, test; >= 0, sum 1 (within 1e-6)
};
// "0.7,0.15,0.15" (three numbers >= 0 summing to 1). Throws saying what was found.
SplitFractions parse_split(std::string_view text);

// Indices into `files` per split, each ascending. Per class: the class's files
// are shuffled (Fisher-Yates on splitmix64 from the seed and the class index),
// then val gets round(n * f_val) and test round(n * f_test) of them (at least
// one each when the fraction is > 0 and the class has >= 3 files), train the
// rest. The same seed and files give the same split on any machine.
std::array<std::vector<std::size_t>, 3> split_stratified(const std::vector<SourceFile>& files,
                                                         std::int64_t num_classes, const SplitFractions& fr,
                                                         std::uint64_t seed);

// A CSV of path,group rows (optional header "path,group"). When every group
// is train, val or test, that is the assignment. Otherwise whole groups are
// assigned: groups in a seeded random order, each to the split furthest
// below its target share of files. Every file must be listed; a listed path
// that is not among the files is an error too (a typo would silently move a
// group).
std::array<std::vector<std::size_t>, 3> split_by_groups(const std::vector<SourceFile>& files,
                                                        const std::filesystem::path& csv, const SplitFractions& fr,
                                                        std::uint64_t seed);

}  // namespace mf::audio
