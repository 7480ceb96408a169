// Running melforge's binaries as a user does, from tests: exit code and the
// combined stdout+stderr. The binary's path comes from an environment variable
// that tests/CMakeLists.txt sets (MELFORGE_BIN, MELFORGE_BENCH_BIN).
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace mf::testing {

struct CliResult {
  int code;
  std::string out;
};

// Runs a shell command line; a signal death reads as 128 + the signal.
inline CliResult sh(const std::string& cmd) {
  CliResult r{0, {}};
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), int(buf.size()), p)) r.out += buf.data();
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

inline std::string binary(const char* env_var = "MELFORGE_BIN") {
  const char* b = std::getenv(env_var);
  REQUIRE_MESSAGE(b != nullptr, env_var, " is not set (run the test through ctest)");
  return b;
}

// `env` is prepended (e.g. "MELFORGE_LOG=debug").
inline CliResult run_cli(const std::string& args, const char* env_var = "MELFORGE_BIN", const std::string& env = "") {
  return sh(env + " " + binary(env_var) + " " + args);
}

inline bool has(const CliResult& r, const std::string& s) { return r.out.find(s) != std::string::npos; }

}  // namespace mf::testing
