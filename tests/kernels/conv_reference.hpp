// Naive float64 reference of conv_relu_pool (kernels/conv_relu_pool.hpp):
// plain loops, no tiling, no threads. Inputs are given as floats (the values
// the kernel sees after widening T to f32); results are doubles.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/conv_relu_pool.hpp"

namespace mf::testing {

struct ConvRef {
  std::vector<double> pre;   // [N, H, W, Cout] conv + bias
  std::vector<double> y;     // [N, PH, PW, Cout]
  std::vector<std::uint8_t> code;
};

inline ConvRef conv_ref_forward(const kernels::ConvReluPoolDims& d, const std::vector<float>& x,
                                const std::vector<float>& w, const std::vector<float>& b) {
  const int k = d.k, pad = k / 2, p = d.pool, ph_n = d.ph(), pw_n = d.pw();
  ConvRef r;
  r.pre.assign(std::size_t(d.n) * d.h * d.w * d.cout, 0.0);
  for (std::int64_t n = 0; n < d.n; ++n)
    for (int oh = 0; oh < d.h; ++oh)
      for (int ow = 0; ow < d.w; ++ow)
        for (int co = 0; co < d.cout; ++co) {
          double acc = b[co];
          for (int i = 0; i < k; ++i)
            for (int j = 0; j < k; ++j) {
              const int ih = oh + i - pad, iw = ow + j - pad;
              if (ih < 0 || ih >= d.h || iw < 0 || iw >= d.w) continue;
              for (int ci = 0; ci < d.cin; ++ci)
                acc += double(x[((n * d.h + ih) * d.w + iw) * d.cin + ci]) *
                       double(w[((std::int64_t(co) * k + i) * k + j) * d.cin + ci]);
            }
          r.pre[((n * d.h + oh) * d.w + ow) * d.cout + co] = acc;
        }
  r.y.assign(std::size_t(d.n) * ph_n * pw_n * d.cout, 0.0);
  r.code.assign(r.y.size(), kernels::kNoGrad);
  for (std::int64_t n = 0; n < d.n; ++n)
    for (int ph = 0; ph < ph_n; ++ph)
      for (int pw = 0; pw < pw_n; ++pw)
        for (int co = 0; co < d.cout; ++co) {
          // ReLU first, then max with PyTorch's rule (first of equals, NaN wins).
          double best = -INFINITY;
          int bpos = -1;
          for (int i = 0; i < p; ++i)
            for (int j = 0; j < p; ++j) {
              const double v = r.pre[((n * d.h + ph * p + i) * d.w + pw * p + j) * d.cout + co];
              const double a = std::isnan(v) ? v : (v > 0 ? v : 0.0);
              if (bpos < 0 || a > best || std::isnan(a)) {
                best = a;
                bpos = i * p + j;
              }
            }
          const std::size_t o = ((n * ph_n + ph) * pw_n + pw) * d.cout + co;
          r.y[o] = best;
          const double v = r.pre[((n * d.h + ph * p + bpos / p) * d.w + pw * p + bpos % p) * d.cout + co];
          r.code[o] = (v > 0 || std::isnan(v)) ? std::uint8_t(bpos) : kernels::kNoGrad;
        }
  return r;
}

struct ConvRefGrads {
  std::vector<double> dx, dw, db;
};

// Gradients given the routing codes (from the forward) and dy.
inline ConvRefGrads conv_ref_backward(const kernels::ConvReluPoolDims& d, const std::vector<float>& x,
                                      const std::vector<float>& w, const std::vector<float>& dy,
                                      const std::vector<std::uint8_t>& code) {
  const int k = d.k, pad = k / 2, p = d.pool, ph_n = d.ph(), pw_n = d.pw();
  std::vector<double> g(std::size_t(d.n) * d.h * d.w * d.cout, 0.0);
  for (std::int64_t n = 0; n < d.n; ++n)
    for (int ph = 0; ph < ph_n; ++ph)
      for (int pw = 0; pw < pw_n; ++pw)
        for (int co = 0; co < d.cout; ++co) {
          const std::size_t o = ((n * ph_n + ph) * pw_n + pw) * d.cout + co;
          if (code[o] == kernels::kNoGrad) continue;
          const int i = code[o] / p, j = code[o] % p;
          g[((n * d.h + ph * p + i) * d.w + pw * p + j) * d.cout + co] = dy[o];
        }
  ConvRefGrads r;
  r.dx.assign(x.size(), 0.0);
  r.dw.assign(w.size(), 0.0);
  r.db.assign(std::size_t(d.cout), 0.0);
  for (std::int64_t n = 0; n < d.n; ++n)
    for (int oh = 0; oh < d.h; ++oh)
      for (int ow = 0; ow < d.w; ++ow)
        for (int co = 0; co < d.cout; ++co) {
          const double gv = g[((n * d.h + oh) * d.w + ow) * d.cout + co];
          if (gv == 0) continue;
          r.db[co] += gv;
          for (int i = 0; i < k; ++i)
            for (int j = 0; j < k; ++j) {
              const int ih = oh + i - pad, iw = ow + j - pad;
              if (ih < 0 || ih >= d.h || iw < 0 || iw >= d.w) continue;
              for (int ci = 0; ci < d.cin; ++ci) {
                const std::size_t xi = ((n * d.h + ih) * d.w + iw) * d.cin + ci;
                const std::size_t wi = ((std::size_t(co) * k + i) * k + j) * d.cin + ci;
                r.dw[wi] += gv * double(x[xi]);
                r.dx[xi] += gv * double(w[wi]);
              }
            }
        }
  return r;
}

}  // namespace mf::testing
