// The PyTorch oracle tests' array files, for the tests only
// (tests/model/step_fixture.hpp, test_cnn_stack.cpp, test_metric_losses.cpp
// write what tests/oracle/*.py read back with their own reader). Defined in
// model/torch_layout.cpp beside export_torch, whose arrays they hold.
#pragma once

#include <string>
#include <vector>

#include "model/torch_layout.hpp"

namespace mf::model {

// Raw little-endian f32 files DIR/<name>.bin plus DIR/manifest.txt ("name d0 d1 ...").
void write_arrays(const std::string& dir, const std::vector<NamedArray>& arrays);
std::vector<NamedArray> read_arrays(const std::string& dir);

}  // namespace mf::model
