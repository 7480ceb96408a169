// CPU twin of margin_softmax_loss (kernels/margin_softmax.hpp). Per sample (in
// parallel over samples): the cosines against every class row, the margined
// logits' log-softmax, the loss and d loss / d cos; then demb per sample and
// dweight per class row, each summing in a fixed order (classes, resp.
// samples, in increasing order); the loss sum runs over samples in order. The
// bits do not depend on the thread count.
#include "kernels/margin_softmax.hpp"

#include <cmath>
#include <numbers>
#include <vector>

#include "engine/error.hpp"
#include "engine/parallel.hpp"
#include "kernels/loss.hpp"

namespace mf::kernels {

MarginConsts margin_consts(float m) {
  const double md = m;
  MarginConsts k;
  k.cos_m = float(std::cos(md));
  k.sin_m = float(std::sin(md));
  k.th = float(std::cos(std::numbers::pi - md));
  k.mm = float(std::sin(std::numbers::pi - md) * md);
  return k;
}

namespace {

constexpr float kNormEps = 1e-12f;

// Row i of x [n, D] normalised into xn (f32); returns max(|x_i|, 1e-12)
// (NaN propagates).
template <class T>
float normalise_row(const T* x, int D, float* xn) {
  float ss = 0.f;
  for (int j = 0; j < D; ++j) {
    const float v = to_f32(x[j]);
    ss += v * v;
  }
  const float raw = std::sqrt(ss), n = raw < kNormEps ? kNormEps : raw;
  for (int j = 0; j < D; ++j) xn[j] = to_f32(x[j]) / n;
  return n;
}

// Per-sample results of the forward pass.
struct Sample {
  float loss = 0.f;  // -log p of the target (0 when ignored)
  float t = 0.f;     // sum_c g[c] cos[c] (for demb's radial term)
  int pred = 0;      // argmax of the plain cosine
};

// Sample b's cosines, loss, and g[c] = d loss / d cos[c] * gs (gs = the
// output scales / N); g is all 0 for an ignored label.
Sample forward_sample(const MarginSoftmaxArgs& d, const MarginConsts& k, const float* xn, const float* wn, int y,
                      float gs, float* cos, float* g) {
  const int C = d.classes, D = d.dim;
  Sample r;
  for (int c = 0; c < C; ++c) {
    const float* wc = wn + std::int64_t(c) * D;
    float dot = 0.f;
    for (int j = 0; j < D; ++j) dot += xn[j] * wc[j];
    cos[c] = dot;
    if (c > 0 && dot > cos[r.pred]) r.pred = c;
  }
  const bool valid = y >= 0 && y < C;
  if (!valid) {
    for (int c = 0; c < C; ++c) g[c] = 0.f;
    return r;
  }
  const MarginTarget mt = margin_target(d.type, d.margin, k, cos[y]);
  const float s = d.scale;
  float mx = s * mt.f;
  for (int c = 0; c < C; ++c)
    if (c != y) mx = std::fmax(mx, s * cos[c]);
  float se = 0.f;
  for (int c = 0; c < C; ++c) se += std::exp((c == y ? s * mt.f : s * cos[c]) - mx);
  const float lse = mx + std::log(se);
  r.loss = lse - s * mt.f;
  for (int c = 0; c < C; ++c) {
    const float z = c == y ? s * mt.f : s * cos[c];
    const float p = std::exp(z - lse);
    g[c] = c == y ? s * (p - 1.f) * mt.df * gs : s * p * gs;
    r.t += g[c] * cos[c];
  }
  return r;
}

template <class T>
void loss_impl(const MarginSoftmaxArgs& d, const T* emb, const T* w, const std::int32_t* labels,
               const float* loss_scale, T* demb, float* dweight, float* sums, std::int32_t* counts, bool confusion,
               float* step_loss) {
  const std::int64_t B = d.batch;
  const int C = d.classes, D = d.dim;
  const MarginConsts k = margin_consts(d.margin);
  std::int64_t n_valid = 0;
  for (std::int64_t b = 0; b < B; ++b) n_valid += labels[b] >= 0 && labels[b] < C;
  const float gs = n_valid > 0 ? (loss_scale ? *loss_scale : 1.f) * d.grad_scale / float(n_valid) : 0.f;

  std::vector<float> nx(static_cast<std::size_t>(B)), nw(static_cast<std::size_t>(C));
  std::vector<float> xn(static_cast<std::size_t>(B * D)), wn(static_cast<std::size_t>(std::int64_t(C) * D));
  parallel_for(B, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) nx[std::size_t(b)] = normalise_row(emb + b * D, D, xn.data() + b * D);
  }, 16);
  parallel_for(C, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) nw[std::size_t(c)] = normalise_row(w + c * D, D, wn.data() + c * D);
  }, 16);
  // A norm the 1e-12 clamp replaced passes no gradient (the constant's).
  auto radial = [](float n) { return !(n == kNormEps); };

  std::vector<float> cos(static_cast<std::size_t>(B * C)), g(cos.size());
  std::vector<Sample> smp(static_cast<std::size_t>(B));
  parallel_for(B, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b)
      smp[std::size_t(b)] = forward_sample(d, k, xn.data() + b * D, wn.data(), labels[b], gs, cos.data() + b * C,
                                           g.data() + b * C);
  }, 1);

  // demb_b = (sum_c g[c] wn_c - t_b xn_b) / nx_b.
  parallel_for(B, [&](std::int64_t b0, std::int64_t b1) {
    std::vector<float> acc(static_cast<std::size_t>(D));
    for (std::int64_t b = b0; b < b1; ++b) {
      std::fill(acc.begin(), acc.end(), 0.f);
      const float* gb = g.data() + b * C;
      for (int c = 0; c < C; ++c) {
        const float* wc = wn.data() + std::int64_t(c) * D;
        for (int j = 0; j < D; ++j) acc[std::size_t(j)] += gb[c] * wc[j];
      }
      const float n = nx[std::size_t(b)], t = radial(n) ? smp[std::size_t(b)].t : 0.f;
      const float* xb = xn.data() + b * D;
      for (int j = 0; j < D; ++j) demb[b * D + j] = from_f32<T>((acc[std::size_t(j)] - t * xb[j]) / n);
    }
  }, 1);
  // dweight_c = (sum_b g[b][c] xn_b - u_c wn_c) / nw_c, u_c = sum_b g[b][c] cos[b][c].
  parallel_for(C, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      float* dw = dweight + c * D;
      for (int j = 0; j < D; ++j) dw[j] = 0.f;
      float u = 0.f;
      for (std::int64_t b = 0; b < B; ++b) {
        const float gv = g[std::size_t(b * C + c)];
        u += gv * cos[std::size_t(b * C + c)];
        const float* xb = xn.data() + b * D;
        for (int j = 0; j < D; ++j) dw[j] += gv * xb[j];
      }
      const float n = nw[std::size_t(c)];
      if (!radial(n)) u = 0.f;
      const float* wc = wn.data() + c * D;
      for (int j = 0; j < D; ++j) dw[j] = (dw[j] - u * wc[j]) / n;
    }
  }, 1);

  float loss = 0.f;
  std::int32_t correct = 0;
  for (std::int64_t b = 0; b < B; ++b) {
    const int y = labels[b];
    if (y < 0 || y >= C) continue;
    const Sample& r = smp[std::size_t(b)];
    loss += r.loss;
    correct += r.pred == y;
    if (confusion) ++counts[kLossCounts + std::int64_t(y) * C + r.pred];
  }
  loss = n_valid > 0 ? loss / float(n_valid) : 0.f;
  sums[0] += loss;
  sums[2] += loss;
  sums[3] += 1.f;
  counts[0] += std::int32_t(B);
  counts[1] += correct;
  if (step_loss) *step_loss = loss;
}

}  // namespace

void margin_softmax_loss_cpu(const MarginSoftmaxArgs& d, DType dtype, const void* emb, const void* weight,
                             const std::int32_t* labels, const float* loss_scale, void* demb, float* dweight,
                             float* sums, std::int32_t* counts, bool confusion, float* step_loss, float*,
                             cudaStream_t) {
  switch (dtype) {
    case DType::f32:
      return loss_impl(d, static_cast<const float*>(emb), static_cast<const float*>(weight), labels, loss_scale,
                       static_cast<float*>(demb), dweight, sums, counts, confusion, step_loss);
    case DType::f16:
      return loss_impl(d, static_cast<const f16*>(emb), static_cast<const f16*>(weight), labels, loss_scale,
                       static_cast<f16*>(demb), dweight, sums, counts, confusion, step_loss);
    case DType::bf16:
      return loss_impl(d, static_cast<const bf16*>(emb), static_cast<const bf16*>(weight), labels, loss_scale,
                       static_cast<bf16*>(demb), dweight, sums, counts, confusion, step_loss);
    default: break;
  }
  MF_THROW("margin_softmax_loss_cpu: unsupported dtype {}", dtype_name(dtype));
}

}  // namespace mf::kernels
