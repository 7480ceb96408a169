// leak_loss on the GPU: one block of 512 threads (the loss is tiny next to the
// GEMMs: B rows of C+1 logits, C without the leak head). Pass 1: each thread
// takes rows t, t+512, ..., accumulating its weighted CE numerator, weight,
// BCE and correct counts; the confusion matrix is counted in shared memory with
// integer atomics (exact, order-free); the float partials are added in a fixed
// tree. Pass 2
// (same block, after the denominator is known): the logits' gradients.
// Deterministic: no float atomics. Reads the logits twice, writes dlogits once.
#include "engine/error.hpp"
#include "kernels/cuda_types.cuh"
#include "kernels/loss.hpp"

namespace mf::kernels {

namespace {

constexpr int kThreads = 512;

__device__ float block_sum(float v, float* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  const float r = sh[0];
  __syncthreads();
  return r;
}

// d(row numerator of label y)/d(logit c) from lp = z_c - lse (loss.cpp's
// class_grad): 0 for a label outside [0, C).
__device__ __forceinline__ float class_grad(float lp, int y, int c, int C, float eps, const float* cw,
                                            float wsum_all) {
  if (y < 0 || y >= C) return 0.f;
  const float wy = cw ? cw[y] : 1.f;
  const float a = (1.f - eps) * wy + eps / float(C) * wsum_all;
  const float wc = cw ? cw[c] : 1.f;
  return expf(lp) * a - eps / float(C) * wc - (c == y ? (1.f - eps) * wy : 0.f);
}

template <class T>
__global__ void __launch_bounds__(kThreads) leak_loss_kernel(
    LeakLossDims d, const T* __restrict__ logits, const std::int32_t* __restrict__ labels,
    const std::int32_t* __restrict__ labels_b, const float* __restrict__ lam, const float* __restrict__ leak,
    const float* __restrict__ cw, const float* __restrict__ loss_scale,
    T* __restrict__ dlogits, float* sums, std::int32_t* counts, float* step_loss) {
  extern __shared__ int conf[];  // C*C
  __shared__ float red[kThreads];
  const int C = d.classes, L = C + (d.leak_head ? 1 : 0);
  const float eps = d.label_smoothing;
  for (int i = threadIdx.x; i < C * C; i += kThreads) conf[i] = 0;
  __syncthreads();
  float wsum_all = 0.f;
  for (int c = 0; c < C; ++c) wsum_all += cw ? cw[c] : 1.f;

  float den = 0.f, ce = 0.f, bce = 0.f, correct = 0.f, lcorrect = 0.f;
  for (std::int64_t i = threadIdx.x; i < d.batch; i += kThreads) {
    const T* z = logits + i * L;
    float mx = cuda::load_f32(z[0]);
    int arg = 0;
    for (int c = 1; c < C; ++c) {
      const float v = cuda::load_f32(z[c]);
      if (v > mx) { mx = v; arg = c; }
    }
    float se = 0.f;
    for (int c = 0; c < C; ++c) se += expf(cuda::load_f32(z[c]) - mx);
    const float lse = mx + logf(se);
    const int y = labels[i];
    if (lam) {  // soft targets (loss.hpp): the same terms, weighted lam and 1 - lam
      const int yb = labels_b[i];
      const float l = lam[i];
      float ce_a = 0.f, w_a = 0.f, ce_b = 0.f, w_b = 0.f;
      if ((y >= 0 && y < C) || (yb >= 0 && yb < C)) {
        float smooth = 0.f;
        for (int c = 0; c < C; ++c) smooth += (cw ? cw[c] : 1.f) * -(cuda::load_f32(z[c]) - lse);
        if (y >= 0 && y < C) {
          w_a = cw ? cw[y] : 1.f;
          ce_a = (1.f - eps) * w_a * -(cuda::load_f32(z[y]) - lse) + eps / float(C) * smooth;
        }
        if (yb >= 0 && yb < C) {
          w_b = cw ? cw[yb] : 1.f;
          ce_b = (1.f - eps) * w_b * -(cuda::load_f32(z[yb]) - lse) + eps / float(C) * smooth;
        }
      }
      den += l * w_a + (1.f - l) * w_b;
      ce += l * ce_a + (1.f - l) * ce_b;
      const int yd = l >= 0.5f ? y : yb;  // the dominant label for the metrics
      if (yd >= 0 && yd < C) {
        correct += arg == yd ? 1.f : 0.f;
        atomicAdd(&conf[yd * C + arg], 1);
      }
    } else if (y >= 0 && y < C) {
      float smooth = 0.f;
      for (int c = 0; c < C; ++c) smooth += (cw ? cw[c] : 1.f) * (lse - cuda::load_f32(z[c]));
      const float wy = cw ? cw[y] : 1.f;
      den += wy;
      ce += (1.f - eps) * wy * (lse - cuda::load_f32(z[y])) + eps / float(C) * smooth;
      correct += arg == y ? 1.f : 0.f;
      atomicAdd(&conf[y * C + arg], 1);
    }
    if (d.leak_head) {
      const float zl = cuda::load_f32(z[C]), t = leak[i];
      bce += fmaxf(zl, 0.f) - zl * t + log1pf(expf(-fabsf(zl)));
      lcorrect += ((zl > 0.f) == (t > 0.5f)) ? 1.f : 0.f;
    }
  }
  den = block_sum(den, red);
  ce = block_sum(ce, red);
  correct = block_sum(correct, red);  // exact: integers below 2^24
  if (d.leak_head) {  // uniform over the block: every thread reaches the same barriers
    bce = block_sum(bce, red);
    lcorrect = block_sum(lcorrect, red);
  }

  const float scale = (loss_scale ? *loss_scale : 1.f) * d.grad_scale;
  const float class_loss = den > 0.f ? ce / den : 0.f;
  const float leak_loss = d.leak_head && d.batch > 0 ? bce / float(d.batch) : 0.f;  // 0: no leak term
  const float gc = den > 0.f ? d.class_loss_weight * scale / den : 0.f;
  const float gl = d.batch > 0 ? d.leak_loss_weight * scale / float(d.batch) : 0.f;
  if (threadIdx.x == 0) {
    const float total = d.class_loss_weight * class_loss + d.leak_loss_weight * leak_loss;
    sums[0] += class_loss;
    sums[1] += leak_loss;
    sums[2] += total;
    sums[3] += 1.f;
    counts[0] += std::int32_t(d.batch);
    counts[1] += std::int32_t(correct);
    counts[2] += std::int32_t(lcorrect);
    if (step_loss) *step_loss = total;
  }
  for (int i = threadIdx.x; i < C * C; i += kThreads) counts[kLossCounts + i] += conf[i];

  for (std::int64_t i = threadIdx.x; i < d.batch; i += kThreads) {
    const T* z = logits + i * L;
    T* g = dlogits + i * L;
    float mx = cuda::load_f32(z[0]);
    for (int c = 1; c < C; ++c) mx = fmaxf(mx, cuda::load_f32(z[c]));
    float se = 0.f;
    for (int c = 0; c < C; ++c) se += expf(cuda::load_f32(z[c]) - mx);
    const float lse = mx + logf(se);
    for (int c = 0; c < C; ++c) {
      const float lp = cuda::load_f32(z[c]) - lse;
      float v = class_grad(lp, labels[i], c, C, eps, cw, wsum_all);
      if (lam) {
        const float l = lam[i];
        v = l * v + (1.f - l) * class_grad(lp, labels_b[i], c, C, eps, cw, wsum_all);
      }
      g[c] = cuda::store_f32<T>(v * gc);
    }
    if (d.leak_head) {
      const float zl = cuda::load_f32(z[C]);
      g[C] = cuda::store_f32<T>((1.f / (1.f + expf(-zl)) - leak[i]) * gl);
    }
  }
}

template <class T>
__global__ void head_probs_kernel(std::int64_t batch, int C, const T* __restrict__ logits,
                                  float* __restrict__ probs, float* __restrict__ leak_prob) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < batch;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const T* z = logits + i * (C + (leak_prob ? 1 : 0));
    float mx = cuda::load_f32(z[0]);
    for (int c = 1; c < C; ++c) mx = fmaxf(mx, cuda::load_f32(z[c]));
    float se = 0.f;
    for (int c = 0; c < C; ++c) se += expf(cuda::load_f32(z[c]) - mx);
    for (int c = 0; c < C; ++c) probs[i * C + c] = expf(cuda::load_f32(z[c]) - mx) / se;
    if (leak_prob) leak_prob[i] = 1.f / (1.f + expf(-cuda::load_f32(z[C])));
  }
}

template <class T>
void launch_loss(const LeakLossDims& d, const void* logits, const std::int32_t* labels,
                 const std::int32_t* labels_b, const float* lam, const float* leak,
                 const float* cw, const float* loss_scale, void* dlogits, float* sums, std::int32_t* counts,
                 float* step_loss, cudaStream_t stream) {
  using D = cuda::device_t<T>;
  const std::size_t shmem = std::size_t(d.classes) * d.classes * sizeof(int);
  leak_loss_kernel<D><<<1, kThreads, shmem, stream>>>(d, static_cast<const D*>(logits), labels, labels_b, lam,
                                                      leak, cw,
                                                      loss_scale, static_cast<D*>(dlogits), sums, counts,
                                                      step_loss);
  MF_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_probs(std::int64_t batch, int classes, const void* logits, float* probs, float* leak_prob,
                  cudaStream_t stream) {
  using D = cuda::device_t<T>;
  head_probs_kernel<D><<<cuda::grid_for(batch, 256), 256, 0, stream>>>(batch, classes,
                                                                      static_cast<const D*>(logits), probs,
                                                                      leak_prob);
  MF_CUDA_CHECK_LAUNCH();
}

}  // namespace

void leak_loss_cuda(const LeakLossDims& d, DType dtype, const void* logits, const std::int32_t* labels,
                    const std::int32_t* labels_b, const float* lam, const float* leak, const float* class_weight,
                    const float* loss_scale, void* dlogits, float* sums, std::int32_t* counts, float* step_loss,
                    cudaStream_t stream) {
  switch (dtype) {
    case DType::f32: return launch_loss<float>(d, logits, labels, labels_b, lam, leak, class_weight, loss_scale, dlogits, sums, counts, step_loss, stream);
    case DType::f16: return launch_loss<f16>(d, logits, labels, labels_b, lam, leak, class_weight, loss_scale, dlogits, sums, counts, step_loss, stream);
    case DType::bf16: return launch_loss<bf16>(d, logits, labels, labels_b, lam, leak, class_weight, loss_scale, dlogits, sums, counts, step_loss, stream);
    default: break;
  }
}

void head_probs_cuda(std::int64_t batch, int classes, DType dtype, const void* logits, float* probs,
                     float* leak_prob, cudaStream_t stream) {
  if (batch == 0) return;
  switch (dtype) {
    case DType::f32: return launch_probs<float>(batch, classes, logits, probs, leak_prob, stream);
    case DType::f16: return launch_probs<f16>(batch, classes, logits, probs, leak_prob, stream);
    case DType::bf16: return launch_probs<bf16>(batch, classes, logits, probs, leak_prob, stream);
    default: break;
  }
}

}  // namespace mf::kernels
