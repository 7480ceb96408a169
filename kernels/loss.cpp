// CPU twin of leak_loss and head_probs. Rows are processed in parallel into
// per-row values; the sums then run over rows in increasing order, so results
// do not depend on the thread count.
#include "kernels/loss.hpp"

#include <cmath>
#include <vector>

#include "engine/error.hpp"
#include "engine/parallel.hpp"

namespace mf::kernels {

namespace {

// d(row numerator of label y)/d(logit c), before the 1/den and scales: the
// CE-with-smoothing gradient (p_c * a - eps/C * w_c - [c == y] (1 - eps) w_y,
// a = (1 - eps) w_y + eps/C * sum w); 0 for a label outside [0, C).
inline float class_grad(const float* lp, int y, int c, int C, float eps, const float* cw, float wsum_all) {
  if (y < 0 || y >= C) return 0.f;
  const float wy = cw ? cw[y] : 1.f;
  const float a = (1.f - eps) * wy + eps / float(C) * wsum_all;
  const float wc = cw ? cw[c] : 1.f;
  return std::exp(lp[c]) * a - eps / float(C) * wc - (c == y ? (1.f - eps) * wy : 0.f);
}

template <class T>
void loss_impl(const ClassLeakLossArgs& d, const T* logits, const std::int32_t* labels, const std::int32_t* labels_b,
               const float* lam, const float* leak, const float* cw, const float* loss_scale, T* dlogits, float* sums, std::int32_t* counts,
               float* step_loss) {
  const int C = d.classes, L = C + (d.leak_head ? 1 : 0);
  const std::int64_t B = d.batch;
  const float eps = d.label_smoothing;
  const float scale = (loss_scale ? *loss_scale : 1.f) * d.grad_scale;
  float wsum_all = 0.f;  // sum_c w_c
  for (int c = 0; c < C; ++c) wsum_all += cw ? cw[c] : 1.f;

  struct Row { float ce_num, wy, bce; int pred, correct, leak_correct, ycount; };
  std::vector<Row> rows(static_cast<std::size_t>(B));
  std::vector<float> logp(std::size_t(B) * std::size_t(C));
  parallel_for(B, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t i = r0; i < r1; ++i) {
      const T* z = logits + i * L;
      float* lp = logp.data() + i * C;
      float mx = to_f32(z[0]);
      int arg = 0;
      for (int c = 1; c < C; ++c) {
        const float v = to_f32(z[c]);
        if (v > mx) { mx = v; arg = c; }
      }
      float se = 0.f;
      for (int c = 0; c < C; ++c) se += std::exp(to_f32(z[c]) - mx);
      const float lse = mx + std::log(se);
      float smooth = 0.f;
      for (int c = 0; c < C; ++c) {
        lp[c] = to_f32(z[c]) - lse;
        smooth += (cw ? cw[c] : 1.f) * -lp[c];
      }
      const int y = labels[i];
      const bool valid = y >= 0 && y < C;
      Row row{};
      row.wy = valid ? (cw ? cw[y] : 1.f) : 0.f;
      row.ce_num = valid ? (1.f - eps) * row.wy * -lp[y] + eps / float(C) * smooth : 0.f;
      row.pred = arg;
      row.ycount = y;  // the label the metrics count (the dominant one with mixup)
      if (lam) {  // the header's soft targets: lam * (term of y) + (1 - lam) * (term of y_b)
        const int yb = labels_b[i];
        const bool valid_b = yb >= 0 && yb < C;
        const float wb = valid_b ? (cw ? cw[yb] : 1.f) : 0.f;
        const float ce_b = valid_b ? (1.f - eps) * wb * -lp[yb] + eps / float(C) * smooth : 0.f;
        const float l = lam[i], o = 1.f - l;
        row.ce_num = l * row.ce_num + o * ce_b;
        row.wy = l * row.wy + o * wb;
        row.ycount = l >= 0.5f ? y : yb;
      }
      row.correct = row.ycount >= 0 && row.ycount < C && arg == row.ycount;
      if (d.leak_head) {
        const float zl = to_f32(z[C]), t = leak[i];
        row.bce = std::fmax(zl, 0.f) - zl * t + std::log1p(std::exp(-std::fabs(zl)));
        row.leak_correct = (zl > 0.f) == (t > 0.5f);
      }
      rows[std::size_t(i)] = row;
    }
  }, 64);
  float den = 0.f, ce_num = 0.f, bce = 0.f;
  std::int32_t correct = 0, leak_correct = 0, valid_n = 0;
  for (std::int64_t i = 0; i < B; ++i) {
    const Row& r = rows[std::size_t(i)];
    den += r.wy;
    ce_num += r.ce_num;
    bce += r.bce;
    correct += r.correct;
    leak_correct += r.leak_correct;
    const int y = r.ycount;
    if (y >= 0 && y < C) {
      ++valid_n;
      if (d.confusion) ++counts[kLossCounts + std::int64_t(y) * C + r.pred];
    }
  }
  // Without class weights PyTorch divides the smoothing term by B and the NLL
  // term by the valid count; with all labels valid both equal den.
  const float class_loss = den > 0.f ? ce_num / den : 0.f;
  const float leak_loss = d.leak_head && B > 0 ? bce / float(B) : 0.f;  // 0: no leak term
  const float total = d.class_loss_weight * class_loss + d.leak_loss_weight * leak_loss;
  const float gc = den > 0.f ? d.class_loss_weight * scale / den : 0.f;
  const float gl = B > 0 ? d.leak_loss_weight * scale / float(B) : 0.f;
  parallel_for(B, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t i = r0; i < r1; ++i) {
      const float* lp = logp.data() + i * C;
      T* g = dlogits + i * L;
      for (int c = 0; c < C; ++c) {
        float v = class_grad(lp, labels[i], c, C, eps, cw, wsum_all);
        if (lam) {
          const float l = lam[i];
          v = l * v + (1.f - l) * class_grad(lp, labels_b[i], c, C, eps, cw, wsum_all);
        }
        g[c] = from_f32<T>(v * gc);
      }
      if (d.leak_head) {
        const float zl = to_f32(logits[i * L + C]);
        const float sig = 1.f / (1.f + std::exp(-zl));
        g[C] = from_f32<T>((sig - leak[i]) * gl);
      }
    }
  }, 64);
  sums[0] += class_loss;
  sums[1] += leak_loss;
  sums[2] += total;
  sums[3] += 1.f;
  counts[0] += std::int32_t(B);
  counts[1] += correct;
  counts[2] += leak_correct;
  (void)valid_n;
  if (step_loss) *step_loss = total;
}

template <class T>
void probs_impl(std::int64_t B, int C, const T* logits, float* probs, float* leak_prob) {
  const int L = C + (leak_prob ? 1 : 0);
  parallel_for(B, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t i = r0; i < r1; ++i) {
      const T* z = logits + i * L;
      float mx = to_f32(z[0]);
      for (int c = 1; c < C; ++c) mx = std::fmax(mx, to_f32(z[c]));
      float se = 0.f;
      for (int c = 0; c < C; ++c) se += std::exp(to_f32(z[c]) - mx);
      for (int c = 0; c < C; ++c) probs[i * C + c] = std::exp(to_f32(z[c]) - mx) / se;
      if (leak_prob) leak_prob[i] = 1.f / (1.f + std::exp(-to_f32(z[C])));
    }
  }, 64);
}

}  // namespace

void class_leak_loss_cpu(const ClassLeakLossArgs& d, DType dtype, const void* logits, const std::int32_t* labels,
                   const std::int32_t* labels_b, const float* lam, const float* leak, const float* class_weight,
                   const float* loss_scale, void* dlogits, float* sums, std::int32_t* counts, float* step_loss,
                   cudaStream_t) {
  switch (dtype) {
    case DType::f32:
      return loss_impl(d, static_cast<const float*>(logits), labels, labels_b, lam, leak, class_weight, loss_scale,
                       static_cast<float*>(dlogits), sums, counts, step_loss);
    case DType::f16:
      return loss_impl(d, static_cast<const f16*>(logits), labels, labels_b, lam, leak, class_weight, loss_scale,
                       static_cast<f16*>(dlogits), sums, counts, step_loss);
    case DType::bf16:
      return loss_impl(d, static_cast<const bf16*>(logits), labels, labels_b, lam, leak, class_weight, loss_scale,
                       static_cast<bf16*>(dlogits), sums, counts, step_loss);
    default: break;
  }
  MF_THROW("class_leak_loss_cpu: unsupported dtype {}", dtype_name(dtype));
}

void head_probs_cpu(std::int64_t batch, int classes, DType dtype, const void* logits, float* probs,
                    float* leak_prob, cudaStream_t) {
  switch (dtype) {
    case DType::f32: return probs_impl(batch, classes, static_cast<const float*>(logits), probs, leak_prob);
    case DType::f16: return probs_impl(batch, classes, static_cast<const f16*>(logits), probs, leak_prob);
    case DType::bf16: return probs_impl(batch, classes, static_cast<const bf16*>(logits), probs, leak_prob);
    default: break;
  }
  MF_THROW("head_probs_cpu: unsupported dtype {}", dtype_name(dtype));
}

}  // namespace mf::kernels
