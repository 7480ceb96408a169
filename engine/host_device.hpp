// MF_HOST_DEVICE: marks a function that one source compiles for both the CPU
// (C++ compilers, the CPU twins) and the GPU (nvcc), so the twin and the
// kernel run the same arithmetic. Outside nvcc it expands to nothing.
// MF_HOST_DEVICE_INLINE: the same, for a small function every call site should
// inline (nvcc: __forceinline__; elsewhere plain `inline`, left to the
// optimiser).
#pragma once

#ifdef __CUDACC__
#define MF_HOST_DEVICE __host__ __device__
#define MF_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#else
#define MF_HOST_DEVICE
#define MF_HOST_DEVICE_INLINE inline
#endif
