// conv_relu_pool on the CPU: the twin (the reference in tests) and, around
// the same loops, the FMA micro-kernels of the avx2 and avx512 CPU kernels
// (kernels/conv_cpu_simd.hpp; which one runs: engine/cpu_kernels.hpp).
//
// Work is cut into conv output rows. Each row is computed by one register-
// blocked micro-kernel (the twin's conv_row: 4 output pixels x 8 output
// channels held in registers, inner loop over input channels, weights
// pre-transposed to [k][k][Cin][Cout padded] f32 so channel vectors are
// contiguous; the FMA kernels: wider tiles, the paddings of CpuPath). Inputs
// are converted to f32 once per row into a zero-padded row buffer, so the
// kernels have no bounds checks.
//
// Forward: parallel over (image, pooled row); conv rows are pooled in f32 and
//   each output rounded once to T.
// Backward: the dense pre-activation gradient g (dy routed to the winning
//   position of each pooled window, 0 elsewhere and where ReLU blocked) is
//   rebuilt row by row from the saved codes.
//   dx = the same conv micro-kernel applied to g with the flipped, transposed
//        weights (a "full" correlation); parallel over (image, row).
//   dw, db: conv rows are split into a number of chunks that depends only
//        on the shape (never on the thread count); each chunk accumulates its
//        own partial in row order, then the partials are summed in chunk
//        order (kernels/conv_dw_partials.hpp). Bit-identical for any number
//        of threads.
// Precision: T operands widened to f32, f32 accumulation (the twin: a
// multiply and an add per term; the FMA kernels: one fused op), one rounding
// per output. (x * 0 terms are not skipped, so Inf/NaN in inputs propagate as in
// PyTorch.)
#include "kernels/conv_relu_pool.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <vector>

#include "engine/cpu_kernels.hpp"
#include "engine/error.hpp"
#include "engine/log.hpp"
#include "engine/parallel.hpp"
#include "engine/vec8.hpp"
#include "kernels/conv_algo_lab.hpp"
#include "kernels/conv_cpu_simd.hpp"
#include "kernels/conv_dw_partials.hpp"
#include "kernels/conv_relu_pool_cuda.cuh"

namespace mf::kernels {

// ---- the CUDA variant selector ---------------------------------------------

namespace {
ConvAlgo algo_from_env() {
  const char* e = std::getenv("MELFORGE_CONV_ALGO");
  if (!e || !*e) return ConvAlgo::automatic;
  const std::string_view v(e);
  if (v == "auto" || v == "0") return ConvAlgo::automatic;
  if (v == "direct" || v == "1") return ConvAlgo::direct;
  if (v == "tiled" || v == "2") return ConvAlgo::tiled;
  if (v == "mma" || v == "3") return ConvAlgo::mma;
  if (v == "cin1" || v == "4") return ConvAlgo::cin1;
  if (v == "resident" || v == "5") return ConvAlgo::resident;
  MF_THROW("MELFORGE_CONV_ALGO='{}': expected auto, direct, tiled, mma, cin1 or resident", v);
}
std::atomic<int>& algo_slot() {
  static std::atomic<int> a{int(algo_from_env())};
  return a;
}
}  // namespace

void set_conv_relu_pool_algo(ConvAlgo algo) { algo_slot().store(int(algo)); }
ConvAlgo conv_relu_pool_algo() { return ConvAlgo(algo_slot().load()); }
void note_conv_fp32_fallback(const ConvReluPoolDims& d, DType dtype, const char* direction, const char* why) {
  static std::atomic<bool> said_forward{false}, said_backward{false};
  std::atomic<bool>& said = std::string_view(direction) == "forward" ? said_forward : said_backward;
  if (d.cin == 1 || said.exchange(true)) return;
  log_warn("conv {} ({}x{}x{} -> {}, k {}, pool {}, {}): the tensor-core path cannot run it ({}); running the FP32 "
           "CUDA-core kernel, about 10x slower",
           direction, d.h, d.w, d.cin, d.cout, d.k, d.pool, dtype_name(dtype), why);
}

const char* conv_algo_name(ConvAlgo algo) {
  switch (algo) {
    case ConvAlgo::automatic: return "auto";
    case ConvAlgo::direct: return "direct";
    case ConvAlgo::tiled: return "tiled";
    case ConvAlgo::mma: return "mma";
    case ConvAlgo::cin1: return "cin1";
    case ConvAlgo::resident: return "resident";
  }
  return "?";
}

namespace {

constexpr int kPB = 4;  // output pixels per micro-tile
constexpr int kCB = 8;  // output channels per micro-tile

inline std::int64_t round_up(std::int64_t v, std::int64_t m) { return (v + m - 1) / m * m; }

// v8f/v8i, load8/store8 and the AVX2 clones (same bits in every clone): engine/vec8.hpp.
static_assert(kCB == 8);

// out[ow][co] = bias[co] + sum_{r,s,ci} rows[r][(ow + s) * cin + ci] * wt[((r*k + s)*cin + ci)*coutp + co]
// for ow < wout_p (a multiple of kPB) and co < coutp (a multiple of kCB).
// rows[r] holds wout_p + k - 1 pixels of cin floats. Per output: the sum runs
// over r, s, ci in that order.
MF_SIMD_CLONES void conv_row(const float* const* rows, int cin, int k, const float* wt, int coutp,
                            const float* bias, int wout_p, float* out) {
  for (int ow = 0; ow < wout_p; ow += kPB) {
    for (int cb = 0; cb < coutp; cb += kCB) {
      v8f acc[kPB];
      const v8f init = bias ? load8(bias + cb) : v8f{};
      for (int p = 0; p < kPB; ++p) acc[p] = init;
      for (int r = 0; r < k; ++r) {
        for (int s = 0; s < k; ++s) {
          const float* xp = rows[r] + std::int64_t(ow + s) * cin;
          const float* wp = wt + std::int64_t((r * k + s) * cin) * coutp + cb;
          for (int ci = 0; ci < cin; ++ci) {
            const v8f wv = load8(wp + std::int64_t(ci) * coutp);
            for (int p = 0; p < kPB; ++p) acc[p] += xp[p * cin + ci] * wv;
          }
        }
      }
      for (int p = 0; p < kPB; ++p) store8(out + std::int64_t(ow + p) * coutp + cb, acc[p]);
    }
  }
}

// NC input channels at once: NC independent accumulation chains.
template <int NC>
inline void dw_channels(const float* xr, int cin, int ci, const float* g, int coutp, int cb, int wout_p,
                        float* dst) {
  v8f acc[NC];
  for (int j = 0; j < NC; ++j) acc[j] = load8(dst + std::int64_t(j) * coutp + cb);
  for (int ow = 0; ow < wout_p; ++ow) {
    const v8f gv = load8(g + std::int64_t(ow) * coutp + cb);
    const float* xv = xr + std::int64_t(ow) * cin + ci;
    for (int j = 0; j < NC; ++j) acc[j] += xv[j] * gv;
  }
  for (int j = 0; j < NC; ++j) store8(dst + std::int64_t(j) * coutp + cb, acc[j]);
}

// dwt[((r*k + s)*cin + ci)*coutp + co] += sum_ow rows[r][(ow + s)*cin + ci] * g[ow*coutp + co]
// and db[co] += sum_ow g[ow*coutp + co] (sums over ow in order).
MF_SIMD_CLONES void dw_row(const float* const* rows, int cin, int k, const float* g, int coutp, int wout_p,
                          float* dwt, float* db) {
  for (int r = 0; r < k; ++r) {
    for (int s = 0; s < k; ++s) {
      const float* xr = rows[r] + std::int64_t(s) * cin;
      float* dst = dwt + std::int64_t((r * k + s) * cin) * coutp;
      for (int cb = 0; cb < coutp; cb += kCB) {
        int ci = 0;
        for (; ci + 4 <= cin; ci += 4)
          dw_channels<4>(xr, cin, ci, g, coutp, cb, wout_p, dst + std::int64_t(ci) * coutp);
        for (; ci < cin; ++ci)
          dw_channels<1>(xr, cin, ci, g, coutp, cb, wout_p, dst + std::int64_t(ci) * coutp);
      }
    }
  }
  for (int cb = 0; cb < coutp; cb += kCB) {
    v8f acc = load8(db + cb);
    for (int ow = 0; ow < wout_p; ++ow) acc += load8(g + std::int64_t(ow) * coutp + cb);
    store8(db + cb, acc);
  }
}

// Fills `dst` (width_p pixels of c floats) with image row `ih` of `src`
// ([H][W][c] of T), shifted so dst pixel j holds column j - pad; zeros outside.
template <class T>
void load_row(const T* src, int h, int w, int c, int ih, int pad, int width_p, float* dst) {
  std::fill(dst, dst + std::int64_t(width_p) * c, 0.f);
  if (ih < 0 || ih >= h) return;
  const T* row = src + std::int64_t(ih) * w * c;
  for (int j = std::max(0, pad); j < width_p; ++j) {
    const int iw = j - pad;
    if (iw >= w) break;
    const T* px = row + std::int64_t(iw) * c;
    float* o = dst + std::int64_t(j) * c;
    for (int ci = 0; ci < c; ++ci) o[ci] = to_f32(px[ci]);
  }
}

// o[co] = dyf[co] where code[co] == pos, else 0, for co < n: 8 channels at a
// time with a vector select (codes follow the data: a branch mispredicts).
MF_SIMD_CLONES void route_channels(const std::uint8_t* code, const float* dyf, int pos, int n, float* o) {
  const v8i want = v8i{} + pos;
  int co = 0;
  for (; co + 8 <= n; co += 8) {
    v8i c;
    for (int i = 0; i < 8; ++i) c[i] = code[co + i];
    store8(o + co, c == want ? load8(dyf + co) : v8f{});
  }
  for (; co < n; ++co) o[co] = code[co] == pos ? dyf[co] : 0.f;
}

// g for conv row `oh` of image n: width_p pixels of `cs` floats, pixel j holds
// conv column j - shift; dy routed to the winning position, zeros elsewhere.
// dyf: scratch for one pooled row of dy as f32 (pw * cout floats; unused for f32).
template <class T>
void grad_row(const ConvReluPoolDims& d, const T* dy_n, const std::uint8_t* code_n, int oh,
              int shift, int width_p, int cs, float* dst, float* dyf) {
  std::fill(dst, dst + std::int64_t(width_p) * cs, 0.f);
  const int p = d.pool, ph_n = d.ph(), pw_n = d.pw();
  if (oh < 0 || oh >= ph_n * p) return;
  const int ph = oh / p, dyo = oh % p;
  const std::int64_t row = std::int64_t(ph) * pw_n * d.cout;
  const float* dyr;
  if constexpr (std::is_same_v<T, float>) {
    dyr = dy_n + row;
  } else {
    for (std::int64_t i = 0; i < std::int64_t(pw_n) * d.cout; ++i) dyf[i] = to_f32(dy_n[row + i]);
    dyr = dyf;
  }
  for (int pw = 0; pw < pw_n; ++pw) {
    for (int dxo = 0; dxo < p; ++dxo) {
      const int j = pw * p + dxo + shift;
      if (j < 0 || j >= width_p) continue;
      route_channels(code_n + row + std::int64_t(pw) * d.cout, dyr + std::int64_t(pw) * d.cout, dyo * p + dxo,
                     d.cout, dst + std::int64_t(j) * cs);
    }
  }
}

// The max of one p x p pooling window for 8 channels at once: win points at
// the window's first conv output (channels contiguous, pixels `pixel` floats
// apart, rows `row` floats apart). PyTorch's rule per channel, in window order:
// strictly greater wins (ties keep the first), NaN always wins. Branch-free
// (the scalar loop's branches mispredicted on real data: a third of a CPU
// step's forward); each lane makes the same comparisons in the same order.
// Then the ReLU, also branch-free: y_out = the max where it is > 0 or NaN,
// else 0; code_out = its position there, else kNoGrad.
MF_SIMD_CLONES void pool_window(const float* win, int p, std::int64_t row, int pixel, float* y_out, int* code_out) {
  v8f best = load8(win);
  v8i pos = v8i{};
  for (int dr = 0; dr < p; ++dr)
    for (int dc = 0; dc < p; ++dc) {
      const v8f v = load8(win + dr * row + std::int64_t(dc) * pixel);
      const v8i take = (v > best) | (v != v);
      best = take ? v : best;
      const int at = dr * p + dc;
      pos = take ? v8i{at, at, at, at, at, at, at, at} : pos;
    }
  const v8i pass = (best > v8f{}) | (best != best);
  store8(y_out, pass ? best : v8f{});
  const v8i code = pass ? pos : v8i{} + int(kNoGrad);
  std::memcpy(code_out, &code, sizeof code);
}

// wt[((r*k + s)*cin + ci)*coutp + co] = w[co][r][s][ci] (0 for co >= cout).
template <class T>
std::vector<float> transpose_weights(const ConvReluPoolDims& d, const T* w, int coutp) {
  const int k = d.k;
  std::vector<float> wt(std::size_t(k) * k * d.cin * coutp, 0.f);
  for (int co = 0; co < d.cout; ++co)
    for (int r = 0; r < k; ++r)
      for (int s = 0; s < k; ++s)
        for (int ci = 0; ci < d.cin; ++ci)
          wt[(std::size_t((r * k + s) * d.cin + ci)) * coutp + co] =
              to_f32(w[((std::int64_t(co) * k + r) * k + s) * d.cin + ci]);
  return wt;
}

// For dx: wf[((r*k + s)*cout + co)*cinp + ci] = w[co][k-1-r][k-1-s][ci].
template <class T>
std::vector<float> flipped_weights(const ConvReluPoolDims& d, const T* w, int cinp) {
  const int k = d.k;
  std::vector<float> wf(std::size_t(k) * k * d.cout * cinp, 0.f);
  for (int co = 0; co < d.cout; ++co)
    for (int r = 0; r < k; ++r)
      for (int s = 0; s < k; ++s)
        for (int ci = 0; ci < d.cin; ++ci)
          wf[(std::size_t(((k - 1 - r) * k + (k - 1 - s)) * d.cout + co)) * cinp + ci] =
              to_f32(w[((std::int64_t(co) * k + r) * k + s) * d.cin + ci]);
  return wf;
}

// The twin's dw for a group of conv rows at stride 1 (conv_relu_pool's
// only stride): dw_row per row, in order.
void dw_rows_twin(const float* const* xrows, int nconv, int st, int cin, int k, const float* const* g,
                  int coutp, int wout_p, float* dwt, float* db) {
  MF_CHECK(st == 1, "conv_relu_pool: the twin's dw_rows takes stride 1, found {}", st);
  for (int j = 0; j < nconv; ++j) dw_row(xrows + j, cin, k, g[j], coutp, wout_p, dwt, db);
}

// The micro-kernels one CPU variant runs (engine/cpu_kernels.hpp), and the
// paddings they need.
struct CpuPath {
  int pixel_block;    // conv row widths are padded to a multiple of this
  int channel_block;  // output channel counts are padded to a multiple of this
  ConvRowFn conv;
  DwRowsFn dw;        // dw/db for nconv consecutive conv rows of one image
};

CpuPath cpu_path() {
  switch (active_cpu_kernels()) {
    case CpuKernels::avx512: return {avx512::kPixelBlock, avx512::kChannelBlock, avx512::conv_row, avx512::dw_rows};
    case CpuKernels::avx2: return {avx2::kPixelBlock, avx2::kChannelBlock, avx2::conv_row, avx2::dw_rows};
    default: return {kPB, kCB, conv_row, dw_rows_twin};
  }
}

template <class T>
void forward(const ConvReluPoolDims& d, const T* x, const T* w, const T* b, T* y, std::uint8_t* code) {
  const int p = d.pool, k = d.k, pad = k / 2, ph_n = d.ph(), pw_n = d.pw();
  if (d.n == 0 || ph_n == 0 || pw_n == 0) return;
  const CpuPath path = cpu_path();
  const int coutp = int(round_up(d.cout, path.channel_block));
  const int wc_p = int(round_up(std::int64_t(pw_n) * p, path.pixel_block));  // conv columns computed
  const int in_w = wc_p + k - 1;
  const std::vector<float> wt = transpose_weights(d, w, coutp);
  std::vector<float> bias(coutp, 0.f);
  for (int co = 0; co < d.cout; ++co) bias[co] = to_f32(b[co]);

  parallel_for(d.n * ph_n, [&](std::int64_t begin, std::int64_t end) {
    const int nrows = p + k - 1;
    std::vector<float> in(std::size_t(nrows) * in_w * d.cin);
    std::vector<float> out(std::size_t(p) * wc_p * coutp);
    std::vector<const float*> rows(k);
    for (std::int64_t u = begin; u < end; ++u) {
      const std::int64_t n = u / ph_n;
      const int ph = int(u % ph_n);
      const T* xn = x + n * d.h * d.w * d.cin;
      for (int i = 0; i < nrows; ++i)
        load_row(xn, d.h, d.w, d.cin, ph * p - pad + i, pad, in_w,
                 in.data() + std::size_t(i) * in_w * d.cin);
      for (int dr = 0; dr < p; ++dr) {
        for (int r = 0; r < k; ++r) rows[r] = in.data() + std::size_t(dr + r) * in_w * d.cin;
        path.conv(rows.data(), d.cin, k, wt.data(), coutp, bias.data(), wc_p,
                  out.data() + std::size_t(dr) * wc_p * coutp);
      }
      const std::int64_t obase = (n * ph_n + ph) * pw_n * d.cout;
      float yv[kCB];
      int cv[kCB];
      for (int pw = 0; pw < pw_n; ++pw) {
        for (int cb = 0; cb < d.cout; cb += kCB) {
          pool_window(out.data() + std::size_t(pw * p) * coutp + cb, p, std::int64_t(wc_p) * coutp, coutp, yv, cv);
          const std::int64_t at = obase + std::int64_t(pw) * d.cout;
          const int nc = std::min(d.cout, cb + kCB) - cb;
          for (int j = 0; j < nc; ++j) y[at + cb + j] = from_f32<T>(yv[j]);
          if (code)
            for (int j = 0; j < nc; ++j) code[at + cb + j] = std::uint8_t(cv[j]);
        }
      }
    }
  });
}

template <class T>
void backward(const ConvReluPoolDims& d, const T* x, const T* w, const T* dy, const std::uint8_t* code,
              T* dx, float* dw, float* db) {
  const int p = d.pool, k = d.k, pad = k / 2, ph_n = d.ph(), pw_n = d.pw();
  const int hc = ph_n * p;  // conv rows/cols that reach an output
  const std::int64_t y_img = std::int64_t(ph_n) * pw_n * d.cout;
  const CpuPath path = cpu_path();

  // ---- dx: full correlation of g with the flipped weights ----
  if (dx) {
    const int cinp = int(round_up(d.cin, path.channel_block));
    const int wx_p = int(round_up(d.w, path.pixel_block));
    const int gw = wx_p + k - 1;
    const std::vector<float> wf = flipped_weights(d, w, cinp);
    parallel_for(d.n * d.h, [&](std::int64_t begin, std::int64_t end) {
      // g rows cached by conv row: slot oh mod k holds (slot_n, slot_oh), so
      // consecutive input rows compute one new g row each, not k.
      std::vector<float> g(std::size_t(k) * gw * d.cout), dyf(std::size_t(pw_n) * d.cout);
      std::vector<std::int64_t> slot_n(k, -1);
      std::vector<int> slot_oh(k, 0);
      std::vector<float> out(std::size_t(wx_p) * cinp);
      std::vector<const float*> rows(k);
      for (std::int64_t u = begin; u < end; ++u) {
        const std::int64_t n = u / d.h;
        const int ih = int(u % d.h);
        T* dxr = dx + (n * d.h + ih) * std::int64_t(d.w) * d.cin;
        if (ih - pad >= hc) {  // no conv row that reaches an output touches this row
          for (std::int64_t i = 0; i < std::int64_t(d.w) * d.cin; ++i) dxr[i] = from_f32<T>(0.f);
          continue;
        }
        for (int r = 0; r < k; ++r) {
          const int oh = ih + r - pad, slot = ((oh % k) + k) % k;
          float* gr = g.data() + std::size_t(slot) * gw * d.cout;
          if (slot_n[slot] != n || slot_oh[slot] != oh) {
            grad_row(d, dy + n * y_img, code + n * y_img, oh, pad, gw, d.cout, gr, dyf.data());
            slot_n[slot] = n;
            slot_oh[slot] = oh;
          }
          rows[r] = gr;
        }
        path.conv(rows.data(), d.cout, k, wf.data(), cinp, nullptr, wx_p, out.data());
        for (int iw = 0; iw < d.w; ++iw)
          for (int ci = 0; ci < d.cin; ++ci)
            dxr[std::int64_t(iw) * d.cin + ci] = from_f32<T>(out[std::size_t(iw) * cinp + ci]);
      }
    });
  }

  // ---- dw, db: fixed chunks of conv rows, partials summed in chunk order ----
  const int coutp = int(round_up(d.cout, path.channel_block));
  const std::int64_t units = d.n * hc;
  const std::int64_t chunks = dw_partial_chunks(units);
  const std::int64_t part = std::int64_t(k) * k * d.cin * coutp + coutp;  // dwt then db
  float* partials = dw_partials_scratch(chunks * part);
  if (chunks > 0) {
    const int wc_p = int(round_up(std::int64_t(pw_n) * p, path.pixel_block));
    const int in_w = wc_p + k - 1;
    parallel_for(chunks, [&](std::int64_t cbeg, std::int64_t cend) {
      std::vector<float> in(std::size_t(kDwGroup + k - 1) * in_w * d.cin);
      std::vector<float> g(std::size_t(kDwGroup) * wc_p * coutp), dyf(std::size_t(pw_n) * d.cout);
      std::vector<const float*> xrows(kDwGroup + k - 1), grows(kDwGroup);
      for (std::int64_t c = cbeg; c < cend; ++c) {
        float* dwt = partials + c * part;
        std::fill(dwt, dwt + part, 0.f);
        float* dbp = dwt + part - coutp;
        const std::int64_t uend = units * (c + 1) / chunks;
        for (std::int64_t u = units * c / chunks; u < uend;) {  // groups of conv rows of one image
          const std::int64_t n = u / hc;
          const int oh0 = int(u % hc);
          const int nconv = int(std::min<std::int64_t>({kDwGroup, uend - u, hc - oh0}));
          for (int j = 0; j < nconv; ++j) {
            float* gr = g.data() + std::size_t(j) * wc_p * coutp;
            grad_row(d, dy + n * y_img, code + n * y_img, oh0 + j, 0, wc_p, coutp, gr, dyf.data());
            grows[j] = gr;
          }
          const T* xn = x + n * d.h * d.w * d.cin;
          for (int i = 0; i < nconv + k - 1; ++i) {
            float* ir = in.data() + std::size_t(i) * in_w * d.cin;
            load_row(xn, d.h, d.w, d.cin, oh0 - pad + i, pad, in_w, ir);
            xrows[i] = ir;
          }
          path.dw(xrows.data(), nconv, 1, d.cin, k, grows.data(), coutp, wc_p, dwt, dbp);
          u += nconv;
        }
      }
    });
  }
  reduce_dw_partials(partials, chunks, part, k * k * d.cin, d.cout, coutp, dw, db);
}

}  // namespace

void conv_relu_pool_forward_cpu(const ConvReluPoolDims& d, DType dtype, const void* x, const void* w,
                                const void* b, void* y, std::uint8_t* code, cudaStream_t) {
  switch (dtype) {
    case DType::f32:
      return forward(d, static_cast<const float*>(x), static_cast<const float*>(w),
                     static_cast<const float*>(b), static_cast<float*>(y), code);
    case DType::f16:
      return forward(d, static_cast<const f16*>(x), static_cast<const f16*>(w),
                     static_cast<const f16*>(b), static_cast<f16*>(y), code);
    case DType::bf16:
      return forward(d, static_cast<const bf16*>(x), static_cast<const bf16*>(w),
                     static_cast<const bf16*>(b), static_cast<bf16*>(y), code);
    default: MF_THROW("conv_relu_pool_forward_cpu: dtype {} is not f32, f16 or bf16", dtype_name(dtype));
  }
}

void conv_relu_pool_backward_cpu(const ConvReluPoolDims& d, DType dtype, const void* x, const void* w,
                                 const void* dy, const std::uint8_t* code, void* dx, float* dw,
                                 float* db, cudaStream_t) {
  switch (dtype) {
    case DType::f32:
      return backward(d, static_cast<const float*>(x), static_cast<const float*>(w),
                      static_cast<const float*>(dy), code, static_cast<float*>(dx), dw, db);
    case DType::f16:
      return backward(d, static_cast<const f16*>(x), static_cast<const f16*>(w),
                      static_cast<const f16*>(dy), code, static_cast<f16*>(dx), dw, db);
    case DType::bf16:
      return backward(d, static_cast<const bf16*>(x), static_cast<const bf16*>(w),
                      static_cast<const bf16*>(dy), code, static_cast<bf16*>(dx), dw, db);
    default: MF_THROW("conv_relu_pool_backward_cpu: dtype {} is not f32, f16 or bf16", dtype_name(dtype));
  }
}

}  // namespace mf::kernels
