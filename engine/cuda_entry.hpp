// MF_CUDA_ENTRY(f): f, a function of the CUDA backend (a kernel's host entry
// point, defined in a .cu file), where the CPU backend's code names it: a
// dispatch `x.is_cuda() ? MF_CUDA_ENTRY(kernels::op_cuda) : kernels::op_cpu`,
// or a call on a device-only path. In the CPU-only build (MELFORGE_CUDA=OFF,
// docs/decisions.md "Build") no .cu file is compiled, so f has no definition:
// there the macro gives a function of f's type that throws mf::Error saying
// the build has no CUDA. It is never reached (no tensor lives on a GPU there:
// parse_device refuses cuda first); f itself is not referenced, so the link
// needs no stub. Elsewhere it is f, unchanged.
#pragma once

#ifdef MELFORGE_NO_CUDA
namespace mf::detail {
[[noreturn]] void throw_no_cuda();  // engine/device.cpp
template <class F>
struct NoCudaEntry;
template <class R, class... Args>
struct NoCudaEntry<R(Args...)> {
  static R call(Args...) { throw_no_cuda(); }
};
}  // namespace mf::detail
#define MF_CUDA_ENTRY(f) (&::mf::detail::NoCudaEntry<decltype(f)>::call)
#else
#define MF_CUDA_ENTRY(f) (f)
#endif
