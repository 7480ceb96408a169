// angleproto_loss on the GPU, variant 1 (kernels/angleproto.hpp has the
// contract and the scratch layout). Four kernels on the stream:
//   1. prep: one block per class; the query and the prototype (mean of the
//      other M-1 segments, summed in segment order), their clamped norms
//      (fixed tree sums) and the normalised vectors qn, pn into scratch
//   2. forward: one block per query row i; each warp takes prototypes
//      j = warp, warp + 8, ... and dots qn_i with pn_j (lanes over D, a fixed
//      shuffle tree); then the block's argmax of the logits, their
//      log-softmax (fixed tree sums), g_ij = d loss / d cos_ij * S and the
//      row's loss and partial sums (t, dw, db)
//   3. grad: blocks 0..N-1 write d q_i into demb row i*M (sum over j in
//      order), blocks N..2N-1 write d p_j / (M-1) into the class's other M-1
//      rows (sum over i in order); threads over D
//   4. finalize: one thread; loss, dw, db and the correct count summed over
//      rows in order; sums, counts, dwb and step_loss written
// Deterministic: no atomics; every float sum has a fixed order.
#include "engine/error.hpp"
#include "kernels/angleproto.hpp"
#include "kernels/block_reduce.cuh"
#include "kernels/cuda_types.cuh"
#include "kernels/loss.hpp"

namespace mf::kernels {

namespace {

constexpr int kPrepThreads = 128;
constexpr int kFwdThreads = 256;
constexpr int kFwdWarps = kFwdThreads / 32;
constexpr int kGradThreads = 128;
constexpr int kFinalizeThreads = 32;  // one warp; thread 0 sums the rows in order
constexpr int kRowStats = 5;  // loss, pred, t, dw, db

using cuda::Add;
using cuda::block_argmax;
using cuda::block_reduce;
using cuda::MaxNan;
using cuda::warp_sum;

// The scratch's parts (angleproto.hpp's layout).
struct Scratch {
  float* qn;   // [N, D]
  float* pn;   // [N, D]
  float* nq;   // [N]
  float* np;   // [N]
  float* cos;  // [N, N]
  float* g;    // [N, N]
  float* row;  // [N][kRowStats]
};

Scratch split_scratch(float* s, std::int64_t N, std::int64_t D) {
  Scratch r;
  r.qn = s;
  r.pn = r.qn + N * D;
  r.nq = r.pn + N * D;
  r.np = r.nq + N;
  r.cos = r.np + N;
  r.g = r.cos + N * N;
  r.row = r.g + N * N;
  return r;
}

__device__ float clamp_norm(float ss) {
  const float raw = sqrtf(ss);
  return raw < kAngleProtoNormEps ? kAngleProtoNormEps : raw;
}

// Block c: q_c, p_c, their clamped norms and qn_c, pn_c.
template <class T>
__global__ void __launch_bounds__(kPrepThreads) prep_kernel(AngleProtoArgs d, const T* __restrict__ emb, Scratch sc) {
  __shared__ float sh[kPrepThreads];
  const std::int64_t c = blockIdx.x;
  const int M = d.per_class, D = d.dim;
  const T* x = emb + c * M * D;
  float* q = sc.qn + c * D;
  float* p = sc.pn + c * D;
  float sq = 0.f, sp = 0.f;
  for (int k = threadIdx.x; k < D; k += kPrepThreads) {
    const float qv = cuda::load_f32(x[k]);
    float acc = 0.f;
    for (int m = 1; m < M; ++m) acc += cuda::load_f32(x[std::int64_t(m) * D + k]);
    const float pv = acc / float(M - 1);
    q[k] = qv;
    p[k] = pv;
    sq += qv * qv;
    sp += pv * pv;
  }
  const float nq = clamp_norm(block_reduce<kPrepThreads>(sq, sh, Add{}));
  const float np = clamp_norm(block_reduce<kPrepThreads>(sp, sh, Add{}));
  for (int k = threadIdx.x; k < D; k += kPrepThreads) {  // the elements this thread wrote
    q[k] = q[k] / nq;
    p[k] = p[k] / np;
  }
  if (threadIdx.x == 0) {
    sc.nq[c] = nq;
    sc.np[c] = np;
  }
}

// Query row i: cos_ij, the loss, g_ij and the row's partial sums.
__global__ void __launch_bounds__(kFwdThreads) forward_kernel(AngleProtoArgs d, const float* __restrict__ wb,
                                                              const float* __restrict__ loss_scale, Scratch sc) {
  __shared__ float shv[kFwdThreads];
  __shared__ int shi[kFwdThreads];
  const int i = int(blockIdx.x);
  const int N = d.classes, D = d.dim;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const float* q = sc.qn + std::int64_t(i) * D;
  float* cos = sc.cos + std::int64_t(i) * N;
  float* g = sc.g + std::int64_t(i) * N;
  for (int j = warp; j < N; j += kFwdWarps) {
    const float* p = sc.pn + std::int64_t(j) * D;
    float dot = 0.f;
    for (int k = lane; k < D; k += 32) dot += q[k] * p[k];
    dot = warp_sum(dot);  // lane 0: the shfl_down tree's bits (block_reduce.cuh)
    if (lane == 0) cos[j] = dot;
  }
  __syncthreads();
  const float w_eff = angleproto_w_eff(wb[0]), b = wb[1];
  float bv = 0.f, mx = -INFINITY;
  int bi = -1;
  for (int j = threadIdx.x; j < N; j += kFwdThreads) {
    const float z = w_eff * cos[j] + b;
    if (bi < 0 || z > bv) {
      bv = z;
      bi = j;
    }
    mx = MaxNan{}(mx, z);
  }
  const int pred = block_argmax<kFwdThreads>(bv, bi, shv, shi);
  mx = block_reduce<kFwdThreads>(mx, shv, MaxNan{});
  float se = 0.f;
  for (int j = threadIdx.x; j < N; j += kFwdThreads) se += expf(w_eff * cos[j] + b - mx);
  const float lse = mx + logf(block_reduce<kFwdThreads>(se, shv, Add{}));
  const float s = (loss_scale ? *loss_scale : 1.f) * d.grad_scale / float(N);
  float t = 0.f, dw = 0.f, db = 0.f;
  for (int j = threadIdx.x; j < N; j += kFwdThreads) {
    const float dz = (expf(w_eff * cos[j] + b - lse) - (j == i ? 1.f : 0.f)) * s;
    const float gj = w_eff * dz;
    g[j] = gj;
    t += gj * cos[j];
    dw += dz * cos[j];
    db += dz;
  }
  t = block_reduce<kFwdThreads>(t, shv, Add{});
  dw = block_reduce<kFwdThreads>(dw, shv, Add{});
  db = block_reduce<kFwdThreads>(db, shv, Add{});
  if (threadIdx.x == 0) {
    float* r = sc.row + std::int64_t(i) * kRowStats;
    r[0] = lse - (w_eff * cos[i] + b);
    r[1] = float(pred);
    r[2] = t;
    r[3] = dw;
    r[4] = db;
  }
}

// Blocks 0..N-1: d q_i = (sum_j g_ij pn_j - t_i qn_i) / nq_i into demb row i*M.
// Blocks N..2N-1 (j = block - N): d p_j = (sum_i g_ij qn_i - u_j pn_j) / np_j,
// u_j = sum_i g_ij cos_ij, divided by M-1 into rows j*M+1 .. j*M+M-1.
// A clamped norm passes no radial term (the contract).
template <class T>
__global__ void __launch_bounds__(kGradThreads) grad_kernel(AngleProtoArgs d, Scratch sc, T* __restrict__ demb) {
  const int N = d.classes, M = d.per_class, D = d.dim;
  const bool query = int(blockIdx.x) < N;
  const std::int64_t c = query ? blockIdx.x : blockIdx.x - N;
  if (query) {
    const float n = sc.nq[c];
    const float t = n == kAngleProtoNormEps ? 0.f : sc.row[c * kRowStats + 2];
    const float* g = sc.g + c * N;
    T* out = demb + c * M * D;
    for (int k = threadIdx.x; k < D; k += kGradThreads) {
      float acc = 0.f;
      for (int j = 0; j < N; ++j) acc += g[j] * sc.pn[std::int64_t(j) * D + k];
      out[k] = cuda::store_f32<T>((acc - t * sc.qn[c * D + k]) / n);
    }
    return;
  }
  const float n = sc.np[c];
  float u = 0.f;  // every thread sums the same sequence: the same bits
  for (int i = 0; i < N; ++i) u += sc.g[std::int64_t(i) * N + c] * sc.cos[std::int64_t(i) * N + c];
  if (n == kAngleProtoNormEps) u = 0.f;
  for (int k = threadIdx.x; k < D; k += kGradThreads) {
    float acc = 0.f;
    for (int i = 0; i < N; ++i) acc += sc.g[std::int64_t(i) * N + c] * sc.qn[std::int64_t(i) * D + k];
    const T v = cuda::store_f32<T>((acc - u * sc.pn[c * D + k]) / n / float(M - 1));
    for (int m = 1; m < M; ++m) demb[(c * M + m) * D + k] = v;
  }
}

__global__ void finalize_kernel(AngleProtoArgs d, const float* __restrict__ wb, Scratch sc, float* dwb, float* sums,
                                std::int32_t* counts, float* step_loss) {
  if (threadIdx.x != 0) return;
  const int N = d.classes;
  float loss = 0.f, dw = 0.f, db = 0.f;
  std::int32_t correct = 0;
  for (int i = 0; i < N; ++i) {
    const float* r = sc.row + std::int64_t(i) * kRowStats;
    loss += r[0];
    correct += int(r[1]) == i;
    dw += r[3];
    db += r[4];
  }
  loss /= float(N);
  dwb[0] = wb[0] >= kAngleProtoMinW ? dw : 0.f;
  dwb[1] = db;
  sums[0] += loss;
  sums[2] += loss;
  sums[3] += 1.f;
  counts[0] += N;
  counts[1] += correct;
  if (step_loss) *step_loss = loss;
}

template <class T>
void launch(const AngleProtoArgs& d, const void* emb_v, const float* wb, const float* loss_scale, void* demb_v,
            float* dwb, float* sums, std::int32_t* counts, float* step_loss, float* scratch, cudaStream_t stream) {
  using Dt = cuda::device_t<T>;
  const Scratch sc = split_scratch(scratch, d.classes, d.dim);
  const unsigned n = unsigned(d.classes);
  prep_kernel<Dt><<<n, kPrepThreads, 0, stream>>>(d, static_cast<const Dt*>(emb_v), sc);
  MF_CUDA_CHECK_LAUNCH();
  forward_kernel<<<n, kFwdThreads, 0, stream>>>(d, wb, loss_scale, sc);
  MF_CUDA_CHECK_LAUNCH();
  grad_kernel<Dt><<<2 * n, kGradThreads, 0, stream>>>(d, sc, static_cast<Dt*>(demb_v));
  MF_CUDA_CHECK_LAUNCH();
  finalize_kernel<<<1, kFinalizeThreads, 0, stream>>>(d, wb, sc, dwb, sums, counts, step_loss);
  MF_CUDA_CHECK_LAUNCH();
}

}  // namespace

void angleproto_loss_cuda(const AngleProtoArgs& d, DType dtype, const void* emb, const float* wb,
                          const float* loss_scale, void* demb, float* dwb, float* sums, std::int32_t* counts,
                          float* step_loss, float* scratch, cudaStream_t stream) {
  switch (dtype) {
    case DType::f32:
      return launch<float>(d, emb, wb, loss_scale, demb, dwb, sums, counts, step_loss, scratch, stream);
    case DType::f16:
      return launch<f16>(d, emb, wb, loss_scale, demb, dwb, sums, counts, step_loss, scratch, stream);
    case DType::bf16:
      return launch<bf16>(d, emb, wb, loss_scale, demb, dwb, sums, counts, step_loss, scratch, stream);
    default: break;  // the dispatch (ops_angleproto.cpp) admits only these
  }
}

}  // namespace mf::kernels
