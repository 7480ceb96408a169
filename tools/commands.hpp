// Subcommands of the `melforge` binary. Each file cmd_*.cpp registers one.
#pragma once

#include <CLI/CLI.hpp>

namespace mf::cli {

void register_info(CLI::App& app);
void register_smoke(CLI::App& app);
void register_data(CLI::App& app);
// `data build` (cmd_data_build.cpp), under `data`
void register_data_build(CLI::App& data);
// train, eval, predict, plot (cmd_train.cpp)
void register_trainer(CLI::App& app);
// export: safetensors for PyTorch, ONNX for everything else (cmd_export.cpp)
void register_export(CLI::App& app);
// embed, verify (cmd_verify.cpp)
void register_verification(CLI::App& app);
// `data trials` (cmd_verify.cpp), under `data`
void register_data_trials(CLI::App& data);

}  // namespace mf::cli
