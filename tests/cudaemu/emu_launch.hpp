// The launch interface between rewritten .cu files (prelude.hpp) and the
// emulator's runtime (emu_runtime.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <type_traits>

namespace mf_emu {

// ---- launches: kernel<<<cfg>>>(args) becomes
//      ::mf_emu::launch(::mf_emu::LaunchConfig(cfg), "kernel", [](auto... a) { kernel(a...); },
//                       MF_EMU_KERNEL_ADDRESS(kernel))(args)
// (prelude.hpp); the address identifies the kernel for its function attributes
// (cudaFuncSetAttribute), as the real runtime's function pointer does.
inline dim3 to_dim3(dim3 d) { return d; }
template <class I, class = std::enable_if_t<std::is_integral_v<I>>>
dim3 to_dim3(I v) {
  return dim3(unsigned(v));
}

struct LaunchConfig {
  dim3 grid, block;
  std::size_t smem = 0;
  cudaStream_t stream = nullptr;
  template <class G, class B>
  LaunchConfig(G g, B b, std::size_t s = 0, cudaStream_t st = nullptr)
      : grid(to_dim3(g)), block(to_dim3(b)), smem(s), stream(st) {}
};

// Defined by the runtime (emu_runtime.cpp): checks the configuration like the
// driver does, then runs the grid now or records it into a stream capture.
// `func` is the kernel's address, or null when the launch named an overload
// set or a template whose arguments are deduced (then only the defaults apply:
// at most 48 KiB of dynamic shared memory).
void submit_launch(const LaunchConfig& cfg, std::function<void()> body, const char* name, const void* func);
// Host-side work ordered on a stream like a kernel (the emulated cuBLASLt's
// matmuls): runs now, or is recorded while the stream is being captured.
cudaError_t enqueue_host_work(cudaStream_t stream, std::function<void()> fn, const char* what);
// Base of the dynamic shared memory of the running block (extern __shared__).
void* dynamic_smem();

}  // namespace mf_emu
