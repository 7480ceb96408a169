// conv_relu_pool variant 2 (tiled, shared memory). Placeholder: not yet
// implemented, so the launcher falls back to the direct kernels.
#include "kernels/conv_relu_pool_cuda.cuh"

namespace mf::kernels {

template <class T>
bool tiled_forward(const ConvReluPoolDims&, const void*, const void*, const void*, void*, std::uint8_t*,
                   cudaStream_t) {
  return false;
}
template <class T>
bool tiled_backward(const ConvReluPoolDims&, const void*, const void*, const void*, const std::uint8_t*,
                    void*, float*, float*, cudaStream_t) {
  return false;
}

#define MF_INSTANTIATE(T)                                                                              \
  template bool tiled_forward<T>(const ConvReluPoolDims&, const void*, const void*, const void*, void*,  \
                                 std::uint8_t*, cudaStream_t);                                          \
  template bool tiled_backward<T>(const ConvReluPoolDims&, const void*, const void*, const void*,        \
                                  const std::uint8_t*, void*, float*, float*, cudaStream_t);
MF_INSTANTIATE(float)
MF_INSTANTIATE(f16)
MF_INSTANTIATE(bf16)
#undef MF_INSTANTIATE

}  // namespace mf::kernels
