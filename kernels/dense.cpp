// CPU twin of dense: operand panels are converted to f32 and packed, then a
// cache-blocked kernel accumulates each C element over k in increasing order,
// so every tile path gives the same bits. Blocks of C rows are split over
// threads. Two kernels (engine/cpu_kernels.hpp): the twin's (4 x 16 register
// tiles, an AVX2 clone, no FMA; a row loop for the edges: s += a*b, two
// roundings per step) and the FMA ones of avx512 and avx2
// (kernels/gemm_cpu_simd.hpp: 8 x 32 or 6 x 16 tiles, s = fma(a, b, s), one
// rounding per step).
#include "kernels/dense.hpp"

#include <algorithm>
#include <vector>

#include "engine/cpu_kernels.hpp"
#include "engine/error.hpp"
#include "engine/float_convert.hpp"
#include "engine/parallel.hpp"
#include "engine/vec8.hpp"
#include "kernels/gemm_cpu_simd.hpp"

namespace mf::kernels {

namespace {

template <class T>
float ld(const void* p, std::int64_t i) {
  return to_f32(static_cast<const T*>(p)[i]);
}

float load(DType t, const void* p, std::int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f16: return ld<f16>(p, i);
    case DType::bf16: return ld<bf16>(p, i);
    default: break;
  }
  MF_THROW("dense: unsupported dtype {}", dtype_name(t));
}

void store(DType t, void* p, std::int64_t i, float v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = v; return;
    case DType::f16: static_cast<f16*>(p)[i] = f16(v); return;
    case DType::bf16: static_cast<bf16*>(p)[i] = bf16(v); return;
    default: break;
  }
  MF_THROW("dense: unsupported dtype {}", dtype_name(t));
}

constexpr std::int64_t kMB = 32;   // C rows per task
constexpr std::int64_t kNB = 256;  // C columns per panel
constexpr std::int64_t kKB = 128;  // reduction depth per panel
constexpr std::int64_t kTR = 4;    // micro-tile rows
constexpr std::int64_t kTC = 16;   // micro-tile columns (two 8-lane vectors)

template <class T>
void gather_typed(const T* s, std::int64_t stride, std::int64_t n, float* dst) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = to_f32(s[i * stride]);
}

// dst[i] = element at + i*stride of src (dtype) as f32, for i < n.
void gather_f32(DType dtype, const void* src, std::int64_t at, std::int64_t stride, std::int64_t n, float* dst) {
  if (stride == 1) {  // contiguous: the whole-buffer converter (a copy for f32)
    const auto* s = static_cast<const char*>(src) + at * std::int64_t(dtype_size(dtype));
    convert_floats(s, dtype, dst, DType::f32, n, false);
    return;
  }
  switch (dtype) {
    case DType::f32: return gather_typed(static_cast<const float*>(src) + at, stride, n, dst);
    case DType::f16: return gather_typed(static_cast<const f16*>(src) + at, stride, n, dst);
    case DType::bf16: return gather_typed(static_cast<const bf16*>(src) + at, stride, n, dst);
    default: break;
  }
  MF_THROW("dense: unsupported dtype {}", dtype_name(dtype));
}

// dst[c * ld + r] = src[r][c] for r, c < 8 (one 8 x 8 block transposed).
MF_SIMD_CLONES void store_transposed8(const float* const* src, float* dst, std::int64_t ld) {
  v8f r[8];
  for (int i = 0; i < 8; ++i) r[i] = load8(src[i]);
  transpose8x8(r);
  for (int i = 0; i < 8; ++i) store8(dst + i * ld, r[i]);
}

// B(k, n) for k < kn, n < nn as f32 row-major [kn, ld] at dst. Read in blocks
// of 64 k along the source's contiguous direction when that is k (b_rs == 1,
// a transposed weight), so neither side is walked with a stride in the inner loop.

void pack_b(DType dtype, const void* b, std::int64_t b_rs, std::int64_t b_cs, std::int64_t kn, std::int64_t nn,
            std::int64_t ld, float* dst) {
  if (b_rs == 1 && b_cs != 1) {
    // Blocks of 64 k x 8 n: eight contiguous k runs (read in place for f32,
    // else converted), written as 8 x 8 transposes (whole rows of 8 n), the
    // n edge one element at a time.
    float col[8][64];
    const float* run[8];
    for (std::int64_t k0 = 0; k0 < kn; k0 += 64) {
      const std::int64_t kb = std::min<std::int64_t>(64, kn - k0);
      for (std::int64_t j0 = 0; j0 < nn; j0 += 8) {
        const std::int64_t jb = std::min<std::int64_t>(8, nn - j0);
        for (std::int64_t j = 0; j < jb; ++j) {
          if (dtype == DType::f32) {
            run[j] = static_cast<const float*>(b) + k0 + (j0 + j) * b_cs;
          } else {
            gather_f32(dtype, b, k0 + (j0 + j) * b_cs, 1, kb, col[j]);
            run[j] = col[j];
          }
        }
        std::int64_t kk = 0;
        if (jb == 8) {
          for (; kk + 8 <= kb; kk += 8) {
            const float* at[8];
            for (int j = 0; j < 8; ++j) at[j] = run[j] + kk;
            store_transposed8(at, dst + (k0 + kk) * ld + j0, ld);
          }
        }
        for (; kk < kb; ++kk)
          for (std::int64_t j = 0; j < jb; ++j) dst[(k0 + kk) * ld + j0 + j] = run[j][kk];
      }
    }
    return;
  }
  for (std::int64_t kk = 0; kk < kn; ++kk) gather_f32(dtype, b, kk * b_rs, b_cs, nn, dst + kk * ld);
}

// c[r][j] += sum over kk < kn, in increasing kk, of ap[r * kKB + kk] * bp[kk * ldb + j],
// for r < kTR and j < kTC, in registers: each element's adds happen in the same
// order as the one-row loop below, so the bits are the same (no FMA: -ffp-contract=off).
MF_SIMD_CLONES void micro_tile(const float* ap, const float* bp, std::int64_t ldb, std::int64_t kn, float* c,
                               std::int64_t ldc) {
  v8f acc[kTR][2];
  for (int r = 0; r < kTR; ++r) {
    acc[r][0] = load8(c + r * ldc);
    acc[r][1] = load8(c + r * ldc + 8);
  }
  for (std::int64_t kk = 0; kk < kn; ++kk) {
    const v8f b0 = load8(bp + kk * ldb), b1 = load8(bp + kk * ldb + 8);
    for (int r = 0; r < kTR; ++r) {
      const float av = ap[r * kKB + kk];
      acc[r][0] += av * b0;
      acc[r][1] += av * b1;
    }
  }
  for (int r = 0; r < kTR; ++r) {
    store8(c + r * ldc, acc[r][0]);
    store8(c + r * ldc + 8, acc[r][1]);
  }
}

// The same sums for rows or columns a micro-tile does not cover.
MF_SIMD_CLONES void row_tail(const float* arow, const float* bp, std::int64_t ldb, std::int64_t kn, std::int64_t jn,
                             float* __restrict__ crow) {
  for (std::int64_t kk = 0; kk < kn; ++kk) {
    const float av = arow[kk];
    const float* __restrict__ brow = bp + kk * ldb;
    for (std::int64_t j = 0; j < jn; ++j) crow[j] += av * brow[j];
  }
}

// C rows [i0, i1) of one k panel (A packed [rows][kKB], B f32 [kn][ldb], C [rows][n]).
void panel(const float* ap, const float* bp, std::int64_t ldb, std::int64_t n, std::int64_t kn, std::int64_t rows,
           float* c) {
  for (std::int64_t jb = 0; jb < n; jb += kNB) {
    const std::int64_t jn = std::min(kNB, n - jb), jt = jn - jn % kTC;
    std::int64_t r = 0;
    for (; r + kTR <= rows; r += kTR) {
      for (std::int64_t j = 0; j < jt; j += kTC) micro_tile(ap + r * kKB, bp + jb + j, ldb, kn, c + r * n + jb + j, n);
      if (jt < jn)
        for (std::int64_t rr = r; rr < r + kTR; ++rr)
          row_tail(ap + rr * kKB, bp + jb + jt, ldb, kn, jn - jt, c + rr * n + jb + jt);
    }
    for (; r < rows; ++r) row_tail(ap + r * kKB, bp + jb, ldb, kn, jn, c + r * n + jb);
  }
}

}  // namespace

void gemm_cpu(std::int64_t m, std::int64_t n, std::int64_t k, DType dtype, const void* a,
              std::int64_t a_rs, std::int64_t a_cs, const void* b, std::int64_t b_rs,
              std::int64_t b_cs, float* c) {
  if (m == 0 || n == 0) return;
  const CpuKernels isa = active_cpu_kernels();
  // B as f32 row-major [K, ldb] (shared read-only by all threads): used in
  // place when it already is one (f32, rows contiguous), else packed once.
  std::vector<float> packed;
  const float* bp = static_cast<const float*>(b);
  std::int64_t ldb = b_rs;
  if (dtype != DType::f32 || b_cs != 1) {
    packed.resize(std::size_t(k * n));
    parallel_for((k + 63) / 64, [&](std::int64_t k0, std::int64_t k1) {
      const std::int64_t kb = k0 * 64, ke = std::min(k, k1 * 64);
      pack_b(dtype, static_cast<const char*>(b) + kb * b_rs * std::int64_t(dtype_size(dtype)), b_rs, b_cs, ke - kb,
             n, n, packed.data() + kb * n);
    });
    bp = packed.data();
    ldb = n;
  }
  const std::int64_t row_blocks = (m + kMB - 1) / kMB;
  parallel_for(row_blocks, [&](std::int64_t rb0, std::int64_t rb1) {
    std::vector<float> ap(std::size_t(kMB * kKB));
    for (std::int64_t rb = rb0; rb < rb1; ++rb) {
      const std::int64_t i0 = rb * kMB, i1 = std::min(m, i0 + kMB);
      for (std::int64_t i = i0; i < i1; ++i) std::fill(c + i * n, c + (i + 1) * n, 0.f);
      for (std::int64_t kb = 0; kb < k; kb += kKB) {
        const std::int64_t kn = std::min(kKB, k - kb);
        for (std::int64_t i = i0; i < i1; ++i)
          gather_f32(dtype, a, i * a_rs + kb * a_cs, a_cs, kn, ap.data() + (i - i0) * kKB);
        if (isa == CpuKernels::avx512)
          avx512::gemm_panel(ap.data(), kKB, bp + kb * ldb, ldb, kn, i1 - i0, n, c + i0 * n, n);
        else if (isa == CpuKernels::avx2)
          avx2::gemm_panel(ap.data(), kKB, bp + kb * ldb, ldb, kn, i1 - i0, n, c + i0 * n, n);
        else
          panel(ap.data(), bp + kb * ldb, ldb, n, kn, i1 - i0, c + i0 * n);
      }
    }
  });
}

void dense_forward_cpu(const DenseDims& d, DType dtype, const void* x, const void* w, const void* b,
                       void* y, cudaStream_t) {
  std::vector<float> acc(std::size_t(d.m * d.n));
  // C[M,N] = x[M,K] * W^T. gemm_cpu transposes its B while packing, so the
  // smaller of x and W goes there: C = x W^T (B(k, n) = w[n*K + k]) when the
  // batch is at least N, else C^T = W x^T, transposed back. Each element is
  // the same sum over k in the same order either way: the same bits.
  if (d.m >= d.n) {
    gemm_cpu(d.m, d.n, d.k, dtype, x, d.k, 1, w, 1, d.k, acc.data());
  } else {
    std::vector<float> acc_t(std::size_t(d.n * d.m));
    gemm_cpu(d.n, d.m, d.k, dtype, w, d.k, 1, x, 1, d.k, acc_t.data());
    for (std::int64_t i = 0; i < d.m; ++i)
      for (std::int64_t j = 0; j < d.n; ++j) acc[std::size_t(i * d.n + j)] = acc_t[std::size_t(j * d.m + i)];
  }
  parallel_for(d.m, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r)
      for (int j = 0; j < d.n; ++j) {
        float v = acc[std::size_t(r * d.n + j)] + load(dtype, b, j);
        if (d.relu) v = v > 0.f ? v : 0.f;
        store(dtype, y, r * d.n + j, v);
      }
  }, 64);
}

void dense_backward_cpu(const DenseDims& d, DType dtype, const void* x, const void* w, const void* y,
                        void* dy, void* dx, float* dw, float* db, cudaStream_t) {
  // dz = dy masked by relu'(y), in place (masking is exact in T).
  const void* dz = dy;
  if (d.relu) {
    parallel_for(d.m, [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t i = r0 * d.n; i < r1 * d.n; ++i)
        if (!(load(dtype, y, i) > 0.f)) store(dtype, dy, i, 0.f);
    }, 64);
  }
  // db[n] = sum_m dz[m, n], rows in increasing order.
  parallel_for(d.n, [&](std::int64_t j0, std::int64_t j1) {
    for (std::int64_t j = j0; j < j1; ++j) {
      float s = 0.f;
      for (std::int64_t r = 0; r < d.m; ++r) s += load(dtype, dz, r * d.n + j);
      db[j] = s;
    }
  });
  // dW[N,K] = dz^T[N,M] x[M,K]: A(n, m) = dz[m*N + n], B(m, k) = x[m*K + k].
  gemm_cpu(d.n, d.k, d.m, dtype, dz, 1, d.n, x, d.k, 1, dw);
  if (dx) {
    // dx[M,K] = dz[M,N] W[N,K].
    std::vector<float> acc(std::size_t(d.m * d.k));
    gemm_cpu(d.m, d.k, d.n, dtype, dz, d.n, 1, w, d.k, 1, acc.data());
    parallel_for(d.m * d.k, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) store(dtype, dx, i, acc[std::size_t(i)]);
    }, 1 << 14);
  }
}

}  // namespace mf::kernels
