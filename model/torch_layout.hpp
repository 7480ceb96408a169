// Conversions between melforge's parameter layouts and PyTorch's (the
// reference module in bench/leakcnn_torch.py), for export, import and the
// oracle tests:
//   conv weights: melforge OHWI [Cout, k, k, Cin] <-> PyTorch OIHW [Cout, Cin, k, k]
//   fc.weight:    melforge's columns follow the NHWC flatten (h, w, c);
//                 PyTorch's the NCHW flatten (c, h, w): the columns are permuted
//   everything else is identical.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "engine/tensor.hpp"
#include "model/param_buffer.hpp"

namespace mf::model {

std::vector<float> to_torch_layout(const ModelConfig& cfg, const ParamInfo& p, std::span<const float> ours);
std::vector<float> from_torch_layout(const ModelConfig& cfg, const ParamInfo& p, std::span<const float> torch);

struct NamedArray {
  std::string name;  // PyTorch state_dict name
  Shape shape;       // PyTorch shape
  std::vector<float> values;
};

// Every parameter of `flat` (any buffer of pb's layout, any float dtype, any
// device) in PyTorch's names, shapes and layouts. Synchronous.
std::vector<NamedArray> export_torch(const ParamBuffer& pb, const Tensor& flat);
// Writes the named PyTorch-layout arrays into `flat` (f32, pb's layout, any
// device); every parameter must be present with its PyTorch shape. Synchronous.
void import_torch(const ParamBuffer& pb, Tensor& flat, const std::vector<NamedArray>& arrays);

// The oracle tests' array files (write_arrays, read_arrays): model/torch_layout_lab.hpp.

}  // namespace mf::model
