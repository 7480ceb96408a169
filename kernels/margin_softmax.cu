// margin_softmax_loss on the GPU, variant 1 (kernels/margin_softmax.hpp has
// the contract and the scratch layout). Five kernels on the stream:
//   1. norms: one block per emb row and per weight row, max(|row|, 1e-12)
//   2. forward: one block per sample; each warp takes classes warp, warp + 8,
//      ... and dots xn_b with wn_c (lanes over D, a fixed shuffle tree); then
//      the block finds the plain argmax, the margined log-softmax (fixed tree
//      sums), and writes cos and g = d loss / d cos * scales / N to scratch
//   3. demb: one block per sample, threads over D, sum over classes in order
//   4. dweight: one block per class row, threads over D, sum over samples in order
//   5. finalize: one block; the loss sum over samples in order (thread 0), the
//      confusion matrix with integer atomics (exact, order-free)
// Deterministic: no float atomics; every float sum has a fixed order. Reads
// the weight once per sample (B reads of C x D, mostly from L2): a GEMM-shaped
// cost that variant 1 does not tile.
#include "engine/error.hpp"
#include "kernels/block_reduce.cuh"
#include "kernels/cuda_types.cuh"
#include "kernels/loss.hpp"
#include "kernels/margin_softmax.hpp"

namespace mf::kernels {

namespace {

constexpr int kNormThreads = 128;
constexpr int kFwdThreads = 256;
constexpr int kFwdWarps = kFwdThreads / 32;
constexpr int kGradThreads = 128;
constexpr int kFinalizeThreads = 256;  // they count the confusion matrix; thread 0 sums in sample order
constexpr float kNormEps = 1e-12f;

using cuda::Add;
using cuda::block_argmax;
using cuda::block_reduce;
using cuda::warp_sum;

// The scratch's parts (margin_softmax.hpp's layout).
struct Scratch {
  float* nx;      // [B]
  float* nw;      // [C]
  float* sample;  // [B][3]: loss, pred, t
  float* cos;     // [B, C]
  float* g;       // [B, C]
};

Scratch split_scratch(float* s, std::int64_t B, std::int64_t C) {
  Scratch r;
  r.nx = s;
  r.nw = r.nx + B;
  r.sample = r.nw + C;
  r.cos = r.sample + 3 * B;
  r.g = r.cos + B * C;
  return r;
}

// max(|row|, 1e-12) of emb's rows (blocks 0..B-1) and weight's (B..B+C-1); NaN propagates.
template <class T>
__global__ void __launch_bounds__(kNormThreads) norms_kernel(std::int64_t B, int D, const T* __restrict__ emb,
                                                             const T* __restrict__ w, float* __restrict__ nx,
                                                             float* __restrict__ nw) {
  __shared__ float sh[kNormThreads];
  const std::int64_t r = blockIdx.x;
  const T* x = r < B ? emb + r * D : w + (r - B) * D;
  float ss = 0.f;
  for (int j = threadIdx.x; j < D; j += kNormThreads) {
    const float v = cuda::load_f32(x[j]);
    ss += v * v;
  }
  ss = block_reduce<kNormThreads>(ss, sh, Add{});
  if (threadIdx.x == 0) {
    const float raw = sqrtf(ss), n = raw < kNormEps ? kNormEps : raw;
    if (r < B) nx[r] = n;
    else nw[r - B] = n;
  }
}

template <class T>
__global__ void __launch_bounds__(kFwdThreads) forward_kernel(MarginSoftmaxArgs d, MarginConsts k,
                                                              const T* __restrict__ emb, const T* __restrict__ w,
                                                              const std::int32_t* __restrict__ labels,
                                                              const float* __restrict__ loss_scale, Scratch sc) {
  __shared__ float shv[kFwdThreads];
  __shared__ int shi[kFwdThreads];
  const std::int64_t b = blockIdx.x;
  const int C = d.classes, D = d.dim;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float nvalid = 0.f;  // exact: integers below 2^24
  for (std::int64_t i = threadIdx.x; i < d.batch; i += kFwdThreads)
    nvalid += (labels[i] >= 0 && labels[i] < C) ? 1.f : 0.f;
  nvalid = block_reduce<kFwdThreads>(nvalid, shv, Add{});

  const T* x = emb + b * D;
  const float nx = sc.nx[b];
  float* cos = sc.cos + b * C;
  float* g = sc.g + b * C;
  for (int c = warp; c < C; c += kFwdWarps) {
    const T* wc = w + std::int64_t(c) * D;
    const float nw = sc.nw[c];
    float dot = 0.f;
    for (int j = lane; j < D; j += 32) dot += (cuda::load_f32(x[j]) / nx) * (cuda::load_f32(wc[j]) / nw);
    dot = warp_sum(dot);  // lane 0: the shfl_down tree's bits (block_reduce.cuh)
    if (lane == 0) cos[c] = dot;
  }
  __syncthreads();
  float bv = 0.f;
  int bi = -1;
  for (int c = threadIdx.x; c < C; c += kFwdThreads)
    if (bi < 0 || cos[c] > bv) { bv = cos[c]; bi = c; }
  const int pred = block_argmax<kFwdThreads>(bv, bi, shv, shi);

  const int y = labels[b];
  if (y < 0 || y >= C) {  // ignored (uniform over the block)
    for (int c = threadIdx.x; c < C; c += kFwdThreads) g[c] = 0.f;
    if (threadIdx.x == 0) {
      sc.sample[3 * b] = 0.f;
      sc.sample[3 * b + 1] = float(pred);
      sc.sample[3 * b + 2] = 0.f;
    }
    return;
  }
  const float s = d.scale;
  const MarginTarget mt = margin_target(d.type, d.margin, k, cos[y]);
  // Each logit is one rounded product (__fmul_rn: nvcc must not fuse it into
  // `z - mx`), so the largest one gives exp(0) = 1 exactly, as on the CPU twin;
  // with one class the gradient is then exactly 0.
  auto logit = [&](int c) { return __fmul_rn(s, c == y ? mt.f : cos[c]); };
  float mx = -INFINITY;
  for (int c = threadIdx.x; c < C; c += kFwdThreads) mx = fmaxf(mx, logit(c));
  mx = block_reduce<kFwdThreads>(mx, shv, cuda::FMax{});  // NaN reaches se and the loss
  float se = 0.f;
  for (int c = threadIdx.x; c < C; c += kFwdThreads) se += expf(logit(c) - mx);
  se = block_reduce<kFwdThreads>(se, shv, Add{});
  const float lse = mx + logf(se);
  const float gs = (loss_scale ? *loss_scale : 1.f) * d.grad_scale / nvalid;
  float t = 0.f;
  for (int c = threadIdx.x; c < C; c += kFwdThreads) {
    const float p = expf(logit(c) - lse);
    const float gc = c == y ? s * (p - 1.f) * mt.df * gs : s * p * gs;
    g[c] = gc;
    t += gc * cos[c];
  }
  t = block_reduce<kFwdThreads>(t, shv, Add{});
  if (threadIdx.x == 0) {
    sc.sample[3 * b] = lse - logit(y);
    sc.sample[3 * b + 1] = float(pred);
    sc.sample[3 * b + 2] = t;
  }
}

// demb_b = (sum_c g[b][c] wn_c - t_b xn_b) / nx_b (no radial term for a clamped norm).
template <class T>
__global__ void __launch_bounds__(kGradThreads) demb_kernel(MarginSoftmaxArgs d, const T* __restrict__ emb,
                                                            const T* __restrict__ w, Scratch sc,
                                                            T* __restrict__ demb) {
  const std::int64_t b = blockIdx.x;
  const int C = d.classes, D = d.dim;
  const float nx = sc.nx[b];
  const float t = nx == kNormEps ? 0.f : sc.sample[3 * b + 2];
  const float* g = sc.g + b * C;
  for (int j = threadIdx.x; j < D; j += kGradThreads) {
    float acc = 0.f;
    for (int c = 0; c < C; ++c) acc += g[c] * (cuda::load_f32(w[std::int64_t(c) * D + j]) / sc.nw[c]);
    const float xn = cuda::load_f32(emb[b * D + j]) / nx;
    demb[b * D + j] = cuda::store_f32<T>((acc - t * xn) / nx);
  }
}

// dweight_c = (sum_b g[b][c] xn_b - u_c wn_c) / nw_c, u_c = sum_b g[b][c] cos[b][c].
template <class T>
__global__ void __launch_bounds__(kGradThreads) dweight_kernel(MarginSoftmaxArgs d, const T* __restrict__ emb,
                                                               const T* __restrict__ w, Scratch sc,
                                                               float* __restrict__ dweight) {
  const std::int64_t c = blockIdx.x;
  const int C = d.classes, D = d.dim;
  const float nw = sc.nw[c];
  float u = 0.f;  // every thread sums the same sequence: the same bits
  for (std::int64_t b = 0; b < d.batch; ++b) u += sc.g[b * C + c] * sc.cos[b * C + c];
  if (nw == kNormEps) u = 0.f;
  for (int j = threadIdx.x; j < D; j += kGradThreads) {
    float acc = 0.f;
    for (std::int64_t b = 0; b < d.batch; ++b)
      acc += sc.g[b * C + c] * (cuda::load_f32(emb[b * D + j]) / sc.nx[b]);
    const float wn = cuda::load_f32(w[c * D + j]) / nw;
    dweight[c * D + j] = (acc - u * wn) / nw;
  }
}

__global__ void finalize_kernel(MarginSoftmaxArgs d, const std::int32_t* __restrict__ labels, Scratch sc,
                                float* sums, std::int32_t* counts, bool confusion, float* step_loss) {
  const int C = d.classes;
  for (std::int64_t b = threadIdx.x; confusion && b < d.batch; b += blockDim.x) {
    const int y = labels[b];
    if (y >= 0 && y < C) atomicAdd(&counts[kLossCounts + std::int64_t(y) * C + int(sc.sample[3 * b + 1])], 1);
  }
  if (threadIdx.x != 0) return;
  float loss = 0.f;
  std::int32_t n = 0, correct = 0;
  for (std::int64_t b = 0; b < d.batch; ++b) {
    const int y = labels[b];
    if (y < 0 || y >= C) continue;
    loss += sc.sample[3 * b];
    ++n;
    correct += int(sc.sample[3 * b + 1]) == y;
  }
  loss = n > 0 ? loss / float(n) : 0.f;
  sums[0] += loss;
  sums[2] += loss;
  sums[3] += 1.f;
  counts[0] += std::int32_t(d.batch);
  counts[1] += correct;
  if (step_loss) *step_loss = loss;
}

template <class T>
void launch(const MarginSoftmaxArgs& d, const void* emb_v, const void* w_v, const std::int32_t* labels,
            const float* loss_scale, void* demb_v, float* dweight, float* sums, std::int32_t* counts,
            bool confusion, float* step_loss, float* scratch, cudaStream_t stream) {
  using Dt = cuda::device_t<T>;
  const Dt* emb = static_cast<const Dt*>(emb_v);
  const Dt* w = static_cast<const Dt*>(w_v);
  const std::int64_t B = d.batch, C = d.classes;
  const Scratch sc = split_scratch(scratch, B, C);
  norms_kernel<Dt><<<unsigned(B + C), kNormThreads, 0, stream>>>(B, d.dim, emb, w, sc.nx, sc.nw);
  MF_CUDA_CHECK_LAUNCH();
  if (B > 0) {
    forward_kernel<Dt><<<unsigned(B), kFwdThreads, 0, stream>>>(d, margin_consts(d.margin), emb, w, labels,
                                                                loss_scale, sc);
    MF_CUDA_CHECK_LAUNCH();
    demb_kernel<Dt><<<unsigned(B), kGradThreads, 0, stream>>>(d, emb, w, sc, static_cast<Dt*>(demb_v));
    MF_CUDA_CHECK_LAUNCH();
  }
  dweight_kernel<Dt><<<unsigned(C), kGradThreads, 0, stream>>>(d, emb, w, sc, dweight);
  MF_CUDA_CHECK_LAUNCH();
  finalize_kernel<<<1, kFinalizeThreads, 0, stream>>>(d, labels, sc, sums, counts, confusion, step_loss);
  MF_CUDA_CHECK_LAUNCH();
}

}  // namespace

void margin_softmax_loss_cuda(const MarginSoftmaxArgs& d, DType dtype, const void* emb, const void* weight,
                              const std::int32_t* labels, const float* loss_scale, void* demb, float* dweight,
                              float* sums, std::int32_t* counts, bool confusion, float* step_loss, float* scratch,
                              cudaStream_t stream) {
  switch (dtype) {
    case DType::f32:
      return launch<float>(d, emb, weight, labels, loss_scale, demb, dweight, sums, counts, confusion, step_loss,
                           scratch, stream);
    case DType::f16:
      return launch<f16>(d, emb, weight, labels, loss_scale, demb, dweight, sums, counts, confusion, step_loss,
                         scratch, stream);
    case DType::bf16:
      return launch<bf16>(d, emb, weight, labels, loss_scale, demb, dweight, sums, counts, confusion, step_loss,
                          scratch, stream);
    default: break;  // the dispatch (ops_margin_softmax.cpp) admits only these
  }
}

}  // namespace mf::kernels
