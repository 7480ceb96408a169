// CPU twin of attentive_pool (kernels/attentive_pool.hpp). The per-sample work
// (forward, and the backward down to dx, de and dz) is split over samples; the
// parameter gradients are split over the attention units a, each a sum over
// samples then frames in increasing order. Every value is computed by one
// thread in a fixed order, so the bits do not depend on the thread count.
#include "kernels/attentive_pool.hpp"

#include <cmath>
#include <vector>

#include "engine/error.hpp"
#include "engine/parallel.hpp"

namespace mf::kernels {

namespace {

template <class T>
std::vector<float> to_floats(const T* p, std::int64_t n) {
  std::vector<float> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out[std::size_t(i)] = to_f32(p[i]);
  return out;
}

// One sample's forward into xm [W, C], hh [W, A], alpha [W], mu [C], var [C].
template <class T>
void forward_sample(const AttentivePoolDims& d, std::int64_t n, const T* x, const std::vector<float>& w,
                    const std::vector<float>& b, const std::vector<float>& v, float* xm, float* hh, float* alpha,
                    float* mu, float* var) {
  const int H = d.h, W = d.w, C = d.c, A = d.a;
  for (int t = 0; t < W; ++t) {
    float* row = xm + std::int64_t(t) * C;
    for (int c = 0; c < C; ++c) row[c] = 0.f;
    for (int hb = 0; hb < H; ++hb) {
      const T* xr = x + ((n * H + hb) * W + t) * C;
      for (int c = 0; c < C; ++c) row[c] += to_f32(xr[c]);
    }
    for (int c = 0; c < C; ++c) row[c] /= float(H);
    float e = 0.f;
    for (int a = 0; a < A; ++a) {
      const float* wr = w.data() + std::int64_t(a) * C;
      float z = 0.f;
      for (int c = 0; c < C; ++c) z += wr[c] * row[c];
      const float hv = std::tanh(z + b[std::size_t(a)]);
      hh[std::int64_t(t) * A + a] = hv;
      e += v[std::size_t(a)] * hv;
    }
    alpha[t] = e;  // the score; turned into the softmax weight below
  }
  float m = alpha[0];
  for (int t = 1; t < W; ++t) m = alpha[t] > m ? alpha[t] : m;
  float s = 0.f;
  for (int t = 0; t < W; ++t) {
    alpha[t] = std::exp(alpha[t] - m);
    s += alpha[t];
  }
  for (int t = 0; t < W; ++t) alpha[t] /= s;
  for (int c = 0; c < C; ++c) {  // var centred: sum_t alpha_t (xm - mu)^2
    float mc = 0.f, vc = 0.f;
    for (int t = 0; t < W; ++t) mc += alpha[t] * xm[std::int64_t(t) * C + c];
    for (int t = 0; t < W; ++t) {
      const float dv = xm[std::int64_t(t) * C + c] - mc;
      vc += alpha[t] * dv * dv;
    }
    mu[c] = mc;
    var[c] = vc;
  }
}

template <class T>
void forward(const AttentivePoolDims& d, const T* x, const T* w, const T* b, const T* v, T* y, float* saved) {
  const int W = d.w, C = d.c, A = d.a, OC = d.out_c();
  const auto wf = to_floats(w, std::int64_t(A) * C), bf = to_floats(b, A), vf = to_floats(v, A);
  const AttentivePoolSaved L = attentive_pool_saved_layout(d.n, W, C, A, d.stats);
  parallel_for(d.n, [&](std::int64_t n0, std::int64_t n1) {
    // Without saved (inference) one sample's values live in these.
    // var without stats is not saved either.
    std::vector<float> lxm, lh, lalpha, lmu, lvar(static_cast<std::size_t>(C));
    if (!saved) {
      lxm.resize(std::size_t(W) * C);
      lh.resize(std::size_t(W) * A);
      lalpha.resize(std::size_t(W));
      lmu.resize(std::size_t(C));
    }
    for (std::int64_t n = n0; n < n1; ++n) {
      float* xm = saved ? saved + L.xm + n * W * C : lxm.data();
      float* hh = saved ? saved + L.h + n * W * A : lh.data();
      float* alpha = saved ? saved + L.alpha + n * W : lalpha.data();
      float* mu = saved ? saved + L.mu + n * C : lmu.data();
      float* var = saved && d.stats ? saved + L.var + n * C : lvar.data();
      forward_sample(d, n, x, wf, bf, vf, xm, hh, alpha, mu, var);
      T* yr = y + n * OC;
      for (int c = 0; c < C; ++c) {
        yr[c] = from_f32<T>(mu[c]);
        if (d.stats) {
          const float vc = var[c] < kAttentivePoolVarFloor ? kAttentivePoolVarFloor : var[c];
          yr[C + c] = from_f32<T>(std::sqrt(vc));
        }
      }
    }
  });
}

// One sample's backward down to de [W], dz [W, A] (saved's scratch) and dx.
template <class T>
void backward_sample(const AttentivePoolDims& d, std::int64_t n, const AttentivePoolSaved& L, float* saved,
                     const std::vector<float>& w, const std::vector<float>& v, const T* dy, T* dx,
                     std::vector<float>& gm, std::vector<float>& dvar, std::vector<float>& acc) {
  const int H = d.h, W = d.w, C = d.c, A = d.a, OC = d.out_c();
  const float* xm = saved + L.xm + n * W * C;
  const float* hh = saved + L.h + n * W * A;
  const float* alpha = saved + L.alpha + n * W;
  const float* mu = saved + L.mu + n * C;
  float* de = saved + L.de + n * W;
  float* dz = saved + L.dz + n * W * A;
  // mu's and var's gradients (var = sum_t alpha_t (xm_t - mu)^2).
  for (int c = 0; c < C; ++c) {
    const float gmu = to_f32(dy[n * OC + c]);
    if (d.stats) {
      const float vr = saved[L.var + n * C + c];
      const float sg = std::sqrt(vr < kAttentivePoolVarFloor ? kAttentivePoolVarFloor : vr);
      const float dv = vr < kAttentivePoolVarFloor ? 0.f : to_f32(dy[n * OC + C + c]) / (2.f * sg);
      dvar[std::size_t(c)] = dv;
    } else {
      dvar[std::size_t(c)] = 0.f;
    }
    gm[std::size_t(c)] = gmu;
  }
  // dL/dalpha_t up to a constant (see attentive_pool.hpp: centred on mu).
  float dot = 0.f;
  for (int t = 0; t < W; ++t) {
    float da = 0.f;
    for (int c = 0; c < C; ++c) {
      const float xv = xm[std::int64_t(t) * C + c];
      const float dc = xv - mu[c];
      da += dc * (gm[std::size_t(c)] + dvar[std::size_t(c)] * dc);
    }
    de[t] = da;
    dot += alpha[t] * da;
  }
  for (int t = 0; t < W; ++t) de[t] = alpha[t] * (de[t] - dot);
  for (int t = 0; t < W; ++t)
    for (int a = 0; a < A; ++a) {
      const float hv = hh[std::int64_t(t) * A + a];
      dz[std::int64_t(t) * A + a] = de[t] * v[std::size_t(a)] * (1.f - hv * hv);
    }
  for (int t = 0; t < W; ++t) {
    for (int c = 0; c < C; ++c) acc[std::size_t(c)] = 0.f;
    for (int a = 0; a < A; ++a) {
      const float g = dz[std::int64_t(t) * A + a];
      const float* wr = w.data() + std::int64_t(a) * C;
      for (int c = 0; c < C; ++c) acc[std::size_t(c)] += g * wr[c];
    }
    for (int c = 0; c < C; ++c) {
      const float xv = xm[std::int64_t(t) * C + c];
      acc[std::size_t(c)] += alpha[t] * (gm[std::size_t(c)] + 2.f * (xv - mu[c]) * dvar[std::size_t(c)]);
      acc[std::size_t(c)] /= float(H);
    }
    for (int hb = 0; hb < H; ++hb) {
      T* dr = dx + ((n * H + hb) * W + t) * C;
      for (int c = 0; c < C; ++c) dr[c] = from_f32<T>(acc[std::size_t(c)]);
    }
  }
}

template <class T>
void backward(const AttentivePoolDims& d, const T* w, const T* v, float* saved, const T* dy, T* dx, float* dw,
              float* db, float* dv) {
  const int W = d.w, C = d.c, A = d.a;
  const auto wf = to_floats(w, std::int64_t(A) * C), vf = to_floats(v, A);
  const AttentivePoolSaved L = attentive_pool_saved_layout(d.n, W, C, A, d.stats);
  parallel_for(d.n, [&](std::int64_t n0, std::int64_t n1) {
    const auto cs = static_cast<std::size_t>(C);
    std::vector<float> gm(cs), dvar(cs), acc(cs);
    for (std::int64_t n = n0; n < n1; ++n) backward_sample(d, n, L, saved, wf, vf, dy, dx, gm, dvar, acc);
  });
  // Parameter gradients, one thread per unit a: rows (n, t) in increasing order.
  const std::int64_t rows = d.n * W;
  parallel_for(A, [&](std::int64_t a0, std::int64_t a1) {
    for (std::int64_t a = a0; a < a1; ++a) {
      float* dwr = dw + a * C;
      for (int c = 0; c < C; ++c) dwr[c] = 0.f;
      float sb = 0.f, sv = 0.f;
      for (std::int64_t r = 0; r < rows; ++r) {
        const float g = saved[L.dz + r * A + a];
        sb += g;
        sv += saved[L.de + r] * saved[L.h + r * A + a];
        const float* xr = saved + L.xm + r * C;
        for (int c = 0; c < C; ++c) dwr[c] += g * xr[c];
      }
      db[a] = sb;
      dv[a] = sv;
    }
  });
}

}  // namespace

void attentive_pool_forward_cpu(const AttentivePoolDims& d, DType dtype, const void* x, const void* w,
                                const void* b, const void* v, void* y, float* saved, cudaStream_t) {
  switch (dtype) {
    case DType::f32:
      return forward(d, static_cast<const float*>(x), static_cast<const float*>(w), static_cast<const float*>(b),
                     static_cast<const float*>(v), static_cast<float*>(y), saved);
    case DType::f16:
      return forward(d, static_cast<const f16*>(x), static_cast<const f16*>(w), static_cast<const f16*>(b),
                     static_cast<const f16*>(v), static_cast<f16*>(y), saved);
    case DType::bf16:
      return forward(d, static_cast<const bf16*>(x), static_cast<const bf16*>(w), static_cast<const bf16*>(b),
                     static_cast<const bf16*>(v), static_cast<bf16*>(y), saved);
    default: break;
  }
  MF_THROW("attentive_pool: unsupported dtype {}", dtype_name(dtype));
}

void attentive_pool_backward_cpu(const AttentivePoolDims& d, DType dtype, const void* w, const void* v,
                                 float* saved, const void* dy, void* dx, float* dw, float* db, float* dv,
                                 cudaStream_t) {
  switch (dtype) {
    case DType::f32:
      return backward(d, static_cast<const float*>(w), static_cast<const float*>(v), saved,
                      static_cast<const float*>(dy), static_cast<float*>(dx), dw, db, dv);
    case DType::f16:
      return backward(d, static_cast<const f16*>(w), static_cast<const f16*>(v), saved, static_cast<const f16*>(dy),
                      static_cast<f16*>(dx), dw, db, dv);
    case DType::bf16:
      return backward(d, static_cast<const bf16*>(w), static_cast<const bf16*>(v), saved,
                      static_cast<const bf16*>(dy), static_cast<bf16*>(dx), dw, db, dv);
    default: break;
  }
  MF_THROW("attentive_pool: unsupported dtype {}", dtype_name(dtype));
}

}  // namespace mf::kernels
