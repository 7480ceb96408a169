// Internal to the emulator: run one launch's grid (called by the runtime,
// with the launch lock held).
#pragma once

#include <functional>

#include "tests/cudaemu/emu_core.hpp"

namespace mf_emu {

void run_grid(const Idx3& grid, const Idx3& block, const std::function<void()>& body, const char* kernel);

}  // namespace mf_emu
