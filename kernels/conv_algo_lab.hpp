// The conv kernels' variant selection from code, for the benchmarks and the
// tests only (bench/bench_conv.cpp, tests/kernels/test_conv2d_gpu.cpp,
// tests/kernels/test_conv_relu_pool_gpu.cpp): they pin a variant, name it and
// ask which one a shape runs. The library reads the choice (conv2d_algo(),
// conv_relu_pool_algo() in kernels/conv2d.hpp and conv_relu_pool.hpp), which
// users set with MELFORGE_CONV2D_ALGO and MELFORGE_CONV_ALGO. Defined in the
// library beside the kernels (conv2d.cpp/.cu, conv2d_mma.cu,
// conv_relu_pool.cpp/.cu).
#pragma once

#include <cstdint>

#include "engine/dtype.hpp"
#include "kernels/conv2d.hpp"
#include "kernels/conv_relu_pool.hpp"

namespace mf::kernels {

// ---- conv2d (kernels/conv2d.hpp has the variants) ----
void set_conv2d_algo(Conv2dAlgo algo);
const char* conv2d_algo_name(Conv2dAlgo algo);
// The variant conv2d_*_cuda runs for this shape and dtype on the current GPU
// when `requested` is selected (never automatic; alignment assumed, as for
// device_alloc'd tensors). Needs a GPU.
Conv2dAlgo conv2d_resolve_algo(const Conv2dDims& d, DType dtype, Conv2dAlgo requested);
// How many mma-variant kernels this process has queued (forward, dx and dw
// count one each): diagnostics, and the tests' proof that a part did not fall
// back.
std::uint64_t conv2d_mma_launches();

// ---- conv_relu_pool (kernels/conv_relu_pool.hpp has the variants) ----
void set_conv_relu_pool_algo(ConvAlgo algo);
const char* conv_algo_name(ConvAlgo algo);
// The variant conv_relu_pool_*_cuda runs for this shape and dtype on the current
// GPU when `requested` is selected (never automatic). Needs a GPU.
ConvAlgo conv_relu_pool_resolve_algo(const ConvReluPoolDims& d, DType dtype, ConvAlgo requested);

}  // namespace mf::kernels
