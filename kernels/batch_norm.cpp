// CPU twin of batch_norm (the CPU backend's training path). Rows are handled
// in blocks of kRowBlock rows converted to f32 (channels contiguous, so every
// inner loop runs over C and vectorises). Reductions: the rows are cut into at
// most kMaxGroups groups whose size depends only on M; each group is reduced
// by one thread in row order (a block at a time: per-block sums, then merged
// into the group), and the group partials are merged in group order, so the
// bits do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/error.hpp"
#include "engine/float_convert.hpp"
#include "engine/parallel.hpp"
#include "kernels/batch_norm.hpp"
#include "kernels/relu.hpp"

namespace mf::kernels {

namespace {

constexpr std::int64_t kRowBlock = 64;
constexpr std::int64_t kMaxGroups = 256;

std::int64_t group_rows(std::int64_t m) {
  const std::int64_t r = std::max(kRowBlock, (m + kMaxGroups - 1) / kMaxGroups);
  return (r + kRowBlock - 1) / kRowBlock * kRowBlock;
}

// n elements of a float buffer from element `off` as f32: the buffer itself
// for f32, else converted into buf.
const float* as_f32(DType t, const void* base, std::int64_t off, std::int64_t n, float* buf) {
  if (t == DType::f32) return static_cast<const float*>(base) + off;
  convert_floats(static_cast<const char*>(base) + off * std::int64_t(dtype_size(t)), t, buf, DType::f32, n, false);
  return buf;
}

void store_from_f32(DType t, const float* buf, void* base, std::int64_t off, std::int64_t n) {
  convert_floats(buf, DType::f32, static_cast<char*>(base) + off * std::int64_t(dtype_size(t)), t, n, false);
}

std::vector<float> vec_f32(DType t, const void* p, int n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  const float* f = as_f32(t, p, 0, n, v.data());
  if (f != v.data()) std::copy(f, f + n, v.data());
  return v;
}

// Chan's merge of (nb rows: mean bm, sum of squared deviations bq) into
// (na rows: am, aq), per channel.
void chan_merge(float* am, float* aq, std::int64_t na, const float* bm, const float* bq, std::int64_t nb, int c) {
  if (nb == 0) return;
  if (na == 0) {
    std::copy(bm, bm + c, am);
    std::copy(bq, bq + c, aq);
    return;
  }
  const float fa = float(na), fb = float(nb), n = fa + fb;
  const float wb = fb / n, wab = fa * fb / n;
  for (int j = 0; j < c; ++j) {
    const float delta = bm[j] - am[j];
    am[j] += delta * wb;
    aq[j] += bq[j] + delta * delta * wab;
  }
}

// Per-channel mean and sum of squared deviations (m2) of the M rows of x.
// Everything is computed on x - shift, shift = row 0 of x: the data then has
// a mean of the order of its spread, so a large common offset (log-mel dB)
// costs no precision in the block means and Chan's delta terms.
void channel_stats(const BatchNormArgs& d, DType t, const void* x, float* mean, float* m2) {
  const int C = d.c;
  const std::vector<float> shift = vec_f32(t, x, C);
  const std::int64_t R = group_rows(d.m), G = (d.m + R - 1) / R;
  std::vector<float> pm(static_cast<std::size_t>(G * C)), pq(static_cast<std::size_t>(G * C));
  parallel_for(G, [&](std::int64_t g0, std::int64_t g1) {
    std::vector<float> buf(static_cast<std::size_t>(kRowBlock * C)), bm(static_cast<std::size_t>(C)), bq(static_cast<std::size_t>(C));
    for (std::int64_t g = g0; g < g1; ++g) {
      const std::int64_t r0 = g * R, r1 = std::min(d.m, r0 + R);
      float* am = pm.data() + g * C;
      float* aq = pq.data() + g * C;
      for (std::int64_t b = r0; b < r1; b += kRowBlock) {
        const std::int64_t nb = std::min(kRowBlock, r1 - b);
        const float* xb = as_f32(t, x, b * C, nb * C, buf.data());
        std::fill(bm.begin(), bm.end(), 0.f);
        for (std::int64_t r = 0; r < nb; ++r)
          for (int j = 0; j < C; ++j) bm[std::size_t(j)] += xb[r * C + j] - shift[std::size_t(j)];
        const float inv = 1.f / float(nb);
        for (int j = 0; j < C; ++j) bm[std::size_t(j)] *= inv;
        std::fill(bq.begin(), bq.end(), 0.f);
        for (std::int64_t r = 0; r < nb; ++r)
          for (int j = 0; j < C; ++j) {
            const float dv = (xb[r * C + j] - shift[std::size_t(j)]) - bm[std::size_t(j)];
            bq[std::size_t(j)] += dv * dv;
          }
        chan_merge(am, aq, b - r0, bm.data(), bq.data(), nb, C);
      }
    }
  }, 1);
  std::copy(pm.begin(), pm.begin() + C, mean);
  std::copy(pq.begin(), pq.begin() + C, m2);
  for (std::int64_t g = 1; g < G; ++g)
    chan_merge(mean, m2, g * R, pm.data() + g * C, pq.data() + g * C, std::min(R, d.m - g * R), C);
  for (int j = 0; j < C; ++j) mean[j] += shift[std::size_t(j)];
}

// y = act((x - mean) * scale + shift + residual), rows in blocks, in f32.
void normalise(const BatchNormArgs& d, DType t, const void* x, const void* residual, void* y, const float* mean,
               const float* scale, const float* shift) {
  const int C = d.c;
  const std::int64_t blocks = (d.m + kRowBlock - 1) / kRowBlock;
  parallel_for(blocks, [&](std::int64_t b0, std::int64_t b1) {
    std::vector<float> xbuf(static_cast<std::size_t>(kRowBlock * C)), rbuf(static_cast<std::size_t>(kRowBlock * C)),
        out(static_cast<std::size_t>(kRowBlock * C));
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::int64_t r0 = b * kRowBlock, nb = std::min(kRowBlock, d.m - r0);
      const float* xb = as_f32(t, x, r0 * C, nb * C, xbuf.data());
      const float* rb = residual ? as_f32(t, residual, r0 * C, nb * C, rbuf.data()) : nullptr;
      // f32 output is written in place, other dtypes through `out`; each
      // element is read (x, residual) before it is written, so y may be x or
      // the residual itself (batch_norm.hpp).
      float* ob = t == DType::f32 ? static_cast<float*>(y) + r0 * C : out.data();
      for (std::int64_t r = 0; r < nb; ++r) {
        float* o = ob + r * C;
        const float* xr = xb + r * C;
        const float* rr = rb ? rb + r * C : nullptr;
        for (int j = 0; j < C; ++j) {
          float v = (xr[j] - mean[j]) * scale[j] + shift[j];
          if (rr) v += rr[j];
          o[j] = d.relu ? relu_keep_nan(v) : v;
        }
      }
      if (t != DType::f32) store_from_f32(t, out.data(), y, r0 * C, nb * C);
    }
  }, 4);
}

}  // namespace

void batch_norm_train_forward_cpu(const BatchNormArgs& d, DType dtype, const void* x, const void* gamma,
                                  const void* beta, const void* residual, float* running_mean, float* running_var,
                                  float* save_mean, float* save_invstd, void* y, float*, cudaStream_t) {
  MF_CHECK(d.m >= 2, "batch_norm_train_forward: expected more than 1 value per channel when training, found M = {}",
           d.m);
  const int C = d.c;
  std::vector<float> m2(static_cast<std::size_t>(C));
  channel_stats(d, dtype, x, save_mean, m2.data());
  const std::vector<float> g = vec_f32(dtype, gamma, C), b = vec_f32(dtype, beta, C);
  std::vector<float> scale(static_cast<std::size_t>(C));
  const float fm = float(d.m), mom = d.momentum;
  for (int j = 0; j < C; ++j) {
    const float var = m2[std::size_t(j)] / fm;
    save_invstd[j] = 1.f / std::sqrt(var + d.eps);
    scale[std::size_t(j)] = g[std::size_t(j)] * save_invstd[j];
    running_mean[j] = mom * save_mean[j] + (1.f - mom) * running_mean[j];
    running_var[j] = mom * (m2[std::size_t(j)] / (fm - 1.f)) + (1.f - mom) * running_var[j];
  }
  normalise(d, dtype, x, residual, y, save_mean, scale.data(), b.data());
}

void batch_norm_eval_forward_cpu(const BatchNormArgs& d, DType dtype, const void* x, const void* gamma,
                                 const void* beta, const void* residual, const float* running_mean,
                                 const float* running_var, void* y, cudaStream_t) {
  const int C = d.c;
  const std::vector<float> g = vec_f32(dtype, gamma, C), b = vec_f32(dtype, beta, C);
  std::vector<float> scale(static_cast<std::size_t>(C));
  for (int j = 0; j < C; ++j) scale[std::size_t(j)] = g[std::size_t(j)] * (1.f / std::sqrt(running_var[j] + d.eps));
  normalise(d, dtype, x, residual, y, running_mean, scale.data(), b.data());
}

void batch_norm_backward_cpu(const BatchNormArgs& d, DType dtype, const void* x, const void* gamma,
                             const float* save_mean, const float* save_invstd, const void* y, void* dy, void* dx,
                             float* dgamma, float* dbeta, float*, cudaStream_t) {
  MF_CHECK(d.m >= 2, "batch_norm_backward: expected more than 1 value per channel (training), found M = {}", d.m);
  const int C = d.c;
  const std::int64_t R = group_rows(d.m), G = (d.m + R - 1) / R;
  // Pass 1: mask dy in place, per-group sums of dy and dy * xhat.
  std::vector<float> ps(static_cast<std::size_t>(G * C)), px(static_cast<std::size_t>(G * C));
  parallel_for(G, [&](std::int64_t g0, std::int64_t g1) {
    const std::size_t n = std::size_t(kRowBlock * C);
    std::vector<float> xbuf(n), ybuf(n), dyb(n), bs(static_cast<std::size_t>(C)), bx(static_cast<std::size_t>(C));
    for (std::int64_t g = g0; g < g1; ++g) {
      const std::int64_t r0 = g * R, r1 = std::min(d.m, r0 + R);
      float* as = ps.data() + g * C;
      float* ax = px.data() + g * C;
      std::fill(as, as + C, 0.f);
      std::fill(ax, ax + C, 0.f);
      for (std::int64_t b = r0; b < r1; b += kRowBlock) {
        const std::int64_t nb = std::min(kRowBlock, r1 - b), ne = nb * C;
        const float* xb = as_f32(dtype, x, b * C, ne, xbuf.data());
        const float* dv = as_f32(dtype, dy, b * C, ne, dyb.data());
        if (dv != dyb.data()) std::copy(dv, dv + ne, dyb.data());
        if (d.relu) {  // dy where y > 0, else 0 (NaN y blocks), written back (exact in T)
          const float* yb = as_f32(dtype, y, b * C, ne, ybuf.data());
          for (std::int64_t i = 0; i < ne; ++i) dyb[std::size_t(i)] = yb[i] > 0.f ? dyb[std::size_t(i)] : 0.f;
          if (dtype == DType::f32) std::copy(dyb.data(), dyb.data() + ne, static_cast<float*>(dy) + b * C);
          else store_from_f32(dtype, dyb.data(), dy, b * C, ne);
        }
        std::fill(bs.begin(), bs.end(), 0.f);
        std::fill(bx.begin(), bx.end(), 0.f);
        for (std::int64_t r = 0; r < nb; ++r)
          for (int j = 0; j < C; ++j) {
            const float gv = dyb[std::size_t(r * C + j)];
            bs[std::size_t(j)] += gv;
            bx[std::size_t(j)] += gv * ((xb[r * C + j] - save_mean[j]) * save_invstd[j]);
          }
        for (int j = 0; j < C; ++j) {
          as[j] += bs[std::size_t(j)];
          ax[j] += bx[std::size_t(j)];
        }
      }
    }
  }, 1);
  for (int j = 0; j < C; ++j) {
    float s = 0.f, sx = 0.f;
    for (std::int64_t g = 0; g < G; ++g) {
      s += ps[std::size_t(g * C + j)];
      sx += px[std::size_t(g * C + j)];
    }
    dbeta[j] = s;
    dgamma[j] = sx;
  }
  // Pass 2: dx = gamma * invstd * (dy - dbeta / M - xhat * dgamma / M).
  const std::vector<float> gv = vec_f32(dtype, gamma, C);
  std::vector<float> k(static_cast<std::size_t>(C)), kb(static_cast<std::size_t>(C)), kg(static_cast<std::size_t>(C));
  for (int j = 0; j < C; ++j) {
    k[std::size_t(j)] = gv[std::size_t(j)] * save_invstd[j];
    kb[std::size_t(j)] = dbeta[j] / float(d.m);
    kg[std::size_t(j)] = dgamma[j] / float(d.m);
  }
  const std::int64_t blocks = (d.m + kRowBlock - 1) / kRowBlock;
  parallel_for(blocks, [&](std::int64_t b0, std::int64_t b1) {
    const std::size_t n = std::size_t(kRowBlock * C);
    std::vector<float> xbuf(n), dbuf(n), out(n);
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::int64_t r0 = b * kRowBlock, nb = std::min(kRowBlock, d.m - r0);
      const float* xb = as_f32(dtype, x, r0 * C, nb * C, xbuf.data());
      const float* db = as_f32(dtype, dy, r0 * C, nb * C, dbuf.data());
      float* ob = dtype == DType::f32 ? static_cast<float*>(dx) + r0 * C : out.data();  // f32: in place
      for (std::int64_t r = 0; r < nb; ++r)
        for (int j = 0; j < C; ++j) {
          const std::int64_t i = r * C + j;
          const float xh = (xb[i] - save_mean[j]) * save_invstd[j];
          ob[i] = k[std::size_t(j)] * (db[i] - kb[std::size_t(j)] - xh * kg[std::size_t(j)]);
        }
      if (dtype != DType::f32) store_from_f32(dtype, out.data(), dx, r0 * C, nb * C);
    }
  }, 4);
}

}  // namespace mf::kernels
