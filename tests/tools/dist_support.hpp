// What the data-parallel CLI suites share (test_train_cli_dist on CPUs,
// test_train_cli_dist_gpu on GPUs): the mpirun command line and the
// bit-for-bit comparison of two checkpoints' training state.
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "model/checkpoint.hpp"
#include "tests/support/cli.hpp"

namespace mf::testing {

// Whether the launcher ctest names exists here: a build carried to another
// machine (tools/carry-for-gpu.sh) may find none there.
inline bool mpirun_available() {
  const char* m = std::getenv("MELFORGE_MPIRUN");
  return m != nullptr && ::access(m, X_OK) == 0;
}

// `mpirun -np N melforge` on loopback, oversubscribed (more processes than
// cores on CI), as root (CI runs as root).
inline std::string mpirun(int np) {
  const char* m = std::getenv("MELFORGE_MPIRUN");
  REQUIRE_MESSAGE(m != nullptr, "MELFORGE_MPIRUN is not set (run the test through ctest)");
  return fmt::format("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp "
                     "OMPI_MCA_btl_tcp_if_include=lo {} -np {} --oversubscribe {}", m, np, binary());
}

// Every array of two checkpoints (master, AdamW moments, the optimizer
// state) bit for bit, and their step and sample counts.
inline void check_same_state(const std::filesystem::path& a, const std::filesystem::path& b) {
  const model::Checkpoint x = model::read_checkpoint(a), y = model::read_checkpoint(b);
  for (const char* name : {"master", "adam_m", "adam_v", "adamw_state"}) {
    CAPTURE(name);
    REQUIRE(x.array(name).bytes.size() == y.array(name).bytes.size());
    CHECK(std::memcmp(x.array(name).bytes.data(), y.array(name).bytes.data(), x.array(name).bytes.size()) == 0);
  }
  CHECK(x.get_int("step") == y.get_int("step"));
  CHECK(x.get_int("samples") == y.get_int("samples"));
}

}  // namespace mf::testing
