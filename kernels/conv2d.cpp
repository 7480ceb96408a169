// conv2d CPU twin: the reference in tests and the engine's CPU backend.
//
// One register-blocked micro-kernel (tap_row: 4 pixels x 8 lanes held in
// registers, inner loop over the contiguous channels of one tap) serves the
// forward and dx. Inputs are widened to f32 once per row into zero-padded row
// buffers, so the micro-kernel has no bounds checks; the weights are
// rearranged once per call to [k][k][C_in_of_the_product][lanes padded to 8] f32
// so the 8-lane vectors are contiguous and auto-vectorize.
//
//   forward: parallel over output rows (n, oh); the taps are (r, s), each
//            reading its x row at pixel ow*stride + s (stride > 1 is a pixel
//            step of the micro-kernel); lanes = Cout.
//   dx:      parallel over input rows (n, ih); the input columns are split by
//            residue q = iw mod stride, so within one residue every column
//            sees the same taps (r, s) (those with (ih + pad - r) and
//            (q + pad - s) divisible by the stride) at consecutive output
//            columns; lanes = Cin. A tap-less column gets 0.
//   dw, db:  parallel over blocks of 4 output channels; each dw/db element is
//            one f32 sum over (n, oh, ow) in increasing order.
// Every output element is one f32 sum in an order fixed by the shape, so the
// results are bit-identical for any thread count. With relu, dy is masked in
// place first (exact in T).
//
// Input (forward) and gradient (dx) rows are cached across consecutive rows
// (slot row mod k), so each is widened once, not k times.
//
// The avx512 and avx2 CPU kernels (engine/cpu_kernels.hpp) run the same loops
// around FMA micro-kernels (kernels/conv_cpu_simd.hpp): tap_row with wider
// tiles for the forward and dx (the real pixels of a row, in near-equal
// tiles; lanes padded to their channel block; f32 rows without padding
// written in place), and for dw/db the chunked partials of
// kernels/conv_dw_partials.hpp (conv rows cut into chunks that depend on the
// shape only, each a register-blocked dw_rows pass, summed in chunk order):
// also bit-identical for any thread count, not bit-identical to the twin.
// They run the convs at about 90% of the measured FMA peak
// (bench/results/speaker-cpu-2026-12-06.md).
#include "kernels/conv2d.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <vector>

#include "engine/cpu_kernels.hpp"
#include "engine/error.hpp"
#include "engine/parallel.hpp"
#include "engine/vec8.hpp"
#include "kernels/conv_algo_lab.hpp"
#include "kernels/conv_cpu_simd.hpp"
#include "kernels/conv_dw_partials.hpp"

namespace mf::kernels {

// ---- the CUDA variant selector (kernels/conv2d.hpp) ----------------------------

namespace {
Conv2dAlgo conv2d_algo_from_env() {
  const char* e = std::getenv("MELFORGE_CONV2D_ALGO");
  if (!e || !*e) return Conv2dAlgo::automatic;
  const std::string_view v(e);
  if (v == "auto" || v == "0") return Conv2dAlgo::automatic;
  if (v == "direct" || v == "1") return Conv2dAlgo::direct;
  if (v == "mma" || v == "2") return Conv2dAlgo::mma;
  MF_THROW("MELFORGE_CONV2D_ALGO='{}': expected auto, direct or mma", v);
}
std::atomic<int>& conv2d_algo_slot() {
  static std::atomic<int> a{int(conv2d_algo_from_env())};
  return a;
}
}  // namespace

void set_conv2d_algo(Conv2dAlgo algo) { conv2d_algo_slot().store(int(algo)); }
Conv2dAlgo conv2d_algo() { return Conv2dAlgo(conv2d_algo_slot().load()); }
const char* conv2d_algo_name(Conv2dAlgo algo) {
  switch (algo) {
    case Conv2dAlgo::automatic: return "auto";
    case Conv2dAlgo::direct: return "direct";
    case Conv2dAlgo::mma: return "mma";
  }
  return "?";
}

// ---- the CPU twin ----------------------------------------------------------------

namespace {

constexpr int kPB = 4;  // pixels per micro-tile
constexpr int kCB = 8;  // lanes (output channels of the product) per micro-tile
constexpr int kDwBlock = 4;  // output channels per dw task

inline std::int64_t round_up(std::int64_t v, std::int64_t m) { return (v + m - 1) / m * m; }

// v8f, load8/store8 and the AVX2 clones (same bits in every clone): engine/vec8.hpp.
static_assert(kCB == 8);

// out[p*lanesp + l] = init[l] + sum_t sum_c in[t][p*pstep + c] * wm[t][c*lanesp + l]
// for p < npix_p (a multiple of kPB) and l < lanesp (a multiple of kCB);
// init null means 0. Per output the sum runs over t, then c, in order.
MF_SIMD_CLONES void tap_row(int ntaps, const float* const* in, const float* const* wm, int c_n,
                              std::int64_t pstep, int lanesp, const float* init, int npix_p, float* out) {
  for (int p0 = 0; p0 < npix_p; p0 += kPB) {
    for (int lb = 0; lb < lanesp; lb += kCB) {
      v8f acc[kPB];
      const v8f start = init ? load8(init + lb) : v8f{};
      for (int p = 0; p < kPB; ++p) acc[p] = start;
      for (int t = 0; t < ntaps; ++t) {
        const float* ip = in[t] + std::int64_t(p0) * pstep;
        const float* wp = wm[t] + lb;
        for (int c = 0; c < c_n; ++c) {
          const v8f wv = load8(wp + std::int64_t(c) * lanesp);
          for (int p = 0; p < kPB; ++p) acc[p] += ip[p * pstep + c] * wv;
        }
      }
      for (int p = 0; p < kPB; ++p) store8(out + std::int64_t(p0 + p) * lanesp + lb, acc[p]);
    }
  }
}

// dst_j[c] += g[j] * x[c] for the NB channels j of a dw block (NB independent
// accumulation rows sharing each x load).
template <int NB>
MF_SIMD_CLONES void axpy_block(int c_n, const float* __restrict__ x, const float* g, float* const* dst) {
  float* __restrict__ d[NB];
  for (int j = 0; j < NB; ++j) d[j] = dst[j];
  for (int c = 0; c < c_n; ++c) {
    const float xv = x[c];
    for (int j = 0; j < NB; ++j) d[j][c] += g[j] * xv;
  }
}

// Fills dst (width_p pixels of c floats) with image row ih of src ([H][W][c]
// of T), shifted so dst pixel j holds column j - shift; zeros outside.
template <class T>
void load_row(const T* src, int h, int w, int c, int ih, int shift, int width_p, float* dst) {
  std::fill(dst, dst + std::int64_t(width_p) * c, 0.f);
  if (ih < 0 || ih >= h) return;
  const T* row = src + std::int64_t(ih) * w * c;
  for (int j = std::max(0, shift); j < width_p; ++j) {
    const int iw = j - shift;
    if (iw >= w) break;
    const T* px = row + std::int64_t(iw) * c;
    float* o = dst + std::int64_t(j) * c;
    for (int ci = 0; ci < c; ++ci) o[ci] = to_f32(px[ci]);
  }
}

// out[((r*k + s)*a_n + a)*bp + b] = w[co][r][s][ci] with (a, b) = (ci, co)
// when by_cout (forward: lanes are Cout), else (co, ci) (dx: lanes are Cin);
// bp is the lane count rounded up to lane_block, lanes b >= the real count are 0.
template <class T>
std::vector<float> arrange_weights(const Conv2dDims& d, const T* w, bool by_cout, int lane_block) {
  const int k = d.k, a_n = by_cout ? d.cin : d.cout;
  const std::int64_t bp = round_up(by_cout ? d.cout : d.cin, lane_block);
  std::vector<float> out(std::size_t(k * k * a_n * bp), 0.f);
  for (int co = 0; co < d.cout; ++co)
    for (int rs = 0; rs < k * k; ++rs)
      for (int ci = 0; ci < d.cin; ++ci) {
        const int a = by_cout ? ci : co, b = by_cout ? co : ci;
        out[std::size_t((std::int64_t(rs) * a_n + a) * bp + b)] =
            to_f32(w[(std::int64_t(co) * k * k + rs) * d.cin + ci]);
      }
  return out;
}

// The micro-kernels one CPU variant runs (engine/cpu_kernels.hpp) and the
// paddings they need.
struct CpuPath {
  int pixel_block;  // row buffers are padded to a multiple of this many pixels
  int lane_block;   // tap_row's lane counts (Cout forward, Cin for dx) to a multiple of this
  TapRowFn tap;
  DwRowsFn dw;       // null: the twin's dw (backward_dw)
  bool any_pixels;   // tap computes just the real pixels of a row (else the padded count)
  int tap_pixels(int real) const { return any_pixels ? real : int(round_up(real, pixel_block)); }
};

CpuPath cpu_path() {
  switch (active_cpu_kernels()) {
    case CpuKernels::avx512:
      return {avx512::kPixelBlock, avx512::kChannelBlock, avx512::tap_row, avx512::dw_rows, true};
    case CpuKernels::avx2: return {avx2::kPixelBlock, avx2::kChannelBlock, avx2::tap_row, avx2::dw_rows, true};
    default: return {kPB, kCB, tap_row, nullptr, false};
  }
}

template <class T>
void forward(const Conv2dDims& d, const CpuPath& path, const T* x, const T* w, const T* b, T* y) {
  const int k = d.k, pad = d.pad(), st = d.stride, oh_n = d.oh(), ow_n = d.ow();
  const int coutp = int(round_up(d.cout, path.lane_block));
  const int owp = int(round_up(ow_n, path.pixel_block));
  const int in_w = (owp - 1) * st + k;  // buffer pixel j holds column j - pad
  const std::vector<float> wt = arrange_weights(d, w, true, path.lane_block);
  std::vector<float> bias(std::size_t(coutp), 0.f);
  if (b)
    for (int co = 0; co < d.cout; ++co) bias[std::size_t(co)] = to_f32(b[co]);

  // f32 output rows with no channel padding are computed in place (the FMA
  // kernels write just the real pixels), others through a row buffer.
  const bool in_place = std::is_same_v<T, float> && path.any_pixels && coutp == d.cout;
  parallel_for(d.n * oh_n, [&](std::int64_t begin, std::int64_t end) {
    // Input rows cached by row: slot ih mod k holds row key[slot] (image and
    // row), so consecutive output rows load only the rows they do not share.
    std::vector<float> in(std::size_t(k) * in_w * d.cin), out(in_place ? 0 : std::size_t(owp) * coutp);
    std::vector<std::int64_t> key(std::size_t(k), -1);
    std::vector<const float*> tin(std::size_t(k * k)), twm(std::size_t(k * k));
    for (int rs = 0; rs < k * k; ++rs) twm[std::size_t(rs)] = wt.data() + std::int64_t(rs) * d.cin * coutp;
    for (std::int64_t u = begin; u < end; ++u) {
      const std::int64_t n = u / oh_n;
      const int oh = int(u % oh_n);
      const T* xn = x + n * d.h * d.w * d.cin;
      for (int r = 0; r < k; ++r) {
        const int ih = oh * st - pad + r, slot = ((ih % k) + k) % k;
        float* row = in.data() + std::size_t(slot) * in_w * d.cin;
        const std::int64_t row_key = n * (d.h + 2 * k) + ih + k;
        if (key[std::size_t(slot)] != row_key) {
          load_row(xn, d.h, d.w, d.cin, ih, pad, in_w, row);
          key[std::size_t(slot)] = row_key;
        }
        for (int s2 = 0; s2 < k; ++s2) tin[std::size_t(r * k + s2)] = row + std::int64_t(s2) * d.cin;
      }
      T* yr = y + u * ow_n * d.cout;
      float* o = in_place ? reinterpret_cast<float*>(yr) : out.data();
      path.tap(k * k, tin.data(), twm.data(), d.cin, std::int64_t(st) * d.cin, coutp, bias.data(),
               path.tap_pixels(ow_n), o);
      if (in_place) {
        if (d.relu)
          for (std::int64_t i = 0; i < std::int64_t(ow_n) * d.cout; ++i) o[i] = o[i] <= 0.f ? 0.f : o[i];
        continue;
      }
      for (int ow = 0; ow < ow_n; ++ow)
        for (int co = 0; co < d.cout; ++co) {
          const float v = out[std::size_t(ow) * coutp + co];
          yr[std::int64_t(ow) * d.cout + co] = from_f32<T>(d.relu && v <= 0.f ? 0.f : v);
        }
    }
  });
}

template <class T>
void backward_dx(const Conv2dDims& d, const CpuPath& path, const T* w, const T* g, T* dx) {
  const int k = d.k, pad = d.pad(), st = d.stride, oh_n = d.oh(), ow_n = d.ow();
  const int cinp = int(round_up(d.cin, path.lane_block));
  const int cols_p = int(round_up((d.w + st - 1) / st, path.pixel_block));  // columns of one residue, padded
  const int gpad = pad;                                         // g buffer pixel j holds ow = j - gpad
  const int gw = gpad + (st - 1 + pad) / st + cols_p + 1;
  const std::vector<float> wf = arrange_weights(d, w, false, path.lane_block);

  // Stride 1, f32, no channel padding: dx rows computed in place (the FMA
  // kernels write just the real pixels), others through a row buffer.
  const bool in_place = std::is_same_v<T, float> && st == 1 && path.any_pixels && cinp == d.cin;
  parallel_for(d.n * d.h, [&](std::int64_t begin, std::int64_t end) {
    // g rows cached by output row: slot oh mod k holds row key[slot] (image
    // and row), so consecutive input rows load only the rows they do not share.
    std::vector<float> grows(std::size_t(k) * gw * d.cout), out(in_place ? 0 : std::size_t(cols_p) * cinp);
    std::vector<std::int64_t> key(std::size_t(k), -1);
    std::vector<const float*> tin(std::size_t(k * k)), twm(std::size_t(k * k));
    std::vector<int> rows;                 // the taps' r for this input row
    std::vector<const float*> row_of(static_cast<std::size_t>(k));  // and the cached g row of each
    for (std::int64_t u = begin; u < end; ++u) {
      const std::int64_t n = u / d.h;
      const int ih = int(u % d.h);
      rows.clear();
      for (int r = 0; r < k; ++r) {
        const int t = ih + pad - r;
        if (t < 0 || t % st != 0 || t / st >= oh_n) continue;
        const int oh = t / st, slot = oh % k;
        float* gr = grows.data() + std::size_t(slot) * gw * d.cout;
        if (key[std::size_t(slot)] != n * oh_n + oh) {
          load_row(g + n * oh_n * ow_n * d.cout, oh_n, ow_n, d.cout, oh, gpad, gw, gr);
          key[std::size_t(slot)] = n * oh_n + oh;
        }
        row_of[std::size_t(r)] = gr;
        rows.push_back(r);
      }
      T* dxr = dx + u * d.w * d.cin;
      for (int q = 0; q < st && q < d.w; ++q) {
        int ntaps = 0;
        for (int r : rows)
          for (int s = 0; s < k; ++s) {
            const int v = q + pad - s;  // = ow * st - j * st for column q + j * st
            if (v % st != 0) continue;
            tin[std::size_t(ntaps)] = row_of[std::size_t(r)] + std::int64_t(v / st + gpad) * d.cout;
            twm[std::size_t(ntaps)] = wf.data() + std::int64_t(r * k + s) * d.cout * cinp;
            ++ntaps;
          }
        float* o = in_place ? reinterpret_cast<float*>(dxr) : out.data();
        path.tap(ntaps, tin.data(), twm.data(), d.cout, d.cout, cinp, nullptr, path.tap_pixels((d.w - q + st - 1) / st),
                 o);
        if (in_place) continue;
        for (int iw = q, j = 0; iw < d.w; iw += st, ++j)
          for (int ci = 0; ci < d.cin; ++ci)
            dxr[std::int64_t(iw) * d.cin + ci] = from_f32<T>(out[std::size_t(j) * cinp + ci]);
      }
    }
  });
}

template <class T>
void backward_dw(const Conv2dDims& d, const T* x, const T* g, float* dw, float* db) {
  const int k = d.k, pad = d.pad(), st = d.stride, oh_n = d.oh(), ow_n = d.ow();
  const int in_w = (ow_n - 1) * st + k;
  const std::int64_t kkc = std::int64_t(k) * k * d.cin;
  const int blocks = (d.cout + kDwBlock - 1) / kDwBlock;
  parallel_for(blocks, [&](std::int64_t b0, std::int64_t b1) {
    std::vector<float> in(std::size_t(k) * in_w * d.cin), acc(std::size_t(kDwBlock * kkc));
    for (std::int64_t blk = b0; blk < b1; ++blk) {
      const int c0 = int(blk) * kDwBlock, nb = std::min(kDwBlock, d.cout - c0);
      std::fill(acc.begin(), acc.end(), 0.f);
      float bsum[kDwBlock] = {};
      for (std::int64_t n = 0; n < d.n; ++n)
        for (int oh = 0; oh < oh_n; ++oh) {
          const T* xn = x + n * d.h * d.w * d.cin;
          for (int r = 0; r < k; ++r)
            load_row(xn, d.h, d.w, d.cin, oh * st - pad + r, pad, in_w, in.data() + std::size_t(r) * in_w * d.cin);
          const T* gr = g + ((n * oh_n + oh) * ow_n) * d.cout + c0;
          for (int ow = 0; ow < ow_n; ++ow) {
            float gv[kDwBlock] = {};
            for (int j = 0; j < nb; ++j) {
              gv[j] = to_f32(gr[std::int64_t(ow) * d.cout + j]);
              bsum[j] += gv[j];
            }
            for (int r = 0; r < k; ++r)
              for (int s = 0; s < k; ++s) {
                const float* xp = in.data() + (std::int64_t(r) * in_w + std::int64_t(ow) * st + s) * d.cin;
                float* dst[kDwBlock];
                for (int j = 0; j < kDwBlock; ++j) dst[j] = acc.data() + j * kkc + std::int64_t(r * k + s) * d.cin;
                if (nb == kDwBlock) axpy_block<kDwBlock>(d.cin, xp, gv, dst);
                else
                  for (int j = 0; j < nb; ++j) axpy_block<1>(d.cin, xp, gv + j, dst + j);
              }
          }
        }
      for (int j = 0; j < nb; ++j) {
        std::copy(acc.begin() + j * kkc, acc.begin() + (j + 1) * kkc, dw + (c0 + j) * kkc);
        if (db) db[c0 + j] = bsum[j];
      }
    }
  });
}

// Output-gradient row oh of image g ([OH][OW][Cout] of T) as ow_n pixels of
// coutp f32 lanes (lanes past Cout are 0).
template <class T>
void load_grad_row(const T* g, const Conv2dDims& d, int oh, int coutp, float* dst) {
  const int ow_n = d.ow();
  const T* row = g + std::int64_t(oh) * ow_n * d.cout;
  for (int ow = 0; ow < ow_n; ++ow) {
    float* o = dst + std::int64_t(ow) * coutp;
    for (int co = 0; co < d.cout; ++co) o[co] = to_f32(row[std::int64_t(ow) * d.cout + co]);
    std::fill(o + d.cout, o + coutp, 0.f);
  }
}

// dw, db with the FMA kernels: chunked partials (kernels/conv_dw_partials.hpp),
// each chunk's conv rows in groups of up to kDwGroup rows of one image.
template <class T>
void backward_dw_simd(const Conv2dDims& d, const CpuPath& path, const T* x, const T* g, float* dw, float* db) {
  const int k = d.k, pad = d.pad(), st = d.stride, oh_n = d.oh(), ow_n = d.ow();
  const int coutp = int(round_up(d.cout, path.lane_block));
  const int in_w = (ow_n - 1) * st + k;  // buffer pixel j holds column j - pad
  const std::int64_t units = d.n * oh_n;
  const std::int64_t chunks = dw_partial_chunks(units);
  const std::int64_t part = std::int64_t(k) * k * d.cin * coutp + coutp;  // dwt then db
  float* partials = dw_partials_scratch(chunks * part);
  const int max_in_rows = (kDwGroup - 1) * st + k;
  parallel_for(chunks, [&](std::int64_t cbeg, std::int64_t cend) {
    std::vector<float> in(std::size_t(max_in_rows) * in_w * d.cin), gbuf(std::size_t(kDwGroup) * ow_n * coutp);
    std::vector<const float*> xrows(static_cast<std::size_t>(max_in_rows)), grows(kDwGroup);
    for (std::int64_t c = cbeg; c < cend; ++c) {
      float* dwt = partials + c * part;
      std::fill(dwt, dwt + part, 0.f);
      const std::int64_t uend = units * (c + 1) / chunks;
      for (std::int64_t u = units * c / chunks; u < uend;) {  // groups of conv rows of one image
        const std::int64_t n = u / oh_n;
        const int oh0 = int(u % oh_n);
        const int nconv = int(std::min<std::int64_t>({kDwGroup, uend - u, oh_n - oh0}));
        for (int j = 0; j < nconv; ++j) {
          const T* gsrc = g + (n * oh_n + oh0 + j) * ow_n * d.cout;
          if constexpr (std::is_same_v<T, float>) {
            if (coutp == d.cout) {  // already f32 pixels of coutp lanes
              grows[std::size_t(j)] = gsrc;
              continue;
            }
          }
          float* gr = gbuf.data() + std::size_t(j) * ow_n * coutp;
          load_grad_row(g + n * oh_n * ow_n * d.cout, d, oh0 + j, coutp, gr);
          grows[std::size_t(j)] = gr;
        }
        const T* xn = x + n * d.h * d.w * d.cin;
        for (int i = 0; i < (nconv - 1) * st + k; ++i) {
          float* ir = in.data() + std::size_t(i) * in_w * d.cin;
          load_row(xn, d.h, d.w, d.cin, oh0 * st - pad + i, pad, in_w, ir);
          xrows[std::size_t(i)] = ir;
        }
        // ow_n real pixels (no padded ones: dw_rows has no pixel block).
        path.dw(xrows.data(), nconv, st, d.cin, k, grows.data(), coutp, ow_n, dwt, dwt + part - coutp);
        u += nconv;
      }
    }
  });
  reduce_dw_partials(partials, chunks, part, k * k * d.cin, d.cout, coutp, dw, db);
}

template <class T>
void backward(const Conv2dDims& d, const T* x, const T* w, const T* y, T* dy, T* dx, float* dw, float* db) {
  const std::int64_t ny = d.n * d.oh() * d.ow() * d.cout;
  if (d.relu) {
    parallel_for(ny, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i)
        if (!(to_f32(y[i]) > 0.f)) dy[i] = from_f32<T>(0.f);
    }, 4096);
  }
  const CpuPath path = cpu_path();
  if (dx) backward_dx(d, path, w, static_cast<const T*>(dy), dx);
  if (path.dw)
    backward_dw_simd(d, path, x, static_cast<const T*>(dy), dw, db);
  else
    backward_dw(d, x, static_cast<const T*>(dy), dw, db);
}

}  // namespace

void conv2d_forward_cpu(const Conv2dDims& d, DType dtype, const void* x, const void* w, const void* b, void* y,
                        cudaStream_t) {
  if (d.n == 0) return;
  const CpuPath path = cpu_path();
  switch (dtype) {
    case DType::f32:
      return forward(d, path, static_cast<const float*>(x), static_cast<const float*>(w), static_cast<const float*>(b),
                     static_cast<float*>(y));
    case DType::f16:
      return forward(d, path, static_cast<const f16*>(x), static_cast<const f16*>(w), static_cast<const f16*>(b),
                     static_cast<f16*>(y));
    case DType::bf16:
      return forward(d, path, static_cast<const bf16*>(x), static_cast<const bf16*>(w), static_cast<const bf16*>(b),
                     static_cast<bf16*>(y));
    default: MF_THROW("conv2d_forward_cpu: dtype {} is not f32, f16 or bf16", dtype_name(dtype));
  }
}

void conv2d_backward_cpu(const Conv2dDims& d, DType dtype, const void* x, const void* w, const void* y, void* dy,
                         void* dx, float* dw, float* db, float* /*scratch*/, cudaStream_t) {
  switch (dtype) {
    case DType::f32:
      return backward(d, static_cast<const float*>(x), static_cast<const float*>(w), static_cast<const float*>(y),
                      static_cast<float*>(dy), static_cast<float*>(dx), dw, db);
    case DType::f16:
      return backward(d, static_cast<const f16*>(x), static_cast<const f16*>(w), static_cast<const f16*>(y),
                      static_cast<f16*>(dy), static_cast<f16*>(dx), dw, db);
    case DType::bf16:
      return backward(d, static_cast<const bf16*>(x), static_cast<const bf16*>(w), static_cast<const bf16*>(y),
                      static_cast<bf16*>(dy), static_cast<bf16*>(dx), dw, db);
    default: MF_THROW("conv2d_backward_cpu: dtype {} is not f32, f16 or bf16", dtype_name(dtype));
  }
}

}  // namespace mf::kernels
