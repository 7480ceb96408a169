// class_leak_loss on the GPU (kernels/loss.hpp): logits [B, C (+1 leak head)],
// labels [B] (labels_b, lam with mixup's soft targets), dlogits [B, C (+1)].
// Two modes, picked per call by launch_loss:
//   with the confusion matrix and C <= kSharedConfusionClasses (100):
//   leak_loss_kernel, one block of kThreads (512): pass 1, thread t takes rows
//   t, t + 512, ... (weighted CE numerator, weight, BCE, correct counts), the
//   matrix counted in shared memory with integer atomics (exact, order-free),
//   the float partials added by cuda::block_reduce's fixed tree; pass 2 (same
//   block, the denominator known) writes dlogits.
//   otherwise (no matrix, or more classes): a warp per row, lanes striding the
//   columns and combining by xor butterflies (a row's max, lse and sums have
//   the same bits in every lane and both kernels). loss_stats_kernel: one block
//   of 32 warps, warp w takes rows w, w + 32, ..., the warps' partials added in
//   warp order by one thread. loss_grad_kernel: 8-warp blocks, a warp per row;
//   each block recomputes the weighted-mean denominator (labels only) with the
//   stats kernel's tree, so the op needs no scratch. Shared memory is fixed
//   whatever C; a large confusion matrix is counted with integer atomics.
// Deterministic: no float atomics, every float reduction in a fixed order.
#include "engine/error.hpp"
#include "kernels/block_reduce.cuh"
#include "kernels/cuda_types.cuh"
#include "kernels/launch.cuh"
#include "kernels/loss.hpp"

namespace mf::kernels {

namespace {

constexpr int kThreads = 512;
constexpr int kSharedConfusionClasses = 100;  // C*C ints in shared memory: 40 KB

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
    ClassLeakLossArgs d, const T* __restrict__ logits, const std::int32_t* __restrict__ labels,
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
  den = cuda::block_reduce<kThreads>(den, red, cuda::Add{});
  ce = cuda::block_reduce<kThreads>(ce, red, cuda::Add{});
  correct = cuda::block_reduce<kThreads>(correct, red, cuda::Add{});  // exact: integers below 2^24
  if (d.leak_head) {  // uniform over the block: every thread reaches the same barriers
    bce = cuda::block_reduce<kThreads>(bce, red, cuda::Add{});
    lcorrect = cuda::block_reduce<kThreads>(lcorrect, red, cuda::Add{});
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

// ---- without the confusion matrix: a warp per row, any number of classes ----

constexpr int kWarp = 32;
constexpr int kStatsWarps = 32;                   // loss_stats_kernel: one block of 1024 threads
constexpr int kGradWarps = 8;                     // loss_grad_kernel: blocks of 256 threads
constexpr int kDenLanes = kGradWarps * kWarp;     // the denominator's tree width, in both kernels
constexpr unsigned kMaxGradBlocks = 1024;         // grid-stride over the rows beyond

// The argmax scan of the CPU twin (`if (v > mx)` from column 0) as a total
// order: rank 2 for a NaN in column 0 (it stays the max there), 1 for a number,
// 0 for a NaN elsewhere (never taken), -1 for "no column" (an idle lane); then
// the larger value, then the smaller column (first max wins).
__device__ __forceinline__ int arg_rank(float v, int c) { return isnan(v) ? (c == 0 ? 2 : 0) : 1; }
__device__ __forceinline__ bool arg_beats(int r, float v, int c, int r0, float v0, int c0) {
  if (r != r0) return r > r0;
  if (r == 1 && v != v0) return v > v0;
  return c < c0;
}

struct RowLse {
  float lse;  // max + log(sum exp(z - max)) over the class columns
  int arg;    // the first maximum (the CPU's argmax)
};

// Every lane of the calling warp gets the same bits (xor butterflies). The
// max is the CPU's: z[arg], NaN when z[0] is NaN; a NaN anywhere makes the sum,
// hence the lse, NaN.
template <class T>
__device__ RowLse warp_row_lse(const T* __restrict__ z, int C, int lane) {
  int mr = -1, mc = C;
  float mv = 0.f;
  for (int c = lane; c < C; c += kWarp) {
    const float v = cuda::load_f32(z[c]);
    const int r = arg_rank(v, c);
    if (arg_beats(r, v, c, mr, mv, mc)) { mr = r; mv = v; mc = c; }
  }
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const int orank = __shfl_xor_sync(0xffffffffu, mr, o), oc = __shfl_xor_sync(0xffffffffu, mc, o);
    const float ov = __shfl_xor_sync(0xffffffffu, mv, o);
    if (arg_beats(orank, ov, oc, mr, mv, mc)) { mr = orank; mv = ov; mc = oc; }
  }
  float se = 0.f;
  for (int c = lane; c < C; c += kWarp) se += expf(cuda::load_f32(z[c]) - mv);
  se = cuda::warp_sum(se);
  return {mv + logf(se), mc};
}

// Row i's share of the weighted mean's denominator (loss.cpp's Row::wy):
// w_y, or lam w_ya + (1 - lam) w_yb with soft targets; 0 for a label outside
// [0, C). The explicit _rn operations keep it free of contraction, so both
// kernels compute the same bits.
__device__ __forceinline__ float row_weight(std::int64_t i, int C, const std::int32_t* labels,
                                            const std::int32_t* labels_b, const float* lam, const float* cw) {
  const int y = labels[i];
  const float wy = y >= 0 && y < C ? (cw ? cw[y] : 1.f) : 0.f;
  if (!lam) return wy;
  const int yb = labels_b[i];
  const float wb = yb >= 0 && yb < C ? (cw ? cw[yb] : 1.f) : 0.f;
  const float l = lam[i];
  return __fadd_rn(__fmul_rn(l, wy), __fmul_rn(__fadd_rn(1.f, -l), wb));
}

// sum_i row_weight(i) by the first kDenLanes threads (lane t: rows t, t +
// kDenLanes, ... in order) and a fixed tree over them; every thread of the
// block (blockDim.x >= kDenLanes) calls it and gets the same bits in either
// kernel. sh holds kDenLanes floats.
__device__ float batch_den(std::int64_t batch, int C, const std::int32_t* labels, const std::int32_t* labels_b,
                           const float* lam, const float* cw, float* sh) {
  const int t = int(threadIdx.x);
  float v = 0.f;
  if (t < kDenLanes)
    for (std::int64_t i = t; i < batch; i += kDenLanes) v = __fadd_rn(v, row_weight(i, C, labels, labels_b, lam, cw));
  return cuda::block_reduce<kDenLanes>(v, sh, cuda::Add{});  // a lone add: never contracted
}

// The CE numerator of label y for a row (loss.cpp's n(y)): 0 outside [0, C).
__device__ __forceinline__ float row_ce(float zy_minus_lse, int y, int C, float eps, const float* cw, float smooth) {
  if (y < 0 || y >= C) return 0.f;
  const float wy = cw ? cw[y] : 1.f;
  return (1.f - eps) * wy * -zy_minus_lse + eps / float(C) * smooth;
}

// The metrics: sums and counts[0..2] (+=), step_loss (=). One block of
// kStatsWarps warps.
template <class T>
__global__ void __launch_bounds__(kStatsWarps * kWarp) loss_stats_kernel(
    ClassLeakLossArgs d, const T* __restrict__ logits, const std::int32_t* __restrict__ labels,
    const std::int32_t* __restrict__ labels_b, const float* __restrict__ lam, const float* __restrict__ leak,
    const float* __restrict__ cw, float* sums, std::int32_t* counts, float* step_loss) {
  __shared__ float red[kDenLanes];
  __shared__ float w_ce[kStatsWarps], w_bce[kStatsWarps];
  __shared__ int w_correct[kStatsWarps], w_lcorrect[kStatsWarps];
  const int C = d.classes, L = C + (d.leak_head ? 1 : 0);
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  const float eps = d.label_smoothing;
  float ce = 0.f, bce = 0.f;  // lane-uniform: every lane adds the same row values
  int correct = 0, lcorrect = 0;
  for (std::int64_t i = warp; i < d.batch; i += kStatsWarps) {
    const T* z = logits + i * L;
    const RowLse r = warp_row_lse(z, C, lane);
    float smooth = 0.f;
    for (int c = lane; c < C; c += kWarp) smooth += (cw ? cw[c] : 1.f) * -(cuda::load_f32(z[c]) - r.lse);
    smooth = cuda::warp_sum(smooth);
    const int y = labels[i];
    float num = row_ce(y >= 0 && y < C ? cuda::load_f32(z[y]) - r.lse : 0.f, y, C, eps, cw, smooth);
    int ycount = y;  // the label the metrics count (the dominant one with soft targets)
    if (lam) {
      const int yb = labels_b[i];
      const float nb = row_ce(yb >= 0 && yb < C ? cuda::load_f32(z[yb]) - r.lse : 0.f, yb, C, eps, cw, smooth);
      const float l = lam[i];
      num = l * num + (1.f - l) * nb;
      ycount = l >= 0.5f ? y : yb;
    }
    ce += num;
    correct += ycount >= 0 && ycount < C && r.arg == ycount ? 1 : 0;
    // The confusion matrix past kSharedConfusionClasses: exact integer atomics
    // in global memory (order-free, so still deterministic).
    if (d.confusion && lane == 0 && ycount >= 0 && ycount < C)
      atomicAdd(&counts[kLossCounts + std::int64_t(ycount) * C + r.arg], 1);
    if (d.leak_head) {
      const float zl = cuda::load_f32(z[C]), t = leak[i];
      bce += fmaxf(zl, 0.f) - zl * t + log1pf(expf(-fabsf(zl)));
      lcorrect += (zl > 0.f) == (t > 0.5f) ? 1 : 0;
    }
  }
  if (lane == 0) {
    w_ce[warp] = ce;
    w_bce[warp] = bce;
    w_correct[warp] = correct;
    w_lcorrect[warp] = lcorrect;
  }
  const float den = batch_den(d.batch, C, labels, labels_b, lam, cw, red);  // its barriers publish the partials
  if (threadIdx.x != 0) return;
  ce = bce = 0.f;
  correct = lcorrect = 0;
  for (int w = 0; w < kStatsWarps; ++w) {  // warp order: fixed
    ce += w_ce[w];
    bce += w_bce[w];
    correct += w_correct[w];
    lcorrect += w_lcorrect[w];
  }
  const float class_loss = den > 0.f ? ce / den : 0.f;
  const float leak_loss = d.leak_head && d.batch > 0 ? bce / float(d.batch) : 0.f;  // 0: no leak term
  const float total = d.class_loss_weight * class_loss + d.leak_loss_weight * leak_loss;
  sums[0] += class_loss;
  sums[1] += leak_loss;
  sums[2] += total;
  sums[3] += 1.f;
  counts[0] += std::int32_t(d.batch);
  counts[1] += correct;
  counts[2] += lcorrect;
  if (step_loss) *step_loss = total;
}

// dlogits (overwritten): a warp per row, rows blockIdx.x * kGradWarps + warp,
// then grid-strided.
template <class T>
__global__ void __launch_bounds__(kGradWarps * kWarp) loss_grad_kernel(
    ClassLeakLossArgs d, const T* __restrict__ logits, const std::int32_t* __restrict__ labels,
    const std::int32_t* __restrict__ labels_b, const float* __restrict__ lam, const float* __restrict__ leak,
    const float* __restrict__ cw, const float* __restrict__ loss_scale, T* __restrict__ dlogits) {
  __shared__ float red[kDenLanes];
  const int C = d.classes, L = C + (d.leak_head ? 1 : 0);
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  const float eps = d.label_smoothing;
  const float den = batch_den(d.batch, C, labels, labels_b, lam, cw, red);
  float wsum_all = float(C);  // sum_c w_c: exact for unit weights (C < 2^24), as the CPU's sequential sum
  if (cw) {
    float v = 0.f;
    for (int c = int(threadIdx.x); c < C; c += kDenLanes) v += cw[c];
    wsum_all = cuda::block_reduce<kDenLanes>(v, red, cuda::Add{});
  }
  const float scale = (loss_scale ? *loss_scale : 1.f) * d.grad_scale;
  const float gc = den > 0.f ? d.class_loss_weight * scale / den : 0.f;
  const float gl = d.batch > 0 ? d.leak_loss_weight * scale / float(d.batch) : 0.f;
  for (std::int64_t i = std::int64_t(blockIdx.x) * kGradWarps + warp; i < d.batch;
       i += std::int64_t(gridDim.x) * kGradWarps) {
    const T* z = logits + i * L;
    T* g = dlogits + i * L;
    const float lse = warp_row_lse(z, C, lane).lse;
    const int y = labels[i], yb = lam ? labels_b[i] : -1;
    const float l = lam ? lam[i] : 1.f;
    for (int c = lane; c < C; c += kWarp) {
      const float lp = cuda::load_f32(z[c]) - lse;
      float v = class_grad(lp, y, c, C, eps, cw, wsum_all);
      if (lam) v = l * v + (1.f - l) * class_grad(lp, yb, c, C, eps, cw, wsum_all);
      g[c] = cuda::store_f32<T>(v * gc);
    }
    if (d.leak_head && lane == 0) {
      const float zl = cuda::load_f32(z[C]);
      g[C] = cuda::store_f32<T>((1.f / (1.f + expf(-zl)) - leak[i]) * gl);
    }
  }
}

template <class T>
void launch_loss(const ClassLeakLossArgs& d, const void* logits, const std::int32_t* labels,
                 const std::int32_t* labels_b, const float* lam, const float* leak,
                 const float* cw, const float* loss_scale, void* dlogits, float* sums, std::int32_t* counts,
                 float* step_loss, cudaStream_t stream) {
  using D = cuda::device_t<T>;
  if (!d.confusion || d.classes > kSharedConfusionClasses) {  // any C: the warp-per-row kernels
    loss_stats_kernel<D><<<1, kStatsWarps * kWarp, 0, stream>>>(d, static_cast<const D*>(logits), labels, labels_b,
                                                                 lam, leak, cw, sums, counts, step_loss);
    MF_CUDA_CHECK_LAUNCH();
    if (d.batch == 0) return;
    const unsigned blocks = cuda::grid_for(d.batch, kGradWarps, kMaxGradBlocks);
    loss_grad_kernel<D><<<blocks, kGradWarps * kWarp, 0, stream>>>(d, static_cast<const D*>(logits), labels,
                                                                    labels_b, lam, leak, cw, loss_scale,
                                                                    static_cast<D*>(dlogits));
    MF_CUDA_CHECK_LAUNCH();
    return;
  }
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
  constexpr unsigned threads = cuda::kElementwiseThreads;  // a thread per row, grid-stride
  head_probs_kernel<D><<<cuda::grid_for(batch, threads), threads, 0, stream>>>(batch, classes,
                                                                              static_cast<const D*>(logits), probs,
                                                                              leak_prob);
  MF_CUDA_CHECK_LAUNCH();
}

}  // namespace

void class_leak_loss_cuda(const ClassLeakLossArgs& d, DType dtype, const void* logits, const std::int32_t* labels,
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
