// Device-side helpers shared by the CUDA kernels: the mapping from melforge's
// host storage types (engine/dtype.hpp: mf::f16, mf::bf16) to CUDA's device
// types (__half, __nv_bfloat16), and float load/store for each.
//   device_t<T>     the device type a kernel instantiates for host type T;
//   load_f32(v)     v widened to f32 (exact for f16/bf16/u8, i32 rounds above
//                   2^24);
//   store_f32<T>(v) v rounded once to T (nearest even for f16/bf16, C++'s
//                   truncation for i32/u8).
// The kernels compute in f32 and read and write 16-bit storage through these
// (widen, compute in f32, round once per stored value).
// Launch helpers are in kernels/launch.cuh, reductions in block_reduce.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "engine/dtype.hpp"

namespace mf::cuda {

template <class T> struct device_type { using type = T; };
template <> struct device_type<mf::f16> { using type = __half; };
template <> struct device_type<mf::bf16> { using type = __nv_bfloat16; };
template <class T> using device_t = typename device_type<T>::type;

__device__ __forceinline__ float load_f32(float v) { return v; }
__device__ __forceinline__ float load_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float load_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float load_f32(std::int32_t v) { return float(v); }
__device__ __forceinline__ float load_f32(std::uint8_t v) { return float(v); }

template <class T> __device__ __forceinline__ T store_f32(float v);
template <> __device__ __forceinline__ float store_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half store_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 store_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ std::int32_t store_f32<std::int32_t>(float v) {
  return std::int32_t(v);
}
template <> __device__ __forceinline__ std::uint8_t store_f32<std::uint8_t>(float v) {
  return std::uint8_t(v);
}

}  // namespace mf::cuda
