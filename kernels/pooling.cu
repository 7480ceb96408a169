// The pooling and elementwise ops on the GPU (kernels/pooling.hpp has the
// contracts). Variant 1, the simplest correct kernels:
//   - max pool forward: one thread per output (grid-stride), looping over its
//     p x p window; backward: one thread per dx element (a gather from its
//     window's code, so every dx element is written and nothing races).
//   - global average pool forward and channel gate backward: one block per
//     (sample, tile of kPoolChannelTile channels), blockDim (32, kPoolLanes):
//     thread (c, lane) sums positions lane, lane + kPoolLanes, ... in order,
//     then thread (c, 0) adds the kPoolLanes partials in order 0..7 (the fixed
//     order of pooling.hpp; consecutive threads read consecutive channels).
//   - the rest (average pool backward, channel gate forward, add_inplace):
//     one element per thread per grid-stride iteration.
// No atomics; 64-bit element indices throughout.
#include "engine/error.hpp"
#include "kernels/cuda_types.cuh"
#include "kernels/launch.cuh"
#include "kernels/pooling.hpp"
#include "kernels/relu.hpp"

namespace mf::kernels {

namespace {

static_assert(kPoolChannelTile == 32, "the reduction kernels map threadIdx.x to a warp of channels");
constexpr int kThreads = 256;

// The element's channel and sample in an [N, H*W, C] tensor.
struct NhwcIndex {
  std::int64_t n;
  int c;
};
__device__ __forceinline__ NhwcIndex nhwc_index(std::int64_t i, std::int64_t hw, int c) {
  return {i / (hw * c), int(i % c)};
}

template <class T>
__global__ void max_pool_fwd_kernel(PoolingDims d, int p, const T* __restrict__ x, T* __restrict__ y,
                                    std::uint8_t* __restrict__ code) {
  const int ph = d.h / p, pw = d.w / p, C = d.c;
  const std::int64_t total = d.n * ph * pw * C;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const int c = int(i % C);
    std::int64_t r = i / C;
    const int ow = int(r % pw);
    r /= pw;
    const int oh = int(r % ph);
    const std::int64_t n = r / ph;
    const T* xw = x + ((n * d.h + std::int64_t(oh) * p) * d.w + std::int64_t(ow) * p) * C + c;
    T best = xw[0];
    float bv = cuda::load_f32(best);
    int bpos = 0;
    for (int a = 0; a < p; ++a)
      for (int b = 0; b < p; ++b) {
        const T t = xw[(std::int64_t(a) * d.w + b) * C];
        const float v = cuda::load_f32(t);
        // PyTorch's rule: strictly greater wins (ties keep the first), NaN always wins.
        if (v > bv || isnan(v)) {
          best = t;
          bv = v;
          bpos = a * p + b;
        }
      }
    y[i] = best;
    if (code) code[i] = std::uint8_t(bpos);
  }
}

template <class T>
__global__ void max_pool_bwd_kernel(PoolingDims d, int p, const T* __restrict__ dy,
                                    const std::uint8_t* __restrict__ code, T* __restrict__ dx) {
  const int ph = d.h / p, pw = d.w / p, C = d.c;
  const std::int64_t total = d.numel();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const int c = int(i % C);
    std::int64_t r = i / C;
    const int w = int(r % d.w);
    r /= d.w;
    const int h = int(r % d.h);
    const std::int64_t n = r / d.h;
    const int oh = h / p, ow = w / p;
    T v = cuda::store_f32<T>(0.f);
    if (oh < ph && ow < pw) {
      const std::int64_t o = ((n * ph + oh) * pw + ow) * C + c;
      if (code[o] == (h % p) * p + w % p) v = dy[o];
    }
    dx[i] = v;
  }
}

template <class T>
__global__ void gap_fwd_kernel(PoolingDims d, const T* __restrict__ x, T* __restrict__ y) {
  __shared__ float part[kPoolLanes][kPoolChannelTile];
  const int tiles = (d.c + kPoolChannelTile - 1) / kPoolChannelTile;
  const std::int64_t hw = d.hw();
  for (std::int64_t blk = blockIdx.x; blk < d.n * tiles; blk += gridDim.x) {
    const std::int64_t n = blk / tiles;
    const int c = int(blk % tiles) * kPoolChannelTile + threadIdx.x;
    float acc = 0.f;
    if (c < d.c) {
      const T* xn = x + n * hw * d.c + c;
      for (std::int64_t i = threadIdx.y; i < hw; i += kPoolLanes) acc += cuda::load_f32(xn[i * d.c]);
    }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < d.c) {
      float s = part[0][threadIdx.x];
      for (int l = 1; l < kPoolLanes; ++l) s += part[l][threadIdx.x];
      y[n * d.c + c] = cuda::store_f32<T>(s / float(hw));
    }
    __syncthreads();  // part is reused by the next tile
  }
}

template <class T>
__global__ void gap_bwd_kernel(PoolingDims d, const T* __restrict__ dy, T* __restrict__ dx) {
  const std::int64_t total = d.numel(), hw = d.hw();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const NhwcIndex k = nhwc_index(i, hw, d.c);
    dx[i] = cuda::store_f32<T>(cuda::load_f32(dy[k.n * d.c + k.c]) / float(hw));
  }
}

template <class T>
__global__ void gate_fwd_kernel(PoolingDims d, bool relu, const T* __restrict__ x, const T* __restrict__ g,
                                const T* __restrict__ res, T* __restrict__ y) {
  const std::int64_t total = d.numel(), hw = d.hw();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const NhwcIndex k = nhwc_index(i, hw, d.c);
    float v = cuda::load_f32(x[i]) * stable_sigmoid(cuda::load_f32(g[k.n * d.c + k.c]));
    if (res) v += cuda::load_f32(res[i]);
    y[i] = cuda::store_f32<T>(relu ? relu_keep_nan(v) : v);
  }
}

// With relu, dy masked in place; dx = dy * s; dg = channel_gate_dg(sum dy * x, g).
template <class T>
__global__ void gate_bwd_kernel(PoolingDims d, bool relu, const T* __restrict__ x, const T* __restrict__ g,
                                const T* __restrict__ y, T* __restrict__ dy, T* __restrict__ dx,
                                T* __restrict__ dg) {
  __shared__ float part[kPoolLanes][kPoolChannelTile];
  const int tiles = (d.c + kPoolChannelTile - 1) / kPoolChannelTile;
  const std::int64_t hw = d.hw();
  for (std::int64_t blk = blockIdx.x; blk < d.n * tiles; blk += gridDim.x) {
    const std::int64_t n = blk / tiles;
    const int c = int(blk % tiles) * kPoolChannelTile + threadIdx.x;
    float acc = 0.f;
    if (c < d.c) {
      const float s = stable_sigmoid(cuda::load_f32(g[n * d.c + c]));
      const std::int64_t base = n * hw * d.c + c;
      for (std::int64_t i = threadIdx.y; i < hw; i += kPoolLanes) {
        const std::int64_t k = base + i * d.c;
        if (relu && !(cuda::load_f32(y[k]) > 0.f)) dy[k] = cuda::store_f32<T>(0.f);
        const float gy = cuda::load_f32(dy[k]);
        dx[k] = cuda::store_f32<T>(gy * s);
        acc += gy * cuda::load_f32(x[k]);
      }
    }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < d.c) {
      float s = part[0][threadIdx.x];
      for (int l = 1; l < kPoolLanes; ++l) s += part[l][threadIdx.x];
      dg[n * d.c + c] = cuda::store_f32<T>(channel_gate_dg(s, cuda::load_f32(g[n * d.c + c])));
    }
    __syncthreads();  // part is reused by the next tile
  }
}

template <class T>
__global__ void add_kernel(std::int64_t n, const T* __restrict__ src, T* __restrict__ dst) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    dst[i] = cuda::store_f32<T>(cuda::load_f32(dst[i]) + cuda::load_f32(src[i]));
}

// Calls f(D{}) with the device storage type of dtype (ops_pooling.cpp has
// already refused any other dtype).
template <class F>
void with_device_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::bf16: return f(__nv_bfloat16{});
    case DType::f16: return f(__half{});
    default: return;
  }
}

// Blocks for the reduction kernels: one per (sample, channel tile), capped
// (the kernels loop over the rest).
unsigned reduction_grid(const PoolingDims& d) {
  return cuda::grid_for(d.n * ((d.c + kPoolChannelTile - 1) / kPoolChannelTile), 1);
}
const dim3 kReductionBlock(kPoolChannelTile, kPoolLanes);

}  // namespace

void max_pool_forward_cuda(const PoolingDims& d, int pool, DType dtype, const void* x, void* y,
                           std::uint8_t* code, cudaStream_t stream) {
  const std::int64_t total = d.n * (d.h / pool) * (d.w / pool) * d.c;
  if (total == 0) return;
  with_device_type(dtype, [&](auto tag) {
    using D = decltype(tag);
    max_pool_fwd_kernel<D><<<cuda::grid_for(total, kThreads), kThreads, 0, stream>>>(
        d, pool, static_cast<const D*>(x), static_cast<D*>(y), code);
  });
  MF_CUDA_CHECK_LAUNCH();
}

void max_pool_backward_cuda(const PoolingDims& d, int pool, DType dtype, const void* dy, const std::uint8_t* code,
                            void* dx, cudaStream_t stream) {
  if (d.numel() == 0) return;
  with_device_type(dtype, [&](auto tag) {
    using D = decltype(tag);
    max_pool_bwd_kernel<D><<<cuda::grid_for(d.numel(), kThreads), kThreads, 0, stream>>>(
        d, pool, static_cast<const D*>(dy), code, static_cast<D*>(dx));
  });
  MF_CUDA_CHECK_LAUNCH();
}

void global_avg_pool_forward_cuda(const PoolingDims& d, DType dtype, const void* x, void* y, cudaStream_t stream) {
  if (d.numel() == 0) return;
  with_device_type(dtype, [&](auto tag) {
    using D = decltype(tag);
    gap_fwd_kernel<D><<<reduction_grid(d), kReductionBlock, 0, stream>>>(d, static_cast<const D*>(x),
                                                                          static_cast<D*>(y));
  });
  MF_CUDA_CHECK_LAUNCH();
}

void global_avg_pool_backward_cuda(const PoolingDims& d, DType dtype, const void* dy, void* dx, cudaStream_t stream) {
  if (d.numel() == 0) return;
  with_device_type(dtype, [&](auto tag) {
    using D = decltype(tag);
    gap_bwd_kernel<D><<<cuda::grid_for(d.numel(), kThreads), kThreads, 0, stream>>>(
        d, static_cast<const D*>(dy), static_cast<D*>(dx));
  });
  MF_CUDA_CHECK_LAUNCH();
}

void channel_gate_forward_cuda(const PoolingDims& d, bool relu, DType dtype, const void* x, const void* g,
                               const void* residual, void* y, cudaStream_t stream) {
  if (d.numel() == 0) return;
  with_device_type(dtype, [&](auto tag) {
    using D = decltype(tag);
    gate_fwd_kernel<D><<<cuda::grid_for(d.numel(), kThreads), kThreads, 0, stream>>>(
        d, relu, static_cast<const D*>(x), static_cast<const D*>(g), static_cast<const D*>(residual),
        static_cast<D*>(y));
  });
  MF_CUDA_CHECK_LAUNCH();
}

void channel_gate_backward_cuda(const PoolingDims& d, bool relu, DType dtype, const void* x, const void* g,
                                const void* y, void* dy, void* dx, void* dg, cudaStream_t stream) {
  if (d.numel() == 0) return;
  with_device_type(dtype, [&](auto tag) {
    using D = decltype(tag);
    gate_bwd_kernel<D><<<reduction_grid(d), kReductionBlock, 0, stream>>>(
        d, relu, static_cast<const D*>(x), static_cast<const D*>(g), static_cast<const D*>(y),
        static_cast<D*>(dy), static_cast<D*>(dx), static_cast<D*>(dg));
  });
  MF_CUDA_CHECK_LAUNCH();
}

void add_inplace_cuda(std::int64_t n, DType dtype, const void* src, void* dst, cudaStream_t stream) {
  if (n == 0) return;
  with_device_type(dtype, [&](auto tag) {
    using D = decltype(tag);
    add_kernel<D><<<cuda::grid_for(n, kThreads), kThreads, 0, stream>>>(n, static_cast<const D*>(src),
                                                                        static_cast<D*>(dst));
  });
  MF_CUDA_CHECK_LAUNCH();
}

}  // namespace mf::kernels
