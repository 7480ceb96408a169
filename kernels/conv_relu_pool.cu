// conv_relu_pool CUDA kernels, variant 1 "direct", and the router that picks a
// variant per call (forward_t, backward_t; conv_relu_pool_resolve_algo says
// which one a shape gets). Layouts (kernels/conv_relu_pool.hpp): x NHWC
// [N,H,W,Cin], w OHWI [Cout,k,k,Cin], y and code [N,PH,PW,Cout], dw f32 OHWI,
// db f32 [Cout].
// Router (conv_relu_pool_algo(), MELFORGE_CONV_ALGO): automatic tries resident
// (bf16/f16), then cin1 (Cin = 1), then mma (bf16/f16), then tiled, then
// direct (the H200 measurement behind this order: docs/decisions.md). A variant
// that refuses (shape, alignment, GPU) passes to the next.
// Precision (every variant): T operands widened to f32 and multiplied-
// accumulated in f32, each output rounded to T once; no TF32 (FP32 runs on
// CUDA cores in full f32, bf16/f16 is where tensor cores are used).
// Determinism: dw/db are summed without atomics: per-chunk partials (chunks a
// function of the shape only), then reduce_partials_kernel sums each weight's
// partials in a fixed order (a function of the chunk count). Same bits always.
// Direct: forward one thread per pooled output (co fastest), the p*p conv
// values from global memory; dx one thread per dx element, gathering over
// r, s, co through the codes; dw/db grid (chunk, co), a thread per (r, s, ci).
#include "kernels/conv_relu_pool.hpp"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "engine/error.hpp"
#include "engine/memory.hpp"
#include "kernels/conv_relu_pool_cuda.cuh"
#include "kernels/cuda_types.cuh"
#include "kernels/launch.cuh"

namespace mf::kernels {

// ---- shared: host helpers, workspace and the fixed-order reduction -----------

bool gpu_is_sm80_or_newer() {
  int dev = 0, major = 0;
  MF_CUDA_CHECK(cudaGetDevice(&dev));
  MF_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  return major >= 8;
}

void raise_dynamic_smem_limit(const void* kernel, std::size_t bytes) {
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, std::size_t> raised;  // (device, kernel) -> limit set
  int dev = 0;
  MF_CUDA_CHECK(cudaGetDevice(&dev));
  const std::lock_guard<std::mutex> lock(mu);
  std::size_t& have = raised[{dev, kernel}];
  if (bytes <= have) return;
  MF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  have = bytes;
}

int weight_partial_chunks(const ConvReluPoolDims& d, std::int64_t units, int max_chunks) {
  if (units <= 0) return 0;
  constexpr std::int64_t kMaxFloats = std::int64_t(16) << 20;  // 64 MiB of partials
  const std::int64_t floats_per_chunk = weight_partial_floats(d);
  std::int64_t c = kMaxFloats / (floats_per_chunk > 0 ? floats_per_chunk : 1);
  c = c < 1 ? 1 : (c > max_chunks ? max_chunks : c);
  return int(units < c ? units : c);
}

WeightPartials::WeightPartials(std::size_t floats, cudaStream_t stream) : stream_(stream) {
  if (floats == 0) return;
  int dev = 0;
  MF_CUDA_CHECK(cudaGetDevice(&dev));
  ptr_ = static_cast<float*>(device_alloc(floats * sizeof(float), dev, stream));
}

WeightPartials::~WeightPartials() {
  if (ptr_) device_free(ptr_, stream_);
}

namespace {
// A block finishes 32 consecutive weights with 8 chunk slices: slice j sums
// chunks j, j + 8, j + 16, ... in order, then the 8 slice sums are added in
// slice order. Coalesced 128-byte reads, 8x the parallelism of one thread per
// weight, and the order (so the bits) depends on the chunk count only.
constexpr int kReduceWeights = 32, kReduceSlices = 8;

__global__ void __launch_bounds__(kReduceWeights * kReduceSlices)
    reduce_partials_kernel(const float* __restrict__ part, int chunks, int cout, int kkc, float* __restrict__ dw,
                           float* __restrict__ db) {
  __shared__ float slice_sum[kReduceSlices][kReduceWeights];
  const std::int64_t total = std::int64_t(cout) * (kkc + 1);
  const std::int64_t i = std::int64_t(blockIdx.x) * kReduceWeights + threadIdx.x;
  float acc = 0.f;
  if (i < total)
    for (int c = int(threadIdx.y); c < chunks; c += kReduceSlices) acc += part[std::int64_t(c) * total + i];
  slice_sum[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || i >= total) return;
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < kReduceSlices; ++j) sum += slice_sum[j][threadIdx.x];
  const int co = int(i / (kkc + 1)), j = int(i % (kkc + 1));
  if (j < kkc) dw[std::int64_t(co) * kkc + j] = sum;
  else db[co] = sum;
}
}  // namespace

void launch_reduce_partials(const ConvReluPoolDims& d, const float* part, int chunks, float* dw, float* db,
                            cudaStream_t stream) {
  const int kkc = d.k * d.k * d.cin;
  const std::int64_t total = std::int64_t(d.cout) * (kkc + 1);
  const auto blocks = unsigned((total + kReduceWeights - 1) / kReduceWeights);
  reduce_partials_kernel<<<blocks, dim3(kReduceWeights, kReduceSlices), 0, stream>>>(part, chunks, d.cout, kkc, dw,
                                                                                      db);
  MF_CUDA_CHECK_LAUNCH();
}

namespace {

template <class T>
__global__ void direct_forward_kernel(ConvReluPoolDims d, const T* __restrict__ x, const T* __restrict__ w,
                                      const T* __restrict__ b, T* __restrict__ y,
                                      std::uint8_t* __restrict__ code) {
  const int p = d.pool, k = d.k, pad = k / 2, ph_n = d.ph(), pw_n = d.pw();
  const std::int64_t total = d.n * ph_n * pw_n * d.cout;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const int co = int(i % d.cout);
    std::int64_t t = i / d.cout;
    const int pw = int(t % pw_n);
    t /= pw_n;
    const int ph = int(t % ph_n);
    const std::int64_t n = t / ph_n;
    const T* xn = x + n * d.h * d.w * d.cin;
    const T* wc = w + std::int64_t(co) * k * k * d.cin;
    const float bias = cuda::load_f32(b[co]);
    float best = 0.f;
    int bpos = 0;
    for (int dr = 0; dr < p; ++dr) {
      for (int dc = 0; dc < p; ++dc) {
        const int oh = ph * p + dr, ow = pw * p + dc;
        float acc = bias;
        for (int r = 0; r < k; ++r) {
          const int ih = oh + r - pad;
          if (ih < 0 || ih >= d.h) continue;
          for (int s = 0; s < k; ++s) {
            const int iw = ow + s - pad;
            if (iw < 0 || iw >= d.w) continue;
            const T* xp = xn + (std::int64_t(ih) * d.w + iw) * d.cin;
            const T* wp = wc + (r * k + s) * d.cin;
            for (int ci = 0; ci < d.cin; ++ci) acc += cuda::load_f32(xp[ci]) * cuda::load_f32(wp[ci]);
          }
        }
        // PyTorch's rule: strictly greater wins (ties keep the first), NaN always wins.
        if ((dr == 0 && dc == 0) || acc > best || isnan(acc)) {
          best = acc;
          bpos = dr * p + dc;
        }
      }
    }
    const bool pass = best > 0.f || isnan(best);
    y[i] = cuda::store_f32<T>(pass ? best : 0.f);
    if (code) code[i] = pass ? std::uint8_t(bpos) : kNoGrad;
  }
}

template <class T>
__global__ void direct_dx_kernel(ConvReluPoolDims d, const T* __restrict__ w, const T* __restrict__ dy,
                                 const std::uint8_t* __restrict__ code, T* __restrict__ dx) {
  const int p = d.pool, k = d.k, pad = k / 2, ph_n = d.ph(), pw_n = d.pw();
  const int hc = ph_n * p, wc = pw_n * p;
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
      const int oh = ih - r + pad;
      if (oh < 0 || oh >= hc) continue;
      for (int s = 0; s < k; ++s) {
        const int ow = iw - s + pad;
        if (ow < 0 || ow >= wc) continue;
        const std::uint8_t pos = std::uint8_t((oh % p) * p + ow % p);
        const std::int64_t o = ((n * ph_n + oh / p) * pw_n + ow / p) * d.cout;
        for (int co = 0; co < d.cout; ++co) {
          const float g = code[o + co] == pos ? cuda::load_f32(dy[o + co]) : 0.f;
          acc += g * cuda::load_f32(w[((std::int64_t(co) * k + r) * k + s) * d.cin + ci]);
        }
      }
    }
    dx[i] = cuda::store_f32<T>(acc);
  }
}

// Partials: part[(chunk * cout + co) * (kkc + 1) + j], j < kkc: dw[co][j]; j = kkc: db[co].
// A block per (chunk, co); its threads stride the kkc + 1 weights, each summing
// its weight over the chunk alone (the block size does not change the bits).
constexpr unsigned kDirectDwThreads = 128;
template <class T>
__global__ void direct_dw_kernel(ConvReluPoolDims d, const T* __restrict__ x, const T* __restrict__ dy,
                                 const std::uint8_t* __restrict__ code, int chunks, float* __restrict__ part) {
  const int p = d.pool, k = d.k, pad = k / 2, ph_n = d.ph(), pw_n = d.pw();
  const int hc = ph_n * p, wc = pw_n * p;
  const int kkc = k * k * d.cin;
  const int chunk = blockIdx.x, co = blockIdx.y;
  const std::int64_t units = d.n * hc;
  const std::int64_t u0 = units * chunk / chunks, u1 = units * (chunk + 1) / chunks;
  for (int j = threadIdx.x; j <= kkc; j += blockDim.x) {
    const int ci = j % d.cin, s = (j / d.cin) % k, r = j / (d.cin * k);
    float acc = 0.f;
    for (std::int64_t u = u0; u < u1; ++u) {
      const std::int64_t n = u / hc;
      const int oh = int(u % hc);
      const int ih = oh + r - pad;
      if (j < kkc && (ih < 0 || ih >= d.h)) continue;
      const std::int64_t orow = (n * ph_n + oh / p) * pw_n;
      for (int ow = 0; ow < wc; ++ow) {
        const std::int64_t o = (orow + ow / p) * d.cout + co;
        if (code[o] != std::uint8_t((oh % p) * p + ow % p)) continue;
        const float g = cuda::load_f32(dy[o]);
        if (j == kkc) {
          acc += g;
        } else {
          const int iw = ow + s - pad;
          if (iw < 0 || iw >= d.w) continue;
          acc += g * cuda::load_f32(x[((n * d.h + ih) * d.w + iw) * d.cin + ci]);
        }
      }
    }
    part[(std::int64_t(chunk) * d.cout + co) * (kkc + 1) + j] = acc;
  }
}

template <class T>
void direct_forward(const ConvReluPoolDims& d, const void* x, const void* w, const void* b, void* y,
                    std::uint8_t* code, cudaStream_t stream) {
  using D = cuda::device_t<T>;
  const std::int64_t total = d.n * d.ph() * d.pw() * d.cout;
  constexpr unsigned threads = cuda::kElementwiseThreads;
  direct_forward_kernel<D><<<cuda::grid_for(total, threads), threads, 0, stream>>>(
      d, static_cast<const D*>(x), static_cast<const D*>(w), static_cast<const D*>(b), static_cast<D*>(y),
      code);
  MF_CUDA_CHECK_LAUNCH();
}

template <class T>
void direct_backward(const ConvReluPoolDims& d, const void* x, const void* w, const void* dy,
                     const std::uint8_t* code, void* dx, float* dw, float* db, cudaStream_t stream) {
  using D = cuda::device_t<T>;
  constexpr unsigned threads = cuda::kElementwiseThreads;
  if (dx) {
    const std::int64_t total = d.n * d.h * d.w * d.cin;
    direct_dx_kernel<D><<<cuda::grid_for(total, threads), threads, 0, stream>>>(
        d, static_cast<const D*>(w), static_cast<const D*>(dy), code, static_cast<D*>(dx));
    MF_CUDA_CHECK_LAUNCH();
  }
  dw_db_by_partials(d, pooled_conv_rows(d), kMaxPartialChunks, dw, db, stream, [&](int chunks, float* part) {
    direct_dw_kernel<D><<<dim3(unsigned(chunks), unsigned(d.cout)), kDirectDwThreads, 0, stream>>>(
        d, static_cast<const D*>(x), static_cast<const D*>(dy), code, chunks, part);
    MF_CUDA_CHECK_LAUNCH();
  });
}

// A bf16/f16 conv that cannot take the tensor-core path runs an FP32 CUDA-core
// kernel, about 10x slower: note_fp32_fallback says so once (conv_relu_pool.cpp).
template <class T>
void note_fp32_fallback(const ConvReluPoolDims& d, const char* direction) {
  if constexpr (!std::is_same_v<T, float>) {
    const DType dt = dtype_of_v<T>;
    note_conv_fp32_fallback(d, dt, direction,
                            mma_can_run(d, dt) ? "a tensor is not 16-byte aligned"
                                               : "it needs k 1 or 3, pool 1 or 2, Cin and Cout multiples of 16, sm_80+");
  }
}

template <class T>
void forward_t(const ConvReluPoolDims& d, const void* x, const void* w, const void* b, void* y,
               std::uint8_t* code, cudaStream_t stream) {
  const ConvAlgo algo = conv_relu_pool_algo();
  const bool resident = algo == ConvAlgo::automatic || algo == ConvAlgo::resident;
  if (resident && resident_cin1_forward<T>(d, x, w, b, y, code, stream)) return;
  if (resident && resident_forward<T>(d, x, w, b, y, code, stream)) return;
  const bool cin1 = algo == ConvAlgo::automatic || algo == ConvAlgo::cin1 || algo == ConvAlgo::resident;
  if (cin1 && cin1_forward<T>(d, x, w, b, y, code, stream)) return;
  const bool tensor_cores = algo == ConvAlgo::automatic || algo == ConvAlgo::mma || algo == ConvAlgo::resident;
  if (tensor_cores && mma_forward<T>(d, x, w, b, y, code, stream)) return;
  if (tensor_cores) note_fp32_fallback<T>(d, "forward");
  if (algo != ConvAlgo::direct && tiled_forward<T>(d, x, w, b, y, code, stream)) return;
  direct_forward<T>(d, x, w, b, y, code, stream);
}

template <class T>
void backward_t(const ConvReluPoolDims& d, const void* x, const void* w, const void* dy,
                const std::uint8_t* code, void* dx, float* dw, float* db, cudaStream_t stream) {
  const ConvAlgo algo = conv_relu_pool_algo();
  const bool resident = algo == ConvAlgo::automatic || algo == ConvAlgo::resident;
  // The Cin = 1 layer (the first: no dx): dw/db on tensor cores. A Cin = 1
  // layer that wants dx falls back to cin1, which computes both.
  if (resident && !dx && resident_cin1_dw<T>(d, x, dy, code, dw, db, stream)) return;
  if (resident && resident_can_run(d, dtype_of_v<T>)) {
    // dx and dw are separate kernels here, and a part the variant refuses (its
    // shared-memory budget, alignment) falls back alone: dx to mma's dx, dw to
    // the chain below (which skips a null dx).
    if (dx && resident_dx<T>(d, w, dy, code, dx, stream)) dx = nullptr;
    if (resident_dw<T>(d, x, dy, code, dw, db, stream)) {
      if (!dx || mma_backward<T>(d, x, w, dy, code, dx, nullptr, nullptr, stream)) return;
      // (mma refused dx too: the chain below recomputes dw along with dx)
    }
  }
  const bool cin1 = algo == ConvAlgo::automatic || algo == ConvAlgo::cin1 || algo == ConvAlgo::resident;
  if (cin1 && cin1_backward<T>(d, x, w, dy, code, dx, dw, db, stream)) return;
  const bool tensor_cores = algo == ConvAlgo::automatic || algo == ConvAlgo::mma || algo == ConvAlgo::resident;
  if (tensor_cores && mma_backward<T>(d, x, w, dy, code, dx, dw, db, stream)) return;
  if (tensor_cores) note_fp32_fallback<T>(d, "backward");
  if (algo != ConvAlgo::direct && tiled_backward<T>(d, x, w, dy, code, dx, dw, db, stream)) return;
  direct_backward<T>(d, x, w, dy, code, dx, dw, db, stream);
}

}  // namespace

ConvAlgo conv_relu_pool_resolve_algo(const ConvReluPoolDims& d, DType dtype, ConvAlgo requested) {
  const bool any = requested == ConvAlgo::automatic;
  // resident's launchers may still refuse a part (alignment, shared memory), which then falls back to mma.
  if ((any || requested == ConvAlgo::resident) && (resident_can_run(d, dtype) || resident_cin1_can_run(d, dtype)))
    return ConvAlgo::resident;
  // cin1 also needs 16-byte aligned y/code/dy (true for device_alloc'd tensors); it is not checked here.
  if ((any || requested == ConvAlgo::cin1 || requested == ConvAlgo::resident) && cin1_can_run(d))
    return ConvAlgo::cin1;
  const bool tensor_cores = any || requested == ConvAlgo::mma || requested == ConvAlgo::resident;
  if (tensor_cores && mma_can_run(d, dtype)) return ConvAlgo::mma;
  if (requested != ConvAlgo::direct && tiled_can_run(d)) return ConvAlgo::tiled;
  return ConvAlgo::direct;
}

void conv_relu_pool_forward_cuda(const ConvReluPoolDims& d, DType dtype, const void* x, const void* w,
                                 const void* b, void* y, std::uint8_t* code, cudaStream_t stream) {
  if (d.n == 0 || d.ph() == 0 || d.pw() == 0) return;
  switch (dtype) {
    case DType::f32: return forward_t<float>(d, x, w, b, y, code, stream);
    case DType::f16: return forward_t<f16>(d, x, w, b, y, code, stream);
    case DType::bf16: return forward_t<bf16>(d, x, w, b, y, code, stream);
    default: return;  // ops.cpp validated the dtype
  }
}

void conv_relu_pool_backward_cuda(const ConvReluPoolDims& d, DType dtype, const void* x, const void* w,
                                  const void* dy, const std::uint8_t* code, void* dx, float* dw,
                                  float* db, cudaStream_t stream) {
  switch (dtype) {
    case DType::f32: return backward_t<float>(d, x, w, dy, code, dx, dw, db, stream);
    case DType::f16: return backward_t<f16>(d, x, w, dy, code, dx, dw, db, stream);
    case DType::bf16: return backward_t<bf16>(d, x, w, dy, code, dx, dw, db, stream);
    default: return;
  }
}

}  // namespace mf::kernels
