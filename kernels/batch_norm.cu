// batch_norm on the GPU (variant 1: simple and correct). Reductions over the
// M rows are two kernels: a partials kernel with one block per (row chunk, 32
// channels) -- 32 channels x 8 row lanes, each thread walking its lane's rows
// of the chunk, the 8 lanes merged in order in shared memory -- writes one
// partial per (chunk, channel) to the caller's scratch; a finalize kernel (one
// thread per channel) merges the chunks in chunk order. The elementwise parts
// (normalise, dx) are grid-stride loops over the M*C elements. Chunks depend
// only on M (kernels/batch_norm.hpp), so the bits depend on nothing else.
// Statistics: Welford per thread, Chan's merge across lanes and chunks, all on
// x - (row 0 of x) so that a large common offset costs no precision.
#include "engine/error.hpp"
#include "kernels/batch_norm.hpp"
#include "kernels/cuda_types.cuh"
#include "kernels/launch.cuh"
#include "kernels/relu.hpp"

namespace mf::kernels {

namespace {

constexpr int kCh = 32;     // channels per partials block (threadIdx.x)
constexpr int kLanes = 8;   // row lanes per partials block (threadIdx.y)
constexpr int kThreads = 256;

// Rows of lane `lane` in [r0, r1) walking r0 + lane, r0 + lane + kLanes, ...
__device__ __forceinline__ std::int64_t lane_rows(std::int64_t r0, std::int64_t r1, int lane) {
  const std::int64_t n = r1 - r0 - lane;
  return n > 0 ? (n + kLanes - 1) / kLanes : 0;
}

// Chan's merge of (nb, bm, bq) into (na, am, aq); nb == 0 leaves it unchanged.
__device__ __forceinline__ void chan_merge(float& am, float& aq, float na, float bm, float bq, float nb) {
  if (nb == 0.f) return;
  if (na == 0.f) {
    am = bm;
    aq = bq;
    return;
  }
  const float n = na + nb, delta = bm - am;
  am += delta * (nb / n);
  aq += bq + delta * delta * (na * nb / n);
}

// Per (chunk, channel): mean and sum of squared deviations of the chunk's rows.
template <class T>
__global__ void stats_partials(BatchNormArgs d, std::int64_t chunk_rows, const T* __restrict__ x,
                               float* __restrict__ part_mean, float* __restrict__ part_m2) {
  __shared__ float s_mean[kLanes][kCh], s_m2[kLanes][kCh];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int c = blockIdx.y * kCh + tx;
  const std::int64_t r0 = std::int64_t(blockIdx.x) * chunk_rows;
  const std::int64_t r1 = r0 + chunk_rows < d.m ? r0 + chunk_rows : d.m;
  float n = 0.f, mean = 0.f, m2 = 0.f;
  if (c < d.c) {
    const float shift = cuda::load_f32(x[c]);
    for (std::int64_t r = r0 + ty; r < r1; r += kLanes) {
      const float v = cuda::load_f32(x[r * d.c + c]) - shift;
      n += 1.f;
      const float delta = v - mean;
      mean += delta / n;
      m2 += delta * (v - mean);
    }
  }
  s_mean[ty][tx] = mean;
  s_m2[ty][tx] = m2;
  __syncthreads();
  if (ty != 0 || c >= d.c) return;
  float am = 0.f, aq = 0.f, na = 0.f;
  for (int l = 0; l < kLanes; ++l) {
    const float nb = float(lane_rows(r0, r1, l));
    chan_merge(am, aq, na, s_mean[l][tx], s_m2[l][tx], nb);
    na += nb;
  }
  part_mean[std::int64_t(blockIdx.x) * d.c + c] = am;
  part_m2[std::int64_t(blockIdx.x) * d.c + c] = aq;
}

// Per channel: merges the chunks in order; save_mean/invstd, running stats.
template <class T>
__global__ void stats_finalize(BatchNormArgs d, std::int64_t chunk_rows, std::int64_t chunks,
                               const T* __restrict__ x, const float* __restrict__ part_mean, const float* __restrict__ part_m2,
                               float* __restrict__ running_mean, float* __restrict__ running_var,
                               float* __restrict__ save_mean, float* __restrict__ save_invstd) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= d.c) return;
  float am = 0.f, aq = 0.f, na = 0.f;
  for (std::int64_t k = 0; k < chunks; ++k) {
    const std::int64_t rows = d.m - k * chunk_rows < chunk_rows ? d.m - k * chunk_rows : chunk_rows;
    chan_merge(am, aq, na, part_mean[k * d.c + c], part_m2[k * d.c + c], float(rows));
    na += float(rows);
  }
  const float fm = float(d.m), mom = d.momentum;
  const float mean = am + cuda::load_f32(x[c]);  // the partials are of x - row 0
  save_mean[c] = mean;
  save_invstd[c] = 1.f / sqrtf(aq / fm + d.eps);
  // Each product rounded, then the sum (no FMA): the CPU twin's expression,
  // which data parallelism replays term by term (model/train_step.cpp).
  running_mean[c] = __fadd_rn(__fmul_rn(mom, mean), __fmul_rn(1.f - mom, running_mean[c]));
  running_var[c] = __fadd_rn(__fmul_rn(mom, aq / (fm - 1.f)), __fmul_rn(1.f - mom, running_var[c]));
}

// y = act(gamma * (x - mean) * invstd + beta + residual); invstd is stat[c],
// or 1 / sqrt(stat[c] + eps) when stat holds the (running) variance.
template <class T>
__global__ void normalise_kernel(BatchNormArgs d, bool stat_is_var, const T* x, const T* __restrict__ gamma,
                                 const T* __restrict__ beta, const T* residual, const float* __restrict__ mean,
                                 const float* __restrict__ stat, T* y) {
  const std::int64_t n = d.m * d.c;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const int c = int(i % d.c);
    const float inv = stat_is_var ? 1.f / sqrtf(stat[c] + d.eps) : stat[c];
    float v = (cuda::load_f32(x[i]) - mean[c]) * (cuda::load_f32(gamma[c]) * inv) + cuda::load_f32(beta[c]);
    if (residual) v += cuda::load_f32(residual[i]);
    if (d.relu) v = relu_keep_nan(v);
    y[i] = cuda::store_f32<T>(v);
  }
}

// Per (chunk, channel): sums of dy and dy * xhat, dy masked in place by relu.
template <class T>
__global__ void grad_partials(BatchNormArgs d, std::int64_t chunk_rows, const T* __restrict__ x,
                              const float* __restrict__ mean, const float* __restrict__ invstd,
                              const T* __restrict__ y, T* __restrict__ dy, float* __restrict__ part_s,
                              float* __restrict__ part_x) {
  __shared__ float s_s[kLanes][kCh], s_x[kLanes][kCh];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int c = blockIdx.y * kCh + tx;
  const std::int64_t r0 = std::int64_t(blockIdx.x) * chunk_rows;
  const std::int64_t r1 = r0 + chunk_rows < d.m ? r0 + chunk_rows : d.m;
  float s = 0.f, sx = 0.f;
  if (c < d.c) {
    const float mu = mean[c], is = invstd[c];
    for (std::int64_t r = r0 + ty; r < r1; r += kLanes) {
      const std::int64_t i = r * d.c + c;
      float g = cuda::load_f32(dy[i]);
      if (d.relu && !(cuda::load_f32(y[i]) > 0.f)) {
        g = 0.f;
        dy[i] = cuda::store_f32<T>(0.f);
      }
      s += g;
      sx += g * ((cuda::load_f32(x[i]) - mu) * is);
    }
  }
  s_s[ty][tx] = s;
  s_x[ty][tx] = sx;
  __syncthreads();
  if (ty != 0 || c >= d.c) return;
  float as = 0.f, ax = 0.f;
  for (int l = 0; l < kLanes; ++l) {
    as += s_s[l][tx];
    ax += s_x[l][tx];
  }
  part_s[std::int64_t(blockIdx.x) * d.c + c] = as;
  part_x[std::int64_t(blockIdx.x) * d.c + c] = ax;
}

__global__ void grad_finalize(BatchNormArgs d, std::int64_t chunks, const float* __restrict__ part_s,
                              const float* __restrict__ part_x, float* __restrict__ dgamma,
                              float* __restrict__ dbeta) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= d.c) return;
  float s = 0.f, sx = 0.f;
  for (std::int64_t k = 0; k < chunks; ++k) {
    s += part_s[k * d.c + c];
    sx += part_x[k * d.c + c];
  }
  dbeta[c] = s;
  dgamma[c] = sx;
}

// dx = gamma * invstd * (dy - dbeta / M - xhat * dgamma / M).
template <class T>
__global__ void dx_kernel(BatchNormArgs d, const T* __restrict__ x, const T* __restrict__ gamma,
                          const float* __restrict__ mean, const float* __restrict__ invstd, const T* dy,
                          const float* __restrict__ dgamma, const float* __restrict__ dbeta, T* dx) {
  const std::int64_t n = d.m * d.c;
  const float fm = float(d.m);
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const int c = int(i % d.c);
    const float is = invstd[c];
    const float xh = (cuda::load_f32(x[i]) - mean[c]) * is;
    const float k = cuda::load_f32(gamma[c]) * is;
    dx[i] = cuda::store_f32<T>(k * (cuda::load_f32(dy[i]) - dbeta[c] / fm - xh * (dgamma[c] / fm)));
  }
}

dim3 partials_grid(const BatchNormArgs& d) {
  return dim3(unsigned(batch_norm_chunks(d.m)), cuda::blocks_for(d.c, kCh));
}
unsigned channel_blocks(const BatchNormArgs& d) { return cuda::blocks_for(d.c, kThreads); }

template <class T>
void train_forward(const BatchNormArgs& d, const void* x, const void* gamma, const void* beta, const void* residual,
                   float* running_mean, float* running_var, float* save_mean, float* save_invstd, void* y,
                   float* scratch, cudaStream_t stream) {
  const std::int64_t rows = batch_norm_chunk_rows(d.m), chunks = batch_norm_chunks(d.m);
  float* part_mean = scratch;
  float* part_m2 = scratch + chunks * d.c;
  stats_partials<T><<<partials_grid(d), dim3(kCh, kLanes), 0, stream>>>(d, rows, static_cast<const T*>(x),
                                                                           part_mean, part_m2);
  MF_CUDA_CHECK_LAUNCH();
  stats_finalize<T><<<channel_blocks(d), kThreads, 0, stream>>>(d, rows, chunks, static_cast<const T*>(x),
                                                                part_mean, part_m2, running_mean, running_var,
                                                                save_mean, save_invstd);
  MF_CUDA_CHECK_LAUNCH();
  normalise_kernel<T><<<cuda::grid_for(d.m * d.c, kThreads), kThreads, 0, stream>>>(
      d, false, static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<const T*>(beta),
      static_cast<const T*>(residual), save_mean, save_invstd, static_cast<T*>(y));
  MF_CUDA_CHECK_LAUNCH();
}

template <class T>
void eval_forward(const BatchNormArgs& d, const void* x, const void* gamma, const void* beta, const void* residual,
                  const float* running_mean, const float* running_var, void* y, cudaStream_t stream) {
  if (d.m == 0) return;
  normalise_kernel<T><<<cuda::grid_for(d.m * d.c, kThreads), kThreads, 0, stream>>>(
      d, true, static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<const T*>(beta),
      static_cast<const T*>(residual), running_mean, running_var, static_cast<T*>(y));
  MF_CUDA_CHECK_LAUNCH();
}

template <class T>
void backward(const BatchNormArgs& d, const void* x, const void* gamma, const float* save_mean,
              const float* save_invstd, const void* y, void* dy, void* dx, float* dgamma, float* dbeta,
              float* scratch, cudaStream_t stream) {
  const std::int64_t rows = batch_norm_chunk_rows(d.m), chunks = batch_norm_chunks(d.m);
  float* part_s = scratch;
  float* part_x = scratch + chunks * d.c;
  grad_partials<T><<<partials_grid(d), dim3(kCh, kLanes), 0, stream>>>(
      d, rows, static_cast<const T*>(x), save_mean, save_invstd, static_cast<const T*>(y), static_cast<T*>(dy),
      part_s, part_x);
  MF_CUDA_CHECK_LAUNCH();
  grad_finalize<<<channel_blocks(d), kThreads, 0, stream>>>(d, chunks, part_s, part_x, dgamma, dbeta);
  MF_CUDA_CHECK_LAUNCH();
  dx_kernel<T><<<cuda::grid_for(d.m * d.c, kThreads), kThreads, 0, stream>>>(
      d, static_cast<const T*>(x), static_cast<const T*>(gamma), save_mean, save_invstd, static_cast<const T*>(dy),
      dgamma, dbeta, static_cast<T*>(dx));
  MF_CUDA_CHECK_LAUNCH();
}

}  // namespace

void batch_norm_train_forward_cuda(const BatchNormArgs& d, DType dtype, const void* x, const void* gamma,
                                   const void* beta, const void* residual, float* running_mean, float* running_var,
                                   float* save_mean, float* save_invstd, void* y, float* scratch,
                                   cudaStream_t stream) {
  if (d.m < 2) return;  // refused by the dispatch (kernels/ops_batch_norm.cpp), as are other dtypes
  switch (dtype) {
    case DType::f32:
      return train_forward<float>(d, x, gamma, beta, residual, running_mean, running_var, save_mean, save_invstd,
                                  y, scratch, stream);
    case DType::f16:
      return train_forward<__half>(d, x, gamma, beta, residual, running_mean, running_var, save_mean, save_invstd,
                                   y, scratch, stream);
    case DType::bf16:
      return train_forward<__nv_bfloat16>(d, x, gamma, beta, residual, running_mean, running_var, save_mean,
                                          save_invstd, y, scratch, stream);
    default: return;
  }
}

void batch_norm_eval_forward_cuda(const BatchNormArgs& d, DType dtype, const void* x, const void* gamma,
                                  const void* beta, const void* residual, const float* running_mean,
                                  const float* running_var, void* y, cudaStream_t stream) {
  switch (dtype) {
    case DType::f32:
      return eval_forward<float>(d, x, gamma, beta, residual, running_mean, running_var, y, stream);
    case DType::f16:
      return eval_forward<__half>(d, x, gamma, beta, residual, running_mean, running_var, y, stream);
    case DType::bf16:
      return eval_forward<__nv_bfloat16>(d, x, gamma, beta, residual, running_mean, running_var, y, stream);
    default: return;
  }
}

void batch_norm_backward_cuda(const BatchNormArgs& d, DType dtype, const void* x, const void* gamma,
                              const float* save_mean, const float* save_invstd, const void* y, void* dy, void* dx,
                              float* dgamma, float* dbeta, float* scratch, cudaStream_t stream) {
  if (d.m < 2) return;  // refused by the dispatch (kernels/ops_batch_norm.cpp), as are other dtypes
  switch (dtype) {
    case DType::f32:
      return backward<float>(d, x, gamma, save_mean, save_invstd, y, dy, dx, dgamma, dbeta, scratch, stream);
    case DType::f16:
      return backward<__half>(d, x, gamma, save_mean, save_invstd, y, dy, dx, dgamma, dbeta, scratch, stream);
    case DType::bf16:
      return backward<__nv_bfloat16>(d, x, gamma, save_mean, save_invstd, y, dy, dx, dgamma, dbeta, scratch,
                                     stream);
    default: return;
  }
}

}  // namespace mf::kernels
