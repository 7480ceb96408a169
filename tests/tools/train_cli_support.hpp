// Helpers of the `melforge train` CLI tests (CPU and GPU suites): running the
// binary, temporary folders, an easy file-structured dataset, JSON/CSV readers.
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "io/h5_writer.hpp"
#include "tests/support/cli.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace train_cli {

using Result = mf::testing::CliResult;
using mf::testing::has;
using mf::testing::sh;
inline std::string bin() { return mf::testing::binary(); }
inline Result run(const std::string& args, const std::string& env = "") {
  return mf::testing::run_cli(args, "MELFORGE_BIN", env);
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / fmt::format("mf_train_{}_{}", name, ::getpid());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& s) const { return (path / s).string(); }
};

// An easy file-structured set: class 0 noise, class c > 0 noise plus a band of
// rows at a class-specific height (classes 1 and 2); a quarter of the short
// segments of leak files carry no band (intermittent), so files are easier
// than segments. As many classes as class_names (2 or 3).
// class_names: the default names make leak data (class 0 "normal"); any names
// without "normal" make data without a leak target (digits, words).
// file_names: the /files dataset (one source path per file), or none.
inline void write_easy(const std::string& path, std::int64_t files, std::uint64_t seed, int nan_file = -1,
                       std::vector<std::string> class_names = {"normal", "leak_low", "leak_high"},
                       std::vector<std::string> file_names = {}) {
  constexpr std::int64_t L = 2, S = 3, M = 16, T = 16;
  const int C = int(class_names.size());
  mf::io::WriteSpec spec;
  spec.shape = {files, L, S, M, T};
  spec.dtype = mf::DType::f16;
  spec.class_names = std::move(class_names);
  spec.files = std::move(file_names);
  std::vector<float> v(std::size_t(files * L * S * M * T));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.f, 0.5f);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (std::int64_t f = 0; f < files; ++f) {
    const int c = int(f % C);
    spec.labels.push_back(c);
    for (std::int64_t seg = 0; seg < L * S; ++seg) {
      const bool band = c > 0 && u(rng) > 0.25f;
      for (std::int64_t m = 0; m < M; ++m)
        for (std::int64_t t = 0; t < T; ++t) {
          float x = noise(rng);
          if (band && m >= (c == 1 ? 3 : 10) && m < (c == 1 ? 6 : 13)) x += 1.5f;
          v[std::size_t(((f * L * S + seg) * M + m) * T + t)] = x;
        }
    }
  }
  if (nan_file >= 0) v[std::size_t(nan_file * L * S * M * T + 5)] = NAN;
  mf::io::H5Writer w(path, spec);
  w.write_segments(0, files * L * S, v.data());
  w.close();
}

// Small model, fast on 2 cores.
inline const std::string kModel =
    "--set model.channels=[4,8] --set model.pools=[2,2] --set model.dense=16 --batch-size 16 --lr 0.01 "
    "--set optim.warmup_steps=3 --progress plain --set log.interval=4 --device cpu";

inline json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

inline std::vector<json> read_lines(const std::string& path) {
  std::vector<json> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

inline std::vector<std::string> csv_rows(const std::string& path) {
  std::vector<std::string> rows;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) rows.push_back(line);
  return rows;
}

}  // namespace train_cli
using namespace train_cli;
