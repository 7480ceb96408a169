// CPU twin of angleproto_loss (kernels/angleproto.hpp). Per class (in
// parallel over classes): the query and prototype, normalised; per query row:
// the cosines, the logits' log-softmax, the loss and g = d loss / d cos * S;
// then d q_i per query row (sum over prototypes j in order) and d p_j per
// prototype (sum over queries i in order); the loss, dw and db sums run over
// rows in order. The bits do not depend on the thread count.
#include "kernels/angleproto.hpp"

#include <cmath>
#include <vector>

#include "engine/error.hpp"
#include "engine/parallel.hpp"
#include "kernels/loss.hpp"

namespace mf::kernels {

namespace {

// Per-row results of the forward pass.
struct Row {
  float loss = 0.f;  // lse_i - z_ii
  float t = 0.f;     // sum_j g_ij cos_ij (d q_i's radial term)
  float dw = 0.f;    // sum_j dz_ij cos_ij
  float db = 0.f;    // sum_j dz_ij
  int pred = 0;      // argmax_j z_ij (first max wins)
};

// v / max(|v|, 1e-8) into vn; returns the clamped norm (NaN propagates).
float normalise(const float* v, int D, float* vn) {
  float ss = 0.f;
  for (int k = 0; k < D; ++k) ss += v[k] * v[k];
  const float raw = std::sqrt(ss), n = raw < kAngleProtoNormEps ? kAngleProtoNormEps : raw;
  for (int k = 0; k < D; ++k) vn[k] = v[k] / n;
  return n;
}

// Query row i: cos_ij for every j, the loss and g_ij = w_eff dz_ij with
// dz_ij = (softmax_ij - [i == j]) * s (s = S / N).
Row forward_row(int N, int D, int i, const float* qn, const float* pn, float w_eff, float b, float s, float* cos,
                float* g) {
  Row r;
  const float* q = qn + std::int64_t(i) * D;
  float mx = 0.f, best = 0.f;  // mx: the max logit, NaN when any is NaN (so NaN propagates)
  for (int j = 0; j < N; ++j) {
    const float* p = pn + std::int64_t(j) * D;
    float dot = 0.f;
    for (int k = 0; k < D; ++k) dot += q[k] * p[k];
    cos[j] = dot;
    const float z = w_eff * dot + b;
    if (j == 0 || z > best) {
      best = z;
      r.pred = j;
    }
    mx = j == 0 || std::isnan(z) || z > mx ? z : mx;
  }
  float se = 0.f;
  for (int j = 0; j < N; ++j) se += std::exp(w_eff * cos[j] + b - mx);
  const float lse = mx + std::log(se);
  r.loss = lse - (w_eff * cos[i] + b);
  for (int j = 0; j < N; ++j) {
    const float dz = (std::exp(w_eff * cos[j] + b - lse) - (j == i ? 1.f : 0.f)) * s;
    g[j] = w_eff * dz;
    r.t += g[j] * cos[j];
    r.dw += dz * cos[j];
    r.db += dz;
  }
  return r;
}

template <class T>
void loss_impl(const AngleProtoArgs& d, const T* emb, const float* wb, const float* loss_scale, T* demb, float* dwb,
               float* sums, std::int32_t* counts, float* step_loss) {
  const int N = d.classes, M = d.per_class, D = d.dim;
  const std::size_t ND = std::size_t(N) * std::size_t(D), NN = std::size_t(N) * std::size_t(N);
  const float w = wb[0], b = wb[1], w_eff = angleproto_w_eff(w);
  const float S = (loss_scale ? *loss_scale : 1.f) * d.grad_scale;
  const float s = S / float(N);

  std::vector<float> qn(ND), pn(ND), nq(static_cast<std::size_t>(N)), np(static_cast<std::size_t>(N));
  parallel_for(N, [&](std::int64_t c0, std::int64_t c1) {
    std::vector<float> v(static_cast<std::size_t>(D));
    for (std::int64_t c = c0; c < c1; ++c) {
      const T* x = emb + c * M * D;
      for (int k = 0; k < D; ++k) v[std::size_t(k)] = to_f32(x[k]);
      nq[std::size_t(c)] = normalise(v.data(), D, qn.data() + c * D);
      for (int k = 0; k < D; ++k) {
        float acc = 0.f;
        for (int m = 1; m < M; ++m) acc += to_f32(x[std::int64_t(m) * D + k]);
        v[std::size_t(k)] = acc / float(M - 1);
      }
      np[std::size_t(c)] = normalise(v.data(), D, pn.data() + c * D);
    }
  }, 4);

  std::vector<float> cos(NN), g(NN);
  std::vector<Row> rows(static_cast<std::size_t>(N));
  parallel_for(N, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i)
      rows[std::size_t(i)] = forward_row(N, D, int(i), qn.data(), pn.data(), w_eff, b, s, cos.data() + i * N,
                                         g.data() + i * N);
  }, 1);

  // A norm the 1e-8 clamp replaced passes no gradient (the constant's).
  auto radial = [](float n) { return !(n == kAngleProtoNormEps); };
  // d q_i = (sum_j g_ij pn_j - t_i qn_i) / nq_i, into demb row i*M.
  parallel_for(N, [&](std::int64_t i0, std::int64_t i1) {
    std::vector<float> acc(static_cast<std::size_t>(D));
    for (std::int64_t i = i0; i < i1; ++i) {
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int j = 0; j < N; ++j) {
        const float gij = g[std::size_t(i * N + j)];
        const float* p = pn.data() + std::int64_t(j) * D;
        for (int k = 0; k < D; ++k) acc[std::size_t(k)] += gij * p[k];
      }
      const float n = nq[std::size_t(i)], t = radial(n) ? rows[std::size_t(i)].t : 0.f;
      const float* q = qn.data() + i * D;
      T* out = demb + i * M * D;
      for (int k = 0; k < D; ++k) out[k] = from_f32<T>((acc[std::size_t(k)] - t * q[k]) / n);
    }
  }, 1);
  // d p_j = (sum_i g_ij qn_i - u_j pn_j) / np_j, u_j = sum_i g_ij cos_ij;
  // each of the M-1 segments gets d p_j / (M - 1).
  parallel_for(N, [&](std::int64_t j0, std::int64_t j1) {
    std::vector<float> acc(static_cast<std::size_t>(D));
    for (std::int64_t j = j0; j < j1; ++j) {
      std::fill(acc.begin(), acc.end(), 0.f);
      float u = 0.f;
      for (int i = 0; i < N; ++i) {
        const float gij = g[std::size_t(std::int64_t(i) * N + j)];
        u += gij * cos[std::size_t(std::int64_t(i) * N + j)];
        const float* q = qn.data() + std::int64_t(i) * D;
        for (int k = 0; k < D; ++k) acc[std::size_t(k)] += gij * q[k];
      }
      const float n = np[std::size_t(j)];
      if (!radial(n)) u = 0.f;
      const float* p = pn.data() + j * D;
      for (int k = 0; k < D; ++k) {
        const T v = from_f32<T>((acc[std::size_t(k)] - u * p[k]) / n / float(M - 1));
        for (int m = 1; m < M; ++m) demb[(j * M + m) * D + k] = v;
      }
    }
  }, 1);

  float loss = 0.f, dw = 0.f, db = 0.f;
  std::int32_t correct = 0;
  for (int i = 0; i < N; ++i) {
    const Row& r = rows[std::size_t(i)];
    loss += r.loss;
    dw += r.dw;
    db += r.db;
    correct += r.pred == i;
  }
  loss /= float(N);
  dwb[0] = w >= kAngleProtoMinW ? dw : 0.f;
  dwb[1] = db;
  sums[0] += loss;
  sums[2] += loss;
  sums[3] += 1.f;
  counts[0] += N;
  counts[1] += correct;
  if (step_loss) *step_loss = loss;
}

}  // namespace

void angleproto_loss_cpu(const AngleProtoArgs& d, DType dtype, const void* emb, const float* wb,
                         const float* loss_scale, void* demb, float* dwb, float* sums, std::int32_t* counts,
                         float* step_loss, float*, cudaStream_t) {
  switch (dtype) {
    case DType::f32:
      return loss_impl(d, static_cast<const float*>(emb), wb, loss_scale, static_cast<float*>(demb), dwb, sums,
                       counts, step_loss);
    case DType::f16:
      return loss_impl(d, static_cast<const f16*>(emb), wb, loss_scale, static_cast<f16*>(demb), dwb, sums, counts,
                       step_loss);
    case DType::bf16:
      return loss_impl(d, static_cast<const bf16*>(emb), wb, loss_scale, static_cast<bf16*>(demb), dwb, sums,
                       counts, step_loss);
    default: break;
  }
  MF_THROW("angleproto_loss_cpu: unsupported dtype {}", dtype_name(dtype));
}

}  // namespace mf::kernels
