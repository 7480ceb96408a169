// The binaries as a user runs them: exit codes and messages.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/run_config.hpp"
#include "tests/support/cli.hpp"
#include "tests/support/temp_dir.hpp"

using mf::testing::CliResult;
namespace {
CliResult run(const std::string& args, const char* bin_env = "MELFORGE_BIN") {
  return mf::testing::run_cli(args, bin_env);
}
}  // namespace

TEST_CASE("melforge --help lists the subcommands") {
  const CliResult r = run("--help");
  CHECK(r.code == 0);
  CHECK(r.out.find("smoke") != std::string::npos);
  CHECK(r.out.find("info") != std::string::npos);
}

TEST_CASE("melforge smoke runs on the CPU and checks itself") {
  const CliResult r = run("smoke --device cpu -n 10000");
  CHECK(r.code == 0);
  CHECK(r.out.find("0 mismatches") != std::string::npos);
  CHECK(r.out.find("smoke: OK") != std::string::npos);
}

TEST_CASE("a bad device is an error with a message, not a crash") {
  const CliResult r = run("smoke --device tpu");
  CHECK(r.code == 1);
  CHECK(r.out.find("expected cpu, cuda, cuda:N or auto") != std::string::npos);
}

TEST_CASE("melforge --version names the version, the commit, the build and the libraries found") {
  const CliResult r = run("--version");
  INFO(r.out);
  CHECK(r.code == 0);
  std::istringstream in(r.out);
  std::string first;
  std::getline(in, first);
  CHECK(first == "melforge " MELFORGE_PROJECT_VERSION);  // CMake's PROJECT_VERSION (tests/CMakeLists.txt)
  // The other lines: "label:" padded to one column, then the value.
  std::map<std::string, std::string> value_of;
  for (std::string line; std::getline(in, line);) {
    const std::size_t colon = line.find(':');
    REQUIRE(colon != std::string::npos);
    constexpr std::size_t kValueColumn = 13;
    REQUIRE(line.size() > kValueColumn);
    CHECK(line.find_first_not_of(' ', colon + 1) == kValueColumn);
    value_of[line.substr(0, colon)] = line.substr(kValueColumn);
  }
  for (const char* label : {"commit", "build type", "cuda archs", "cuda", "cudnn", "hdf5", "sndfile", "fftw", "soxr"}) {
    INFO(label);
    CHECK(value_of.count(label) == 1);
  }
  CHECK(value_of.size() == 9);
  CHECK(std::regex_match(value_of["commit"], std::regex("[0-9a-f]{7,}(-dirty)?|unknown")));
#ifdef MELFORGE_NO_CUDA  // the CPU-only build (MELFORGE_CUDA=OFF)
  CHECK(value_of["cuda archs"].starts_with("none: built without CUDA"));
  CHECK(value_of["cuda"].starts_with("built without CUDA: the CPU backend only (for the GPU, rebuild melforge"));
  CHECK(value_of["cudnn"].starts_with("not used"));
#else
  CHECK(std::regex_search(value_of["cuda"], std::regex("^runtime [0-9]+\\.[0-9]+, driver")));
  CHECK(value_of["cudnn"].find("optional") != std::string::npos);
#endif
  CHECK(std::regex_match(value_of["hdf5"], std::regex("[0-9]+\\.[0-9]+\\.[0-9]+")));

  const CliResult info = run("info");
  CHECK(info.code == 0);
  CHECK(info.out.starts_with(first + "\n"));  // the same version line
}

#ifdef MELFORGE_NO_CUDA
// The CPU-only build: no GPU and no melforge-bench; what asks for CUDA is
// refused before anything runs, with how to get the GPU build.
TEST_CASE("a build without CUDA says so, runs on the CPU and refuses --device cuda naming the fix") {
  const CliResult info = run("info");
  INFO(info.out);
  CHECK(info.code == 0);
  CHECK(info.out.find("gpus: none: built without CUDA: the CPU backend only") != std::string::npos);
  CHECK(run("smoke --device auto -n 1000").out.find("smoke: OK") != std::string::npos);

  mf::testing::TempDir d("no_cuda");
  REQUIRE(run("data synth --files 16 --out " + d / "data").code == 0);
  const std::vector<std::string> refused = {
      "smoke --device cuda", "smoke --device cuda:1",
      "train --device cuda --epochs 1 --train " + d / "data/train.h5" + " --out " + d / "run"};
  for (const std::string& cmd : refused) {
    const CliResult r = run(cmd);
    INFO(cmd, "\n", r.out);
    CHECK(r.code == 1);
    CHECK(r.out.find("requested but no GPU is usable: built without CUDA: the CPU backend only") != std::string::npos);
    CHECK(r.out.find("rebuild melforge on a machine with the CUDA toolkit") != std::string::npos);
  }
  CHECK(!std::filesystem::exists(d / "run"));  // refused before the run folder is made
}
#else  // melforge-bench is built with CUDA only
TEST_CASE("melforge-bench without a GPU says so and exits 0") {
  const CliResult r = run("ceilings --no-write", "MELFORGE_BENCH_BIN");
  CHECK(r.code == 0);
  if (r.out.find("no GPU") == std::string::npos) CHECK(r.out.find("GB/s") != std::string::npos);
}

TEST_CASE("melforge-bench conv without a GPU says so and exits 0") {
  const CliResult r = run("conv --no-write --batch 256 --reps 2", "MELFORGE_BENCH_BIN");
  CHECK(r.code == 0);
  if (r.out.find("no GPU") == std::string::npos) CHECK(r.out.find("cudnn us") != std::string::npos);
}
#endif  // MELFORGE_NO_CUDA

namespace {
// The option lines of a --help text as (names, type): "  --batch-size INT=256   Segments ..." gives
// ("--batch-size", "INT=256"); a flag gives an empty type.
std::vector<std::pair<std::string, std::string>> option_lines(const std::string& help) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(help);
  for (std::string line; std::getline(in, line);) {
    std::string_view spec(line);
    if (!spec.starts_with("  -")) continue;
    spec.remove_prefix(2);
    spec = spec.substr(0, spec.find("  "));  // the description starts after two spaces
    const std::size_t space = spec.find(' ');
    out.emplace_back(spec.substr(0, space), space == std::string_view::npos ? "" : spec.substr(space + 1));
  }
  return out;
}
}  // namespace

TEST_CASE("every subcommand's --help shows each option's type, never a bare TEXT") {
  const std::set<std::string> flags = {"-h,--help", "--version", "--verbose", "--fast-dev-run", "--gpu-cache", "--per-segment",
                                       "--no-scan", "--utterances", "--with-frontend"};
  for (const char* sub : {"", "info", "smoke", "data", "data synth", "data inspect", "train", "eval", "predict",
                          "export", "plot"}) {
    const CliResult r = run(std::string(sub) + " --help");
    INFO(sub, "\n", r.out);
    CHECK(r.code == 0);
    CHECK(r.out.find("TEXT") == std::string::npos);
    for (const auto& [names, type] : option_lines(r.out)) {
      INFO(names);
      CHECK((!type.empty() || flags.count(names) == 1));
    }
  }
}

TEST_CASE("train --help shows each flag's type and its configuration default") {
  const CliResult r = run("train --help");
  REQUIRE(r.code == 0);
  std::map<std::string, std::string> type_of;
  for (const auto& [names, type] : option_lines(r.out)) type_of[names] = type;
  // The defaults have one home, model::RunConfig; the help shows them as TYPE=DEFAULT.
  const mf::model::RunConfig defaults;
  std::ostringstream epochs, out;
  REQUIRE(defaults.batch_size == 0);  // 0 is auto: written "auto" wherever a user reads it
  epochs << "INT=" << defaults.epochs;
  out << "DIR=" << defaults.out;
  INFO(r.out);
  CHECK(type_of["--batch-size"] == "auto|INT=auto");
  CHECK(type_of["--epochs"] == epochs.str());
  CHECK(type_of["--lr"].starts_with("FLOAT="));
  CHECK(type_of["--precision"] == "{auto,fp32,bf16,fp16}=auto");
  CHECK(type_of["--device"] == "{auto,cpu,cuda,cuda:N}=auto");
  CHECK(type_of["--train"] == "PATH");
  CHECK(type_of["--out"] == out.str());
  // The configuration keys below the flags show their defaults too.
  CHECK(r.out.find("(default auto)") != std::string::npos);
}
