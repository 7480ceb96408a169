// The binaries as a user runs them: exit codes and messages.
#include <doctest/doctest.h>

#include <string>

#include "tests/support/cli.hpp"

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
