// conv_relu_pool variant 5, "resident": forward and dx. (Being written: until
// then both launchers refuse every shape, so the dispatcher falls back to mma.)
#include <cuda_runtime.h>

#include "kernels/conv_relu_pool_cuda.cuh"

namespace mf::kernels {

template <class T>
bool resident_forward(const ConvReluPoolDims&, const void*, const void*, const void*, void*, std::uint8_t*,
                      cudaStream_t) {
  return false;
}

template <class T>
bool resident_dx(const ConvReluPoolDims&, const void*, const void*, const std::uint8_t*, void*, cudaStream_t) {
  return false;
}

#define MF_INSTANTIATE(T)                                                                                  \
  template bool resident_forward<T>(const ConvReluPoolDims&, const void*, const void*, const void*, void*, \
                                    std::uint8_t*, cudaStream_t);                                         \
  template bool resident_dx<T>(const ConvReluPoolDims&, const void*, const void*, const std::uint8_t*, void*, \
                               cudaStream_t);
MF_INSTANTIATE(float)
MF_INSTANTIATE(f16)
MF_INSTANTIATE(bf16)
#undef MF_INSTANTIATE

}  // namespace mf::kernels
