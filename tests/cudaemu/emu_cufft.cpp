// melforge's CUDA emulator (tests only): the cuFFT C API subset melforge uses,
// computed on the CPU. In the emulated build "device" pointers are host
// pointers; cufftExecR2C's transform is stream work (tests/cudaemu/emu_launch.hpp):
// run at the call on the plan's stream, or recorded into a stream capture and
// run by the graph.
//
// Semantics follow NVIDIA's cuFFT documentation (CUDA 13.0, cuFFT 12.0):
//   https://docs.nvidia.com/cuda/cufft/ , sections "Fourier Transform Types",
//   "Data Layout", "Advanced Data Layout", "Streamed cuFFT Transforms",
//   "cuFFT API Reference" (cufftCreate, cufftMakePlanMany, cufftPlanMany,
//   cufftPlan1d, cufftGetSize, cufftSetAutoAllocation, cufftSetWorkArea,
//   cufftSetStream, cufftExecR2C, cufftDestroy), and cufft.h.
//
//   R2C (implicitly forward, unnormalized): for a real sequence x of length n,
//     X[k] = sum_{j<n} x[j] * exp(-2 pi i j k / n),  k = 0 .. n/2 (n/2+1 values:
//     the non-redundant half of the Hermitian spectrum).
//   Rank 1 with the advanced layout (inembed and onembed both non-NULL):
//     input element j of batch b  at idata[b * idist + j * istride]
//     output element k of batch b at odata[b * odist + k * ostride]
//   (for rank 1 inembed[0] / onembed[0] do not enter the addressing). Both
//   NULL: the basic layout, the other advanced parameters ignored: istride =
//   ostride = 1, idist = n, odist = n/2 + 1 (out of place).
//   A plan made with auto-allocation (the default) owns a work area allocated
//   at plan time (cudaMalloc: so, as with the library, making a plan during a
//   stream capture fails); after cufftSetAutoAllocation(plan, 0) before the
//   make, the caller passes one of at least cufftGetSize's bytes with
//   cufftSetWorkArea before executing. cufftSetWorkArea frees an auto-allocated
//   area. cufftExec* runs on the stream of the last cufftSetStream (default:
//   the legacy stream), with the plan's parameters as they are at the call.
//
// Supported (anything else is refused with a status, so a new use shows up as
// an error rather than as silently wrong numbers):
//   rank 1 (2 and 3: CUFFT_NOT_SUPPORTED), type CUFFT_R2C (the other types:
//   CUFFT_NOT_SUPPORTED), n in 1 .. 2^22, any batch >= 1, positive strides and
//   distances whose addresses do not collide between batches (else
//   CUFFT_NOT_SUPPORTED), out of place only (overlapping input and output:
//   CUFFT_NOT_SUPPORTED).
// Numerics: a mixed-radix decimation-in-time complex FFT in double (radix 2
// butterflies; any other prime factor p by a direct length-p DFT), the
// twiddles exp(-2 pi i j / n) computed once per plan in double; the real input
// is read as float, each output value rounded once to float. So the emulator
// is more accurate than the library (whose float kernels round at every
// stage): tests must allow for the library's float rounding, not the emulator's.
//
// Strictness beyond "compute the right numbers" (documented emulator choices):
//   * cufftGetSize / make report a work area of batch * (n/2+1) * 8 bytes (the
//     library's size depends on n and on its algorithm; often 0 for powers of
//     two): so a caller's work-area plumbing is exercised. Every execution
//     first overwrites the whole work area with 0xFF bytes (NaN floats), as the
//     library scribbles on it: input living in the work area reads NaNs.
//   * idata, odata and the work area must lie inside live device allocations
//     (cudaMalloc / cudaMallocAsync) with room for every element the layout
//     addresses, input aligned to 4 bytes, output to 8 (cufftComplex);
//     otherwise CUFFT_INVALID_VALUE (the library would read or write out of
//     bounds, or fault). A work area overlapping the input or the output:
//     CUFFT_INVALID_VALUE ("cufftExecute*() calls assume that the work area
//     pointer is valid and that it is not being used by any other device
//     operation"). Executing with auto-allocation off and no work area set:
//     CUFFT_INVALID_VALUE.
//   * Making a plan twice (a second cufftMakePlan* on the same handle),
//     cufftSetAutoAllocation after the make, cufftSetWorkArea / cufftGetSize
//     before it: not emulated (CUFFT_INVALID_PLAN / CUFFT_NOT_SUPPORTED).
//   * Handles are tracked: an unknown or destroyed handle is CUFFT_INVALID_PLAN;
//     cufftDestroy(CUFFT_PLAN_NULL) is a no-op returning CUFFT_SUCCESS (cufft.h:
//     "an uninitialized cufftHandle that is safe to call cufftDestroy on").
// Diagnostics for every error go to stderr with the prefix "[emu cuFFT]".
#include <cufft.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <numbers>
#include <vector>

#include "tests/cudaemu/emu_exec.hpp"
#include "tests/cudaemu/emu_launch.hpp"

namespace {

using cd = std::complex<double>;

// Forward complex DFT of length n in double: y[k] = sum_j x[j*xs] w^(jk),
// w = exp(-2 pi i / n). Recursive decimation in time over n's prime factors
// (smallest first); each level splits its length m*p into p sub-transforms of
// length m over the decimated inputs, then combines them in place.
class Dft {
 public:
  explicit Dft(std::size_t n) : n_(n), w_(n) {
    for (std::size_t j = 0; j < n; ++j) {
      const double a = 2.0 * std::numbers::pi * double(j) / double(n);
      w_[j] = cd(std::cos(a), -std::sin(a));
    }
    std::size_t r = n;
    for (std::size_t p = 2; p * p <= r; ++p)
      while (r % p == 0) {
        factors_.push_back(p);
        r /= p;
      }
    if (r > 1) factors_.push_back(r);
  }
  std::size_t size() const { return n_; }
  void forward(const cd* x, cd* y) const { rec(x, 1, y, n_, 0, 1); }

 private:
  // y[0..n) = DFT_n of x[0], x[xs], ...; `tw` = n_ / n scales twiddle indices.
  void rec(const cd* x, std::size_t xs, cd* y, std::size_t n, std::size_t level, std::size_t tw) const {
    if (n == 1) {
      y[0] = x[0];
      return;
    }
    const std::size_t p = factors_[level], m = n / p;
    for (std::size_t r = 0; r < p; ++r) rec(x + r * xs, xs * p, y + r * m, m, level + 1, tw * p);
    if (p == 2) {
      for (std::size_t k = 0; k < m; ++k) {
        const cd a = y[k], b = y[m + k] * w_[k * tw];
        y[k] = a + b;
        y[m + k] = a - b;
      }
      return;
    }
    // Y[k + q m] = sum_r w_n^(r (k + q m)) Z_r[k], Z_r[k] = y[r m + k]: reads
    // and writes the same p positions for each k, so a p-long buffer suffices.
    std::vector<cd> z(p);
    for (std::size_t k = 0; k < m; ++k) {
      for (std::size_t r = 0; r < p; ++r) z[r] = y[r * m + k];
      for (std::size_t q = 0; q < p; ++q) {
        cd s = 0;
        for (std::size_t r = 0; r < p; ++r) s += z[r] * w_[(r * (k + q * m)) % n * tw];
        y[q * m + k] = s;
      }
    }
  }

  std::size_t n_;
  std::vector<cd> w_;
  std::vector<std::size_t> factors_;
};

struct Plan {
  bool made = false;
  bool auto_alloc = true;
  std::int64_t n = 0, batch = 0;
  std::int64_t istride = 1, idist = 0, ostride = 1, odist = 0;
  std::size_t work_size = 0;
  void* work_area = nullptr;
  bool work_owned = false;  // auto-allocated at the make; freed by SetWorkArea / Destroy
  cudaStream_t stream = nullptr;
  std::shared_ptr<const Dft> dft;  // shared with recorded executions
};

std::mutex g_mutex;
std::map<cufftHandle, Plan>& plans() {
  static std::map<cufftHandle, Plan> m;
  return m;
}
cufftHandle g_next_handle = 1;

cufftResult fail(cufftResult st, const char* fn, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
cufftResult fail(cufftResult st, const char* fn, const char* fmt, ...) {
  std::fprintf(stderr, "[emu cuFFT] %s: ", fn);
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "\n");
  return st;
}

Plan* find_plan(cufftHandle h) {
  auto it = plans().find(h);
  return it == plans().end() ? nullptr : &it->second;
}

// Whether [p, p + bytes) lies inside one live device allocation.
bool in_device_allocation(const void* p, std::size_t bytes) {
  const mf_emu::Located l = mf_emu::locate(p);
  return l.space == mf_emu::Space::allocation && l.device &&
         reinterpret_cast<std::uintptr_t>(p) + bytes <= l.base + l.size;
}

bool overlap(const void* a, std::size_t an, const void* b, std::size_t bn) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + bn && y < x + an;
}

// Elements one side of the layout addresses: 1 + the largest offset.
std::int64_t extent(std::int64_t count, std::int64_t stride, std::int64_t batch, std::int64_t dist) {
  return (batch - 1) * dist + (count - 1) * stride + 1;
}

// Distinct addresses for every (batch, element): batches one after another,
// or elements interleaved with the batches inside.
bool injective(std::int64_t count, std::int64_t stride, std::int64_t batch, std::int64_t dist) {
  return batch == 1 || (count - 1) * stride < dist || (batch - 1) * dist < stride;
}

cufftResult make_plan(const char* fn, Plan& pl, int rank, const int* n, const int* inembed, int istride, int idist,
                      const int* onembed, int ostride, int odist, cufftType type, int batch) {
  if (pl.made) return fail(CUFFT_INVALID_PLAN, fn, "the plan was already made (re-making a plan is not emulated)");
  if (rank < 1 || rank > 3) return fail(CUFFT_INVALID_SIZE, fn, "rank %d: expected 1, 2 or 3", rank);
  if (rank != 1) return fail(CUFFT_NOT_SUPPORTED, fn, "rank %d transforms are not emulated (rank 1 only)", rank);
  if (!n) return fail(CUFFT_INVALID_VALUE, fn, "n is NULL");
  if (type != CUFFT_R2C && type != CUFFT_C2R && type != CUFFT_C2C && type != CUFFT_D2Z && type != CUFFT_Z2D &&
      type != CUFFT_Z2Z)
    return fail(CUFFT_INVALID_TYPE, fn, "type 0x%x is not a cufftType", unsigned(type));
  if (type != CUFFT_R2C) return fail(CUFFT_NOT_SUPPORTED, fn, "type 0x%x is not emulated (CUFFT_R2C only)", unsigned(type));
  if (n[0] < 1 || batch < 1) return fail(CUFFT_INVALID_SIZE, fn, "n %d, batch %d: expected both >= 1", n[0], batch);
  if (n[0] > (1 << 22)) return fail(CUFFT_NOT_SUPPORTED, fn, "n %d above the emulator's 2^22", n[0]);
  const std::int64_t len = n[0], nout = len / 2 + 1;
  if ((inembed == nullptr) != (onembed == nullptr))
    return fail(CUFFT_NOT_SUPPORTED, fn, "one of inembed/onembed is NULL and the other is not (not emulated)");
  if (inembed) {
    if (istride < 1 || idist < 1 || ostride < 1 || odist < 1)
      return fail(CUFFT_INVALID_VALUE, fn, "istride %d, idist %d, ostride %d, odist %d: expected all >= 1", istride,
                  idist, ostride, odist);
    if (!injective(len, istride, batch, idist) || !injective(nout, ostride, batch, odist))
      return fail(CUFFT_NOT_SUPPORTED, fn,
                  "a layout whose batches share addresses (n %d istride %d idist %d, %lld outputs ostride %d odist %d)",
                  n[0], istride, idist, (long long)nout, ostride, odist);
    pl.istride = istride, pl.idist = idist, pl.ostride = ostride, pl.odist = odist;
  } else {
    pl.istride = 1, pl.idist = len, pl.ostride = 1, pl.odist = nout;
  }
  pl.n = len;
  pl.batch = batch;
  pl.work_size = std::size_t(batch) * std::size_t(nout) * sizeof(cufftComplex);
  pl.dft = std::make_shared<const Dft>(std::size_t(len));
  if (pl.auto_alloc) {
    if (cudaMalloc(&pl.work_area, pl.work_size) != cudaSuccess) {
      pl.work_area = nullptr;
      return fail(CUFFT_ALLOC_FAILED, fn, "cudaMalloc of the %zu-byte work area failed", pl.work_size);
    }
    pl.work_owned = true;
  }
  pl.made = true;
  return CUFFT_SUCCESS;
}

void free_owned_work(Plan& pl) {
  if (pl.work_owned && pl.work_area) (void)cudaFree(pl.work_area);
  pl.work_area = nullptr;
  pl.work_owned = false;
}

// The transform of one execution, with everything it reads copied at the call.
struct R2C {
  std::shared_ptr<const Dft> dft;
  std::int64_t batch, istride, idist, ostride, odist;
  const float* in;
  cufftComplex* out;
  void* work;
  std::size_t work_size;

  void operator()() const {
    if (work_size) std::memset(work, 0xFF, work_size);
    const std::size_t n = dft->size(), nout = n / 2 + 1;
    std::vector<cd> x(n), y(n);
    for (std::int64_t b = 0; b < batch; ++b) {
      const float* src = in + b * idist;
      for (std::size_t j = 0; j < n; ++j) x[j] = cd(double(src[std::int64_t(j) * istride]), 0.0);
      dft->forward(x.data(), y.data());
      cufftComplex* dst = out + b * odist;
      for (std::size_t k = 0; k < nout; ++k)
        dst[std::int64_t(k) * ostride] = cufftComplex{float(y[k].real()), float(y[k].imag())};
    }
  }
};

}  // namespace

extern "C" {

cufftResult CUFFTAPI cufftCreate(cufftHandle* handle) {
  if (!handle) return fail(CUFFT_INVALID_VALUE, "cufftCreate", "handle is NULL");
  std::lock_guard lk(g_mutex);
  *handle = g_next_handle++;
  plans()[*handle] = Plan{};
  return CUFFT_SUCCESS;
}

cufftResult CUFFTAPI cufftMakePlanMany(cufftHandle plan, int rank, int* n, int* inembed, int istride, int idist,
                                       int* onembed, int ostride, int odist, cufftType type, int batch,
                                       size_t* workSize) {
  static const char* fn = "cufftMakePlanMany";
  std::lock_guard lk(g_mutex);
  Plan* pl = find_plan(plan);
  if (!pl) return fail(CUFFT_INVALID_PLAN, fn, "handle %d is not a live plan", plan);
  if (!workSize) return fail(CUFFT_INVALID_VALUE, fn, "workSize is NULL");
  const cufftResult st = make_plan(fn, *pl, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch);
  if (st == CUFFT_SUCCESS) *workSize = pl->work_size;
  return st;
}

cufftResult CUFFTAPI cufftPlanMany(cufftHandle* plan, int rank, int* n, int* inembed, int istride, int idist,
                                   int* onembed, int ostride, int odist, cufftType type, int batch) {
  static const char* fn = "cufftPlanMany";
  if (!plan) return fail(CUFFT_INVALID_VALUE, fn, "plan is NULL");
  std::lock_guard lk(g_mutex);
  Plan pl;
  const cufftResult st = make_plan(fn, pl, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch);
  if (st != CUFFT_SUCCESS) return st;
  *plan = g_next_handle++;
  plans()[*plan] = std::move(pl);
  return CUFFT_SUCCESS;
}

cufftResult CUFFTAPI cufftPlan1d(cufftHandle* plan, int nx, cufftType type, int batch) {
  return cufftPlanMany(plan, 1, &nx, nullptr, 1, 0, nullptr, 1, 0, type, batch);
}

cufftResult CUFFTAPI cufftGetSize(cufftHandle handle, size_t* workSize) {
  static const char* fn = "cufftGetSize";
  std::lock_guard lk(g_mutex);
  const Plan* pl = find_plan(handle);
  if (!pl) return fail(CUFFT_INVALID_PLAN, fn, "handle %d is not a live plan", handle);
  if (!pl->made) return fail(CUFFT_INVALID_PLAN, fn, "plan %d has not been made (not emulated)", handle);
  if (!workSize) return fail(CUFFT_INVALID_VALUE, fn, "workSize is NULL");
  *workSize = pl->work_size;
  return CUFFT_SUCCESS;
}

cufftResult CUFFTAPI cufftSetAutoAllocation(cufftHandle plan, int autoAllocate) {
  static const char* fn = "cufftSetAutoAllocation";
  std::lock_guard lk(g_mutex);
  Plan* pl = find_plan(plan);
  if (!pl) return fail(CUFFT_INVALID_PLAN, fn, "handle %d is not a live plan", plan);
  if (pl->made) return fail(CUFFT_NOT_SUPPORTED, fn, "after the plan was made (not emulated: call it before the make)");
  pl->auto_alloc = autoAllocate != 0;
  return CUFFT_SUCCESS;
}

cufftResult CUFFTAPI cufftSetWorkArea(cufftHandle plan, void* workArea) {
  static const char* fn = "cufftSetWorkArea";
  std::lock_guard lk(g_mutex);
  Plan* pl = find_plan(plan);
  if (!pl) return fail(CUFFT_INVALID_PLAN, fn, "handle %d is not a live plan", plan);
  if (!pl->made) return fail(CUFFT_INVALID_PLAN, fn, "plan %d has not been made (not emulated)", plan);
  free_owned_work(*pl);
  pl->work_area = workArea;
  return CUFFT_SUCCESS;
}

cufftResult CUFFTAPI cufftSetStream(cufftHandle plan, cudaStream_t stream) {
  std::lock_guard lk(g_mutex);
  Plan* pl = find_plan(plan);
  if (!pl) return fail(CUFFT_INVALID_PLAN, "cufftSetStream", "handle %d is not a live plan", plan);
  pl->stream = stream;
  return CUFFT_SUCCESS;
}

cufftResult CUFFTAPI cufftExecR2C(cufftHandle plan, cufftReal* idata, cufftComplex* odata) {
  static const char* fn = "cufftExecR2C";
  std::unique_lock lk(g_mutex);
  const Plan* found = find_plan(plan);
  if (!found) return fail(CUFFT_INVALID_PLAN, fn, "handle %d is not a live plan", plan);
  if (!found->made) return fail(CUFFT_INVALID_PLAN, fn, "plan %d has not been made", plan);
  const Plan pl = *found;
  lk.unlock();
  if (!idata || !odata) return fail(CUFFT_INVALID_VALUE, fn, "idata %p or odata %p is NULL", (void*)idata, (void*)odata);
  const std::size_t in_bytes = std::size_t(extent(pl.n, pl.istride, pl.batch, pl.idist)) * sizeof(float);
  const std::size_t out_bytes = std::size_t(extent(pl.n / 2 + 1, pl.ostride, pl.batch, pl.odist)) * sizeof(cufftComplex);
  if (reinterpret_cast<std::uintptr_t>(idata) % alignof(float) || reinterpret_cast<std::uintptr_t>(odata) % 8)
    return fail(CUFFT_INVALID_VALUE, fn, "idata %p not 4-byte or odata %p not 8-byte aligned", (void*)idata,
                (void*)odata);
  if (!in_device_allocation(idata, in_bytes))
    return fail(CUFFT_INVALID_VALUE, fn, "the input (%zu bytes from %p) is not inside one device allocation",
                in_bytes, (void*)idata);
  if (!in_device_allocation(odata, out_bytes))
    return fail(CUFFT_INVALID_VALUE, fn, "the output (%zu bytes from %p) is not inside one device allocation",
                out_bytes, (void*)odata);
  if (overlap(idata, in_bytes, odata, out_bytes))
    return fail(CUFFT_NOT_SUPPORTED, fn, "input and output overlap (in-place transforms are not emulated)");
  if (pl.work_size) {
    if (!pl.work_area)
      return fail(CUFFT_INVALID_VALUE, fn, "auto-allocation is off and no work area was set (cufftSetWorkArea)");
    if (!in_device_allocation(pl.work_area, pl.work_size))
      return fail(CUFFT_INVALID_VALUE, fn, "the work area (%zu bytes from %p) is not inside one device allocation",
                  pl.work_size, pl.work_area);
    if (overlap(pl.work_area, pl.work_size, idata, in_bytes) || overlap(pl.work_area, pl.work_size, odata, out_bytes))
      return fail(CUFFT_INVALID_VALUE, fn, "the work area overlaps the input or the output");
  }
  const R2C work{pl.dft, pl.batch, pl.istride, pl.idist, pl.ostride, pl.odist, idata, odata, pl.work_area, pl.work_size};
  if (mf_emu::enqueue_host_work(pl.stream, work, fn) != cudaSuccess)
    return fail(CUFFT_EXEC_FAILED, fn, "the stream refused the work (destroyed, or an illegal capture)");
  return CUFFT_SUCCESS;
}

cufftResult CUFFTAPI cufftDestroy(cufftHandle plan) {
  if (plan == CUFFT_PLAN_NULL) return CUFFT_SUCCESS;
  std::lock_guard lk(g_mutex);
  Plan* pl = find_plan(plan);
  if (!pl) return fail(CUFFT_INVALID_PLAN, "cufftDestroy", "handle %d is not a live plan", plan);
  free_owned_work(*pl);
  plans().erase(plan);
  return CUFFT_SUCCESS;
}

cufftResult CUFFTAPI cufftGetVersion(int* version) {
  if (!version) return fail(CUFFT_INVALID_VALUE, "cufftGetVersion", "version is NULL");
  *version = CUFFT_VERSION;
  return CUFFT_SUCCESS;
}

}  // extern "C"
