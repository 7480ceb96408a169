// The gradient routed through the fused ReLU + max-pool, 8 channels at a time
// (included by .cu files only). The forward kept one code byte per pooled
// output: the winning position in its p x p window, or kNoGrad. A conv pixel
// at window position `pos` receives dy where its channel's code equals pos,
// and 0 elsewhere (kNoGrad never equals a position).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mf::kernels {

// dy: 8 consecutive 16-bit channels (bf16/f16 bits, channel 2j in the low half
// of word j); code: their 8 code bytes (channel i in byte i). Returns dy with
// every channel whose code is not `pos` set to +0.
__device__ __forceinline__ uint4 route8(uint4 dy, uint2 code, unsigned pos) {
  std::uint32_t w[4] = {dy.x, dy.y, dy.z, dy.w};
#pragma unroll
  for (int h = 0; h < 8; ++h) {
    const unsigned byte = ((h < 4 ? code.x : code.y) >> (8 * (h & 3))) & 0xffu;
    if (byte != pos) w[h >> 1] &= (h & 1) ? 0x0000ffffu : 0xffff0000u;
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

}  // namespace mf::kernels
