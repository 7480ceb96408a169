// The parameters of a CNN stack (model.arch = cnn), in the order and with the
// names of the PyTorch module bench/cnn_stack_torch.py builds from the same
// layers (its state_dict order), each with melforge's and PyTorch's shapes:
//   conv i       layers.i.conv.weight [Cout, k, k, Cin] (torch [Cout, Cin, k, k]),
//                layers.i.conv.bias, layers.i.bn.{weight, bias, running_mean, running_var}
//   residual i   layers.i.conv1.weight, layers.i.bn1.*, layers.i.conv2.weight,
//                layers.i.bn2.*, layers.i.se.fc1.{weight, bias}, layers.i.se.fc2.*,
//                layers.i.downsample.0.weight (1x1), layers.i.downsample.1.* (BN)
//   attentive i  layers.i.linear.{weight [A, C], bias [A]}, layers.i.attention [A] (torch [A, 1])
//   dense i      layers.i.fc.{weight [units, F], bias}: F in NHWC flatten order
//                (the module flattens NHWC too, so no permutation)
// (the embedding and the heads follow: model/param_buffer.hpp)
// Batch norm's running statistics are kept with the parameters (ParamKind
// running_mean / running_var): never trained (their gradient stays zero, so
// AdamW leaves them), updated by the batch-norm kernels in the f32 master
// copy, and saved, restored and exported with everything else.
#pragma once

#include <vector>

#include "model/model_config.hpp"
#include "model/param_buffer.hpp"

namespace mf::model {

// Name, kind, shapes and fan-in of each parameter of the layers (offsets
// unset; the embedding and heads not included).
std::vector<ParamInfo> cnn_param_specs(const ModelConfig& cfg);

}  // namespace mf::model
