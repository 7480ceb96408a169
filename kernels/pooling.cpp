// CPU twin of the pooling and elementwise ops (kernels/pooling.hpp has the
// contracts). Work is split over outputs (rows of y or dx, or whole samples
// for the reductions), each written by exactly one thread, and the reductions
// follow pooling.hpp's fixed lane order, so the bits do not depend on the
// thread count.
#include "kernels/pooling.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/error.hpp"
#include "engine/parallel.hpp"
#include "engine/vec8.hpp"
#include "kernels/relu.hpp"

namespace mf::kernels {

namespace {

// Calls f(T{}) with the storage type of dtype.
template <class F>
void with_float_type(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::bf16: return f(bf16{});
    case DType::f16: return f(f16{});
    default: break;
  }
  MF_THROW("{}: dtype {} is not f32, bf16 or f16", op, dtype_name(dtype));
}

// Rows of `width` elements per parallel chunk so a chunk holds ~16k elements.
std::int64_t grain_for(std::int64_t width) { return std::max<std::int64_t>(1, (1 << 14) / std::max<std::int64_t>(width, 1)); }

// One row of pooled outputs: pw windows of p x p pixels starting at x (the
// window's first input row; input rows row_stride elements apart), C channels
// each. PyTorch's rule: strictly greater wins (ties keep the first), NaN
// always wins. Branch-free selects over the channels, so the loops vectorise.
template <class T>
MF_SIMD_CLONES void max_pool_row(int pw, int p, int C, std::int64_t row_stride, const T* x, T* y,
                                 std::uint8_t* code, float* best, float* pos) {
  for (int ow = 0; ow < pw; ++ow) {
    const T* x0 = x + std::int64_t(ow) * p * C;
    for (int c = 0; c < C; ++c) {
      best[c] = to_f32(x0[c]);
      pos[c] = 0.f;
    }
    for (int i = 0; i < p; ++i)
      for (int j = i == 0 ? 1 : 0; j < p; ++j) {
        const T* xr = x0 + i * row_stride + std::int64_t(j) * C;
        const float here = float(i * p + j);
        for (int c = 0; c < C; ++c) {
          const float v = to_f32(xr[c]);
          const bool take = v > best[c] || v != v;
          best[c] = take ? v : best[c];
          pos[c] = take ? here : pos[c];
        }
      }
    const std::int64_t o = std::int64_t(ow) * C;
    for (int c = 0; c < C; ++c) y[o + c] = from_f32<T>(best[c]);  // exact: best holds a value of T
    if (code)
      for (int c = 0; c < C; ++c) code[o + c] = std::uint8_t(pos[c]);
  }
}

template <class T>
void max_pool_fwd(const PoolingDims& d, int p, const T* x, T* y, std::uint8_t* code) {
  const int ph = d.h / p, pw = d.w / p, C = d.c;
  parallel_for(d.n * ph, [&](std::int64_t r0, std::int64_t r1) {
    std::vector<float> best(static_cast<std::size_t>(C)), pos(static_cast<std::size_t>(C));
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t n = r / ph;
      const int oh = int(r % ph);
      const std::int64_t o = r * pw * C;
      max_pool_row(pw, p, C, std::int64_t(d.w) * C, x + (n * d.h + std::int64_t(oh) * p) * d.w * C, y + o,
                   code ? code + o : nullptr, best.data(), pos.data());
    }
  }, grain_for(std::int64_t(d.w) * C * p));
}

// One input row h of dx (w pixels of C channels): dy routed to the position
// each window's code names, 0 elsewhere and outside every window. dy and code
// point at the pooled row of h (null when h is below the last window).
template <class T>
MF_SIMD_CLONES void max_pool_bwd_row(int w, int p, int pw, int C, int h_in_window, const T* dy,
                                     const std::uint8_t* code, T* out) {
  for (int x = 0; x < w; ++x) {
    T* o = out + std::int64_t(x) * C;
    if (!dy || x / p >= pw) {
      for (int c = 0; c < C; ++c) o[c] = from_f32<T>(0.f);
      continue;
    }
    const auto here = std::uint8_t(h_in_window * p + x % p);
    const std::int64_t k = std::int64_t(x / p) * C;
    for (int c = 0; c < C; ++c) o[c] = code[k + c] == here ? dy[k + c] : from_f32<T>(0.f);
  }
}

template <class T>
void max_pool_bwd(const PoolingDims& d, int p, const T* dy, const std::uint8_t* code, T* dx) {
  const int ph = d.h / p, pw = d.w / p, C = d.c;
  parallel_for(d.n * d.h, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t n = r / d.h;
      const int h = int(r % d.h), oh = h / p;
      const std::int64_t o = (n * ph + oh) * pw * C;
      const bool in_window = oh < ph;
      max_pool_bwd_row(d.w, p, pw, C, h % p, in_window ? dy + o : nullptr, in_window ? code + o : nullptr,
                       dx + r * d.w * C);
    }
  }, grain_for(std::int64_t(d.w) * C));
}

// partial[lane * C + c] += v(i, c) for the positions of one sample, then the
// lanes combined in order: pooling.hpp's fixed reduction order.
// sum[c] = partial lane 0 + lane 1 + ... in lane order: the fold of lane_sums
// (and of the gate's backward, which fills the lanes itself).
void fold_lanes(const std::vector<float>& partial, int C, std::vector<float>& sum) {
  for (int c = 0; c < C; ++c) {
    float s = partial[std::size_t(c)];
    for (int l = 1; l < kPoolLanes; ++l) s += partial[std::size_t(l) * C + c];
    sum[std::size_t(c)] = s;
  }
}

template <class V>
void lane_sums(std::int64_t hw, int C, std::vector<float>& partial, std::vector<float>& sum, V&& v) {
  std::fill(partial.begin(), partial.end(), 0.f);
  for (std::int64_t i = 0; i < hw; ++i) {
    float* acc = partial.data() + (i % kPoolLanes) * C;
    for (int c = 0; c < C; ++c) acc[c] += v(i, c);
  }
  fold_lanes(partial, C, sum);
}

template <class T>
void gap_fwd(const PoolingDims& d, const T* x, T* y) {
  const int C = d.c;
  const std::int64_t hw = d.hw();
  parallel_for(d.n, [&](std::int64_t n0, std::int64_t n1) {
    std::vector<float> partial(std::size_t(kPoolLanes) * C), sum(static_cast<std::size_t>(C));
    for (std::int64_t n = n0; n < n1; ++n) {
      const T* xn = x + n * hw * C;
      lane_sums(hw, C, partial, sum, [&](std::int64_t i, int c) { return to_f32(xn[i * C + c]); });
      for (int c = 0; c < C; ++c) y[n * C + c] = from_f32<T>(sum[std::size_t(c)] / float(hw));
    }
  });
}

template <class T>
void gap_bwd(const PoolingDims& d, const T* dy, T* dx) {
  const int C = d.c;
  const std::int64_t hw = d.hw();
  parallel_for(d.n * hw, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* g = dy + (r / hw) * C;
      for (int c = 0; c < C; ++c) dx[r * C + c] = from_f32<T>(to_f32(g[c]) / float(hw));
    }
  }, grain_for(C));
}

// One image row of the gate: y = act(x * s[c] + res) for w pixels of C
// channels (res may be null). Channels innermost, so the loop vectorises; the
// same multiply then add (no FMA: -ffp-contract=off) in every clone.
template <class T>
MF_SIMD_CLONES void gate_row(int w, int C, bool relu, const T* x, const float* s, const T* res, T* y) {
  for (int p = 0; p < w; ++p) {
    const std::int64_t o = std::int64_t(p) * C;
    for (int c = 0; c < C; ++c) {
      float v = to_f32(x[o + c]) * s[c];
      if (res) v += to_f32(res[o + c]);
      y[o + c] = from_f32<T>(relu ? relu_keep_nan(v) : v);
    }
  }
}

template <class T>
void gate_fwd(const PoolingDims& d, bool relu, const T* x, const T* g, const T* res, T* y) {
  const int C = d.c;
  const std::int64_t rows = d.n * d.h, width = std::int64_t(d.w) * C;
  parallel_for(rows, [&](std::int64_t r0, std::int64_t r1) {
    std::vector<float> s(static_cast<std::size_t>(C));
    std::int64_t s_image = -1;
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t n = r / d.h;
      if (n != s_image) {
        for (int c = 0; c < C; ++c) s[std::size_t(c)] = stable_sigmoid(to_f32(g[n * C + c]));
        s_image = n;
      }
      gate_row(d.w, C, relu, x + r * width, s.data(), res ? res + r * width : nullptr, y + r * width);
    }
  }, grain_for(width));
}

// The gate's backward over the hw pixels of one image (C channels each):
// with relu dy masked in place where y is not > 0, dx = dy * s, and pixel i's
// dy * x added into partial lane i mod kPoolLanes (lane_sums' order). y is
// read only with relu.
template <class T>
MF_SIMD_CLONES void gate_bwd_image(std::int64_t hw, int C, bool relu, const T* x, const T* y, const float* s, T* dy,
                                   T* dx, float* partial) {
  for (std::int64_t i = 0; i < hw; ++i) {
    float* acc = partial + (i % kPoolLanes) * C;
    const std::int64_t o = i * C;
    for (int c = 0; c < C; ++c) {
      float gy = to_f32(dy[o + c]);
      if (relu) {
        gy = to_f32(y[o + c]) > 0.f ? gy : 0.f;
        dy[o + c] = from_f32<T>(gy);
      }
      dx[o + c] = from_f32<T>(gy * s[c]);
      acc[c] += gy * to_f32(x[o + c]);
    }
  }
}

template <class T>
void gate_bwd(const PoolingDims& d, bool relu, const T* x, const T* g, const T* y, T* dy, T* dx, T* dg) {
  const int C = d.c;
  const std::int64_t hw = d.hw();
  parallel_for(d.n, [&](std::int64_t n0, std::int64_t n1) {
    std::vector<float> s(static_cast<std::size_t>(C)), partial(std::size_t(kPoolLanes) * C), sum(static_cast<std::size_t>(C));
    for (std::int64_t n = n0; n < n1; ++n) {
      for (int c = 0; c < C; ++c) s[std::size_t(c)] = stable_sigmoid(to_f32(g[n * C + c]));
      std::fill(partial.begin(), partial.end(), 0.f);
      const std::int64_t k = n * hw * C;
      gate_bwd_image(hw, C, relu, x + k, relu ? y + k : nullptr, s.data(), dy + k, dx + k, partial.data());
      fold_lanes(partial, C, sum);
      for (int c = 0; c < C; ++c) dg[n * C + c] = from_f32<T>(channel_gate_dg(sum[std::size_t(c)], to_f32(g[n * C + c])));
    }
  });
}

template <class T>
void add_f32(std::int64_t n, const T* src, T* dst) {
  parallel_for(n, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) dst[i] = from_f32<T>(to_f32(dst[i]) + to_f32(src[i]));
  }, 1 << 14);
}

}  // namespace

void max_pool_forward_cpu(const PoolingDims& d, int pool, DType dtype, const void* x, void* y,
                          std::uint8_t* code, cudaStream_t) {
  with_float_type(dtype, "max_pool_forward_cpu", [&](auto tag) {
    using T = decltype(tag);
    max_pool_fwd(d, pool, static_cast<const T*>(x), static_cast<T*>(y), code);
  });
}

void max_pool_backward_cpu(const PoolingDims& d, int pool, DType dtype, const void* dy, const std::uint8_t* code,
                           void* dx, cudaStream_t) {
  with_float_type(dtype, "max_pool_backward_cpu", [&](auto tag) {
    using T = decltype(tag);
    max_pool_bwd(d, pool, static_cast<const T*>(dy), code, static_cast<T*>(dx));
  });
}

void global_avg_pool_forward_cpu(const PoolingDims& d, DType dtype, const void* x, void* y, cudaStream_t) {
  with_float_type(dtype, "global_avg_pool_forward_cpu", [&](auto tag) {
    using T = decltype(tag);
    gap_fwd(d, static_cast<const T*>(x), static_cast<T*>(y));
  });
}

void global_avg_pool_backward_cpu(const PoolingDims& d, DType dtype, const void* dy, void* dx, cudaStream_t) {
  with_float_type(dtype, "global_avg_pool_backward_cpu", [&](auto tag) {
    using T = decltype(tag);
    gap_bwd(d, static_cast<const T*>(dy), static_cast<T*>(dx));
  });
}

void channel_gate_forward_cpu(const PoolingDims& d, bool relu, DType dtype, const void* x, const void* g,
                              const void* residual, void* y, cudaStream_t) {
  with_float_type(dtype, "channel_gate_forward_cpu", [&](auto tag) {
    using T = decltype(tag);
    gate_fwd(d, relu, static_cast<const T*>(x), static_cast<const T*>(g), static_cast<const T*>(residual),
             static_cast<T*>(y));
  });
}

void channel_gate_backward_cpu(const PoolingDims& d, bool relu, DType dtype, const void* x, const void* g,
                               const void* y, void* dy, void* dx, void* dg, cudaStream_t) {
  with_float_type(dtype, "channel_gate_backward_cpu", [&](auto tag) {
    using T = decltype(tag);
    gate_bwd(d, relu, static_cast<const T*>(x), static_cast<const T*>(g), static_cast<const T*>(y),
             static_cast<T*>(dy), static_cast<T*>(dx), static_cast<T*>(dg));
  });
}

void add_inplace_cpu(std::int64_t n, DType dtype, const void* src, void* dst, cudaStream_t) {
  with_float_type(dtype, "add_inplace_cpu", [&](auto tag) {
    using T = decltype(tag);
    add_f32(n, static_cast<const T*>(src), static_cast<T*>(dst));
  });
}

}  // namespace mf::kernels
