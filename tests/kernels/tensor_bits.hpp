// Tensors in the op suites compared by their bytes (a rerun, another thread
// count, in place vs out of place, a CPU twin that must give the same bits),
// and outputs poisoned with NaN before a run so that every element the op
// must write is seen to be written.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "engine/tensor.hpp"

namespace mf::testing {

// t's bytes; a device tensor is copied to the host first (synchronously).
inline std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  const Tensor h = t.is_cuda() ? t.to(Device::cpu()) : t;
  const auto* p = static_cast<const std::uint8_t*>(h.raw());
  return {p, p + h.nbytes()};
}

// The same size and the same bytes (NaN payloads included), on any devices.
inline bool same_bytes(const Tensor& a, const Tensor& b) { return bytes_of(a) == bytes_of(b); }

// An output tensor with every byte 0xff: NaN in f32, bf16 and f16, so a value
// the op leaves unwritten shows up in any comparison. On a device, the fill
// is ordered on `stream`.
inline Tensor poisoned(const Shape& shape, DType dtype, Device device = Device::cpu(), Layout layout = Layout::plain,
                       cudaStream_t stream = nullptr) {
  Tensor r = Tensor::empty(shape, dtype, device, layout, stream);
  r.fill_bytes(0xff, stream);
  return r;
}

}  // namespace mf::testing
