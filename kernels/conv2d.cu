// conv2d CUDA kernels, variant 1: the simplest correct kernels (layouts and
// rules in kernels/conv2d.hpp), and the launchers that pick a variant
// (Conv2dAlgo: `automatic` runs this one; variant 2, mma, in
// kernels/conv2d_mma.cu, only when asked for; it shares this file's ReLU mask,
// dw chunk rule, workspace and chunk-order reduction).
//   forward: one thread per y element (n, oh, ow, co), co fastest; sums r, s,
//            ci in that order from global memory, + bias, ReLU, rounds once.
//   mask:    with relu, dy[i] = 0 where !(y[i] > 0), before the gradients.
//   dx:      one thread per dx element (n, ih, iw, ci), ci fastest, gathering
//            over the taps that reach it at this stride, then co.
//   dw, db:  the output pixels cut into `chunks` contiguous ranges (dw_chunks,
//            a function of the shape only); a block per (co, tap or bias,
//            chunk): `lanes` input channels x `slices` pixel slices, slice j
//            sums pixels j, j + slices, ... in order, slice 0 adds the slice
//            sums in slice order; reduce_chunks_kernel sums the partials in
//            chunk order. No floating-point atomics: bit-identical run after
//            run. Indices are 64-bit where N*H*W*C can pass 2^31.
#include "kernels/conv2d.hpp"

#include <cuda_runtime.h>

#include <optional>

#include "kernels/conv2d_mma.cuh"

#include "engine/error.hpp"
#include "engine/memory.hpp"
#include "kernels/cuda_types.cuh"
#include "kernels/launch.cuh"

namespace mf::kernels {

namespace {

constexpr unsigned kBlock = 256;
constexpr int kMaxLanes = 32;

template <class T>
__global__ void forward_kernel(Conv2dDims d, const T* __restrict__ x, const T* __restrict__ w,
                               const T* __restrict__ b, T* __restrict__ y) {
  const int k = d.k, pad = d.pad(), st = d.stride, oh_n = d.oh(), ow_n = d.ow();
  const std::int64_t total = d.n * oh_n * ow_n * d.cout;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const int co = int(i % d.cout);
    std::int64_t t = i / d.cout;
    const int ow = int(t % ow_n);
    t /= ow_n;
    const int oh = int(t % oh_n);
    const std::int64_t n = t / oh_n;
    const T* xn = x + n * d.h * d.w * d.cin;
    const T* wc = w + std::int64_t(co) * k * k * d.cin;
    float acc = b ? cuda::load_f32(b[co]) : 0.f;
    for (int r = 0; r < k; ++r) {
      const int ih = oh * st + r - pad;
      if (ih < 0 || ih >= d.h) continue;
      for (int s = 0; s < k; ++s) {
        const int iw = ow * st + s - pad;
        if (iw < 0 || iw >= d.w) continue;
        const T* xp = xn + (std::int64_t(ih) * d.w + iw) * d.cin;
        const T* wp = wc + (r * k + s) * d.cin;
        for (int ci = 0; ci < d.cin; ++ci) acc += cuda::load_f32(xp[ci]) * cuda::load_f32(wp[ci]);
      }
    }
    y[i] = cuda::store_f32<T>(d.relu && acc <= 0.f ? 0.f : acc);  // NaN passes
  }
}

template <class T>
__global__ void relu_mask_kernel(std::int64_t total, const T* __restrict__ y, T* __restrict__ dy) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x)
    if (!(cuda::load_f32(y[i]) > 0.f)) dy[i] = cuda::store_f32<T>(0.f);
}

template <class T>
__global__ void dx_kernel(Conv2dDims d, const T* __restrict__ w, const T* __restrict__ dy, T* __restrict__ dx) {
  const int k = d.k, pad = d.pad(), st = d.stride, oh_n = d.oh(), ow_n = d.ow();
  const std::int64_t total = d.n * d.h * d.w * d.cin;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const int ci = int(i % d.cin);
    std::int64_t t = i / d.cin;
    const int iw = int(t % d.w);
    t /= d.w;
    const int ih = int(t % d.h);
    const std::int64_t n = t / d.h;
    float acc = 0.f;
    for (int r = 0; r < k; ++r) {
      const int th = ih + pad - r;  // = oh * st
      if (th < 0 || th % st != 0 || th / st >= oh_n) continue;
      const int oh = th / st;
      for (int s = 0; s < k; ++s) {
        const int tw = iw + pad - s;  // = ow * st
        if (tw < 0 || tw % st != 0 || tw / st >= ow_n) continue;
        const T* g = dy + ((n * oh_n + oh) * ow_n + tw / st) * d.cout;
        const T* wp = w + std::int64_t(r * k + s) * d.cin + ci;
        for (int co = 0; co < d.cout; ++co)
          acc += cuda::load_f32(g[co]) * cuda::load_f32(wp[std::int64_t(co) * k * k * d.cin]);
      }
    }
    dx[i] = cuda::store_f32<T>(acc);
  }
}

// The pixel chunks of the dw/db reduction: a function of the shape only (at
// least kChunkPixels pixels a chunk, at most kMaxChunks chunks and 64 MiB of
// partials), so the summation order, and the bits, never depend on the GPU.
constexpr std::int64_t kChunkPixels = 2048;
constexpr std::int64_t kMaxChunks = 256;
int dw_chunks(const Conv2dDims& d) {
  const std::int64_t pixels = d.n * d.oh() * d.ow();
  const std::int64_t per_chunk = std::int64_t(d.cout) * (std::int64_t(d.k) * d.k * d.cin + 1);
  std::int64_t c = (pixels + kChunkPixels - 1) / kChunkPixels;
  c = c < kMaxChunks ? c : kMaxChunks;
  const std::int64_t fit = (std::int64_t(16) << 20) / per_chunk;
  c = c < fit ? c : fit;
  return int(c < 1 ? 1 : c);
}

// Partials part[(chunk * cout + co) * (kkc + 1) + j]: j = rs * cin + ci < kkc is
// dw[co][rs][ci] over the chunk's pixels, j = kkc is db[co] (blockIdx.y = k*k).
template <class T>
__global__ void __launch_bounds__(kBlock)
    dw_partials_kernel(Conv2dDims d, const T* __restrict__ x, const T* __restrict__ dy, int chunks,
                       float* __restrict__ part) {
  __shared__ float slice_sum[kBlock];
  const int k = d.k, pad = d.pad(), st = d.stride, oh_n = d.oh(), ow_n = d.ow();
  const int kkc = k * k * d.cin;
  const int co = int(blockIdx.x), rs = int(blockIdx.y), r = rs / k, s = rs % k, chunk = int(blockIdx.z);
  const bool bias = rs == k * k;  // this block sums db's partial
  const int cin = bias ? 1 : d.cin;
  const int lanes = cin < kMaxLanes ? cin : kMaxLanes, slices = int(kBlock) / lanes;
  const int lane = int(threadIdx.x) % lanes, slice = int(threadIdx.x) / lanes;
  const std::int64_t pixels = d.n * oh_n * ow_n;
  const std::int64_t p0 = pixels * chunk / chunks, p1 = pixels * (chunk + 1) / chunks;
  float* out = part + (std::int64_t(chunk) * d.cout + co) * (kkc + 1);
  for (int c0 = 0; c0 < cin; c0 += lanes) {
    const int ci = c0 + lane;
    float acc = 0.f;
    if (slice < slices && ci < cin) {
      for (std::int64_t p = p0 + slice; p < p1; p += slices) {
        const float g = cuda::load_f32(dy[p * d.cout + co]);
        if (bias) {
          acc += g;
          continue;
        }
        const int ow = int(p % ow_n);
        const std::int64_t t = p / ow_n;
        const int oh = int(t % oh_n);
        const std::int64_t n = t / oh_n;
        const int ih = oh * st + r - pad, iw = ow * st + s - pad;
        if (ih < 0 || ih >= d.h || iw < 0 || iw >= d.w) continue;
        acc += g * cuda::load_f32(x[((n * d.h + ih) * d.w + iw) * d.cin + ci]);
      }
    }
    slice_sum[threadIdx.x] = acc;
    __syncthreads();
    if (slice == 0 && ci < cin) {
      float sum = 0.f;
      for (int j = 0; j < slices; ++j) sum += slice_sum[j * lanes + lane];
      out[bias ? kkc : rs * d.cin + ci] = sum;
    }
    __syncthreads();  // slice_sum is rewritten by the next channel group
  }
}

// dw[co][j] (and db[co] when db is given) = the chunks' partials summed in
// chunk order; one thread per (co, j), consecutive threads read consecutive
// partials.
__global__ void reduce_chunks_kernel(const float* __restrict__ part, int chunks, int cout, int kkc,
                                     float* __restrict__ dw, float* __restrict__ db) {
  const std::int64_t total = std::int64_t(cout) * (kkc + 1);
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    float sum = 0.f;
    for (int c = 0; c < chunks; ++c) sum += part[std::int64_t(c) * total + i];
    const int co = int(i / (kkc + 1)), j = int(i % (kkc + 1));
    if (j < kkc) dw[std::int64_t(co) * kkc + j] = sum;
    else if (db) db[co] = sum;
  }
}

// Stream-ordered f32 workspace from the device pool (engine/memory.hpp).
class Workspace {
 public:
  Workspace(std::size_t floats, cudaStream_t stream) : stream_(stream) {
    int dev = 0;
    MF_CUDA_CHECK(cudaGetDevice(&dev));
    ptr_ = static_cast<float*>(device_alloc(floats * sizeof(float), dev, stream));
  }
  ~Workspace() { device_free(ptr_, stream_); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  float* data() const { return ptr_; }

 private:
  float* ptr_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

bool mma_selected() { return conv2d_algo() == Conv2dAlgo::mma; }

template <class T>
void forward_t(const Conv2dDims& d, const void* x, const void* w, const void* b, void* y, cudaStream_t stream) {
  if (mma_selected() && conv2d_mma_forward(d, dtype_of_v<T>, x, w, b, y, stream)) return;
  using D = cuda::device_t<T>;
  const std::int64_t total = d.n * d.oh() * d.ow() * d.cout;
  forward_kernel<D><<<cuda::grid_for(total, kBlock), kBlock, 0, stream>>>(
      d, static_cast<const D*>(x), static_cast<const D*>(w), static_cast<const D*>(b), static_cast<D*>(y));
  MF_CUDA_CHECK_LAUNCH();
}

template <class T>
void backward_t(const Conv2dDims& d, const void* x, const void* w, const void* y, void* dy, void* dx, float* dw,
                float* db, float* scratch, cudaStream_t stream) {
  using D = cuda::device_t<T>;
  const std::int64_t pixels = d.n * d.oh() * d.ow();
  if (d.relu) {
    relu_mask_kernel<D><<<cuda::grid_for(pixels * d.cout, kBlock), kBlock, 0, stream>>>(
        pixels * d.cout, static_cast<const D*>(y), static_cast<D*>(dy));
    MF_CUDA_CHECK_LAUNCH();
  }
  const bool mma = mma_selected();
  if (dx && !(mma && conv2d_mma_dx(d, dtype_of_v<T>, w, dy, dx, stream))) {
    const std::int64_t total = d.n * d.h * d.w * d.cin;
    dx_kernel<D><<<cuda::grid_for(total, kBlock), kBlock, 0, stream>>>(d, static_cast<const D*>(w),
                                                                        static_cast<const D*>(dy), static_cast<D*>(dx));
    MF_CUDA_CHECK_LAUNCH();
  }
  const int chunks = dw_chunks(d), kkc = d.k * d.k * d.cin;
  std::optional<Workspace> owned;  // the per-call partials when the caller gave no scratch
  if (!scratch) scratch = owned.emplace(std::size_t(conv2d_scratch_elems(d)), stream).data();
  if (!(mma && conv2d_mma_dw_partials(d, dtype_of_v<T>, x, dy, chunks, scratch, stream))) {
    // grid.y = k*k taps + 1 (db); k <= 15 and chunks <= kMaxChunks keep y and z far below 65535.
    dw_partials_kernel<D><<<dim3(unsigned(d.cout), unsigned(d.k * d.k + 1), unsigned(chunks)), kBlock, 0, stream>>>(
        d, static_cast<const D*>(x), static_cast<const D*>(dy), chunks, scratch);
    MF_CUDA_CHECK_LAUNCH();
  }
  const std::int64_t total = std::int64_t(d.cout) * (kkc + 1);
  reduce_chunks_kernel<<<cuda::grid_for(total, kBlock), kBlock, 0, stream>>>(scratch, chunks, d.cout, kkc, dw,
                                                                            db);
  MF_CUDA_CHECK_LAUNCH();
}

}  // namespace

std::int64_t conv2d_scratch_elems(const Conv2dDims& d) {
  return std::int64_t(dw_chunks(d)) * d.cout * (std::int64_t(d.k) * d.k * d.cin + 1);
}

Conv2dAlgo conv2d_resolve_algo(const Conv2dDims& d, DType dtype, Conv2dAlgo requested) {
  return requested == Conv2dAlgo::mma && conv2d_mma_can_run(d, dtype) ? Conv2dAlgo::mma : Conv2dAlgo::direct;
}

void conv2d_forward_cuda(const Conv2dDims& d, DType dtype, const void* x, const void* w, const void* b, void* y,
                         cudaStream_t stream) {
  if (d.n == 0) return;
  switch (dtype) {
    case DType::f32: return forward_t<float>(d, x, w, b, y, stream);
    case DType::f16: return forward_t<f16>(d, x, w, b, y, stream);
    case DType::bf16: return forward_t<bf16>(d, x, w, b, y, stream);
    default: return;  // ops_conv2d.cpp validated the dtype
  }
}

void conv2d_backward_cuda(const Conv2dDims& d, DType dtype, const void* x, const void* w, const void* y, void* dy,
                          void* dx, float* dw, float* db, float* scratch, cudaStream_t stream) {
  switch (dtype) {
    case DType::f32: return backward_t<float>(d, x, w, y, dy, dx, dw, db, scratch, stream);
    case DType::f16: return backward_t<f16>(d, x, w, y, dy, dx, dw, db, scratch, stream);
    case DType::bf16: return backward_t<bf16>(d, x, w, y, dy, dx, dw, db, scratch, stream);
    default: return;
  }
}

}  // namespace mf::kernels
