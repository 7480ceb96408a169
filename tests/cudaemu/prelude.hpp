// Force-included (-include) into every .cu translation unit of the emulated
// build (MELFORGE_CUDA_EMU=ON), after which the file compiles as host C++:
// CUDA's qualifiers, built-in variables, intrinsics and the <<<...>>> launch
// (rewritten by tests/cudaemu/rewrite_cu.py) map onto tests/cudaemu/.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tests/cudaemu/emu_async.hpp"
#include "tests/cudaemu/emu_core.hpp"
#include "tests/cudaemu/emu_launch.hpp"
#include "tests/cudaemu/emu_mma.hpp"

// __shared__ variables are block-wide: static storage, valid because the
// emulator runs one block at a time and serializes launches.
#undef __shared__
#define __shared__ static

#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

using std::isfinite;
using std::isinf;
using std::isnan;

#define threadIdx (::mf_emu::thread_idx())
#define blockIdx (::mf_emu::block_idx())
#define blockDim (::mf_emu::block_dim())
#define gridDim (::mf_emu::grid_dim())
#ifndef warpSize
#define warpSize 32
#endif

#define __syncthreads() ::mf_emu::syncthreads(__FILE__, __LINE__)
#define __syncwarp(...) ::mf_emu::syncwarp(__FILE__, __LINE__, ##__VA_ARGS__)
#define __shfl_xor_sync(...) ::mf_emu::shfl_xor(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) ::mf_emu::shfl_down(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) ::mf_emu::shfl_up(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_sync(...) ::mf_emu::shfl_idx(__FILE__, __LINE__, __VA_ARGS__)
#define __trap() ::mf_emu::kernel_fault("__trap()", __FILE__, __LINE__)

namespace mf_emu {

inline void syncwarp(const char* file, int line, unsigned mask = 0xffffffffu) {
  int dummy = 0, all[32];
  warp_exchange(mask, &dummy, sizeof dummy, all, file, line);
}

template <class T, class Pick>
T shfl_impl(const char* file, int line, unsigned mask, T v, Pick pick, int width) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 16, "shuffle of a type wider than 16 bytes");
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0) kernel_fault("shuffle width must be a power of two <= 32", file, line);
  T all[32];
  warp_exchange(mask, &v, sizeof(T), all, file, line);
  const int lane = lane_id();
  const int base = lane & ~(width - 1);
  const int src = pick(lane - base);  // index within the segment, or -1: keep own value
  if (src < 0 || src >= width) return v;
  if ((mask & (1u << (base + src))) == 0) kernel_fault("shuffle reads a lane outside the mask", file, line);
  return all[base + src];
}

template <class T>
T shfl_xor(const char* file, int line, unsigned mask, T v, int lane_mask, int width = 32) {
  return shfl_impl(file, line, mask, v, [&](int l) { return l ^ lane_mask; }, width);
}
template <class T>
T shfl_down(const char* file, int line, unsigned mask, T v, unsigned delta, int width = 32) {
  return shfl_impl(file, line, mask, v, [&](int l) { return l + int(delta); }, width);
}
template <class T>
T shfl_up(const char* file, int line, unsigned mask, T v, unsigned delta, int width = 32) {
  return shfl_impl(file, line, mask, v, [&](int l) { return l - int(delta); }, width);
}
template <class T>
T shfl_idx(const char* file, int line, unsigned mask, T v, int src, int width = 32) {
  return shfl_impl(file, line, mask, v, [&](int) { return src & (width - 1); }, width);
}

template <class F>
struct Launcher {
  LaunchConfig cfg;
  const char* name;
  F call;            // [](auto... a) { kernel(a...); }
  const void* func;  // the kernel's address, or null (see MF_EMU_KERNEL_ADDRESS)
  template <class... A>
  void operator()(A&&... a) const {
    std::tuple<std::decay_t<A>...> args(std::forward<A>(a)...);  // copied at launch, like kernel parameters
    auto c = call;
    submit_launch(cfg, [c, args]() { std::apply(c, args); }, name, func);
  }
};

template <class F>
Launcher<F> launch(const LaunchConfig& cfg, const char* name, F call, const void* func = nullptr) {
  return Launcher<F>{cfg, name, call, func};
}

template <class T, class U>
struct DependentType {
  using type = U;
};

}  // namespace mf_emu

// The address of the kernel a launch names, as cudaFuncSetAttribute(kernel, ...)
// sees it: &kernel when that names one function (a plain kernel, or a template
// with all its arguments given), else nullptr (an overload set, or a template
// whose arguments the launch deduces). The requires-expression inside a
// template lambda, with a dependent target type, turns "cannot resolve the
// address" into false instead of an error (GCC and Clang).
#define MF_EMU_KERNEL_ADDRESS(...)                                                                                \
  ([]<class MfEmuT = void>() -> const void* {                                                                     \
    if constexpr (requires { reinterpret_cast<typename ::mf_emu::DependentType<MfEmuT, const void*>::type>(&__VA_ARGS__); }) \
      return reinterpret_cast<typename ::mf_emu::DependentType<MfEmuT, const void*>::type>(&__VA_ARGS__);         \
    else                                                                                                          \
      return nullptr;                                                                                             \
  }())

namespace mf_emu {

}  // namespace mf_emu

// The C++ overload cuda_runtime.h declares only for nvcc (__CUDACC__): a
// kernel passed as itself, not as const void*.
template <class T>
cudaError_t cudaFuncSetAttribute(T* func, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(func), attr, value);
}

template <class T>
T __ldg(const T* p) {
  return *p;
}

template <class T>
T atomicAdd(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_add(v);
}
template <class T>
T atomicMax(T* p, T v) {
  std::atomic_ref<T> r(*p);
  T old = r.load();
  while (old < v && !r.compare_exchange_weak(old, v)) {
  }
  return old;
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline float __int_as_float(int u) { return std::bit_cast<float>(u); }
inline int __float_as_int(float f) { return std::bit_cast<int>(f); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline int __popc(unsigned v) { return std::popcount(v); }
inline int __clz(unsigned v) { return v == 0 ? 32 : std::countl_zero(v); }
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((std::uint64_t(a) * b) >> 32); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
