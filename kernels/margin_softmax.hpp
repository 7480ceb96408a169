// margin_softmax: the cosine-margin softmax losses of speaker embedding
// training (AM-softmax, AAM-softmax), fused: normalisation, cosine logits, the
// margin, cross-entropy, gradients and metrics (kernels/ops.hpp has the
// contract). The helper building the op completes this header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/dtype.hpp"

namespace mf::kernels {

enum class MarginType : std::uint8_t { am, aam };

struct MarginSoftmaxDims {
  std::int64_t batch = 1;  // B
  int dim = 1;             // D
  int classes = 2;         // C
  MarginType type = MarginType::aam;
  float scale = 30.f;      // s
  float margin = 0.2f;     // m
  float grad_scale = 1.f;  // 1/k for k accumulated micro-batches
};

}  // namespace mf::kernels
