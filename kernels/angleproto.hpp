// angleproto: the angular prototypical loss of speaker embedding training
// (kernels/ops.hpp has the contract). The helper building the op completes
// this header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/dtype.hpp"

namespace mf::kernels {

struct AngleProtoDims {
  int classes = 2;         // N (classes in the micro-batch)
  int per_class = 2;       // M (consecutive segments per class, >= 2)
  int dim = 1;             // D
  float grad_scale = 1.f;  // 1/k for k accumulated micro-batches
};

}  // namespace mf::kernels
