// ReLU as the ops' epilogues apply it (conv2d aside, which masks v <= 0):
// PyTorch's relu, which keeps NaN. One source for the CPU twins and the
// CUDA kernels (MF_HOST_DEVICE), so both round the same way.
#pragma once

#include "engine/host_device.hpp"

namespace mf::kernels {

// v where v > 0 or v is NaN, else +0 (so -0 gives +0).
MF_HOST_DEVICE_INLINE float relu_keep_nan(float v) { return (v > 0.f || v != v) ? v : 0.f; }

}  // namespace mf::kernels
