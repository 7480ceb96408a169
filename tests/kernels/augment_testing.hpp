// Shared by the augment op's suites (test_augment.cpp, test_augment_gpu.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/tensor.hpp"
#include "kernels/ops.hpp"

namespace mf::testing {

// The op's CPU twin on a tensor holding x (converted to t), counter `ctr`;
// returns the result as floats.
inline std::vector<float> augment_on_cpu(const kernels::AugmentArgs& d, DType t, const std::vector<float>& x,
                                         const std::vector<float>& noise, std::int32_t ctr) {
  Tensor tx = Tensor::from_floats(x, {d.batch, d.mels, d.frames}, t);
  const Tensor tn = noise.empty() ? Tensor() : Tensor::from_floats(noise, {std::int64_t(noise.size())});
  ops::augment(tx, &ctr, d, noise.empty() ? nullptr : &tn);
  return tx.to_floats();
}

}  // namespace mf::testing
