// melforge-bench suites; each bench_*.cpp registers one subcommand.
#pragma once

#include <CLI/CLI.hpp>

namespace mf::bench {

struct Common {
  std::string out_dir = "bench/results";
  bool no_write = false;
};
Common& common();

void register_ceilings(CLI::App& app);
void register_step(CLI::App& app);  // `step` and `adamw` (bench_step.cpp)
void register_conv(CLI::App& app);
void register_reader(CLI::App& app);
void register_crops(CLI::App& app);  // random crops of whole utterances vs fixed segments
void register_verify(CLI::App& app);  // speaker verification: extraction and scoring
void register_logmel(CLI::App& app);  // the audio front-end's log-mel op
void register_allreduce(CLI::App& app);  // data parallelism's collectives (MPI)

}  // namespace mf::bench
