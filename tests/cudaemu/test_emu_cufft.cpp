// Tests of the emulated cuFFT (tests/cudaemu/emu_cufft.cpp) against a direct
// O(n^2) DFT in long double, on the documented semantics
// (https://docs.nvidia.com/cuda/cufft/, "Fourier Transform Types", "Advanced
// Data Layout"): R2C is the unnormalized forward transform
// X[k] = sum_j x[j] exp(-2 pi i j k / n), k = 0 .. n/2; rank-1 element j of
// batch b is at b*idist + j*istride (output: b*odist + k*ostride); the basic
// layout (NULL embeds) is contiguous with idist = n, odist = n/2 + 1.
#include <cuda_runtime.h>
#include <cufft.h>
#include <doctest/doctest.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <random>
#include <vector>

namespace {

// Device memory holding `n` elements of T, copied from/to host vectors.
template <class T>
struct Dev {
  T* p = nullptr;
  std::size_t n;
  explicit Dev(std::size_t count) : n(count) { REQUIRE(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess); }
  ~Dev() { (void)cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void put(const std::vector<T>& v) { REQUIRE(cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess); }
  std::vector<T> get() const {
    std::vector<T> v(n);
    REQUIRE(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
  }
};

std::vector<float> random_signal(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Direct DFT bin k of x[0], x[stride], ... (n values), in long double.
std::complex<long double> dft_bin(const float* x, std::int64_t stride, std::int64_t n, std::int64_t k) {
  std::complex<long double> s = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    const long double a = -2.0L * std::numbers::pi_v<long double> * (long double)((j * k) % n) / (long double)n;
    s += (long double)x[j * stride] * std::complex<long double>(std::cos(a), std::sin(a));
  }
  return s;
}

// Largest |emulated - direct| over every output, relative to the largest |X|.
// The emulator computes in double and rounds each output once to float, so
// this is a few float ulps of the largest value at most.
double max_rel_error(const std::vector<float>& in, const std::vector<cufftComplex>& out, std::int64_t n,
                     std::int64_t batch, std::int64_t istride, std::int64_t idist, std::int64_t ostride,
                     std::int64_t odist) {
  double err = 0, scale = 0;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t k = 0; k <= n / 2; ++k) {
      const std::complex<long double> want = dft_bin(in.data() + b * idist, istride, n, k);
      const cufftComplex got = out[std::size_t(b * odist + k * ostride)];
      err = std::max(err, double(std::abs(std::complex<long double>(got.x, got.y) - want)));
      scale = std::max(scale, double(std::abs(want)));
    }
  return err / std::max(scale, 1e-30);
}

}  // namespace

TEST_CASE("emu cuFFT: R2C basic layout equals the direct DFT (powers of two, mixed radix, primes)") {
  for (int n : {1, 2, 3, 8, 6, 400, 1024, 2 * 97, 4096}) {
    const int batch = n >= 1024 ? 2 : 5;
    const std::int64_t nout = n / 2 + 1;
    CAPTURE(n);
    const std::vector<float> x = random_signal(std::size_t(n) * batch, unsigned(n));
    Dev<float> din(x.size());
    Dev<cufftComplex> dout(std::size_t(nout * batch));
    din.put(x);
    cufftHandle plan;
    REQUIRE(cufftPlan1d(&plan, n, CUFFT_R2C, batch) == CUFFT_SUCCESS);
    REQUIRE(cufftExecR2C(plan, din.p, dout.p) == CUFFT_SUCCESS);
    const auto out = dout.get();
    CHECK(max_rel_error(x, out, n, batch, 1, n, 1, nout) < 1e-6);
    // The input is read, not written (out of place).
    CHECK(std::memcmp(din.get().data(), x.data(), x.size() * sizeof(float)) == 0);
    CHECK(cufftDestroy(plan) == CUFFT_SUCCESS);
  }
}

TEST_CASE("emu cuFFT: a cosine lands in its bin with amplitude n/2 (unnormalized, e^{-i})") {
  const int n = 64, k0 = 5;
  std::vector<float> x(n);
  for (int j = 0; j < n; ++j) x[j] = float(std::cos(2 * std::numbers::pi * k0 * j / n) + std::sin(2 * std::numbers::pi * 3 * j / n));
  Dev<float> din(n);
  Dev<cufftComplex> dout(n / 2 + 1);
  din.put(x);
  cufftHandle plan;
  REQUIRE(cufftPlan1d(&plan, n, CUFFT_R2C, 1) == CUFFT_SUCCESS);
  REQUIRE(cufftExecR2C(plan, din.p, dout.p) == CUFFT_SUCCESS);
  const auto out = dout.get();
  for (int k = 0; k <= n / 2; ++k) {
    CAPTURE(k);
    // cos -> +n/2 real at k0; sin(2 pi 3 j/n) -> -i n/2 at 3 (forward sign e^{-i}).
    CHECK(std::abs(out[k].x - (k == k0 ? n / 2.0 : 0.0)) < 1e-4);
    CHECK(std::abs(out[k].y - (k == 3 ? -n / 2.0 : 0.0)) < 1e-4);
  }
  CHECK(cufftDestroy(plan) == CUFFT_SUCCESS);
}

TEST_CASE("emu cuFFT: advanced layout (strides, distances, interleaved batches), caller's work area") {
  struct L {
    int n, batch, istride, idist, ostride, odist;
  };
  for (const L l : {L{16, 3, 2, 40, 1, 12}, L{10, 4, 4, 1, 4, 1}, L{12, 2, 1, 13, 3, 30}}) {
    CAPTURE(l.n);
    CAPTURE(l.istride);
    const std::int64_t nout = l.n / 2 + 1;
    const std::size_t in_n = std::size_t((l.batch - 1) * l.idist + (l.n - 1) * l.istride + 1);
    const std::size_t out_n = std::size_t((l.batch - 1) * l.odist + (nout - 1) * l.ostride + 1);
    const std::vector<float> x = random_signal(in_n, 7);
    Dev<float> din(in_n);
    Dev<cufftComplex> dout(out_n);
    din.put(x);
    // Elements the layout does not address keep their sentinel.
    std::vector<cufftComplex> sentinel(out_n, cufftComplex{123.f, -456.f});
    dout.put(sentinel);
    cufftHandle plan;
    REQUIRE(cufftCreate(&plan) == CUFFT_SUCCESS);
    REQUIRE(cufftSetAutoAllocation(plan, 0) == CUFFT_SUCCESS);
    int n = l.n, emb = l.n;
    std::size_t ws = 0;
    REQUIRE(cufftMakePlanMany(plan, 1, &n, &emb, l.istride, l.idist, &emb, l.ostride, l.odist, CUFFT_R2C, l.batch,
                              &ws) == CUFFT_SUCCESS);
    std::size_t ws2 = 0;
    CHECK(cufftGetSize(plan, &ws2) == CUFFT_SUCCESS);
    CHECK(ws2 == ws);
    REQUIRE(ws > 0);  // the emulator always asks for one, so work-area plumbing is exercised
    // No work area yet: refused.
    CHECK(cufftExecR2C(plan, din.p, dout.p) == CUFFT_INVALID_VALUE);
    Dev<char> work(ws);
    REQUIRE(cufftSetWorkArea(plan, work.p) == CUFFT_SUCCESS);
    REQUIRE(cufftExecR2C(plan, din.p, dout.p) == CUFFT_SUCCESS);
    const auto out = dout.get();
    CHECK(max_rel_error(x, out, l.n, l.batch, l.istride, l.idist, l.ostride, l.odist) < 1e-6);
    std::vector<bool> addressed(out_n, false);
    for (int b = 0; b < l.batch; ++b)
      for (int k = 0; k < nout; ++k) addressed[std::size_t(b * l.odist + k * l.ostride)] = true;
    for (std::size_t i = 0; i < out_n; ++i)
      if (!addressed[i]) CHECK((out[i].x == 123.f && out[i].y == -456.f));
    CHECK(cufftDestroy(plan) == CUFFT_SUCCESS);
  }
}

TEST_CASE("emu cuFFT: stream order and graph capture (the transform runs when the graph replays)") {
  const int n = 32, batch = 3;
  std::vector<float> x = random_signal(n * batch, 3);
  Dev<float> din(x.size());
  Dev<cufftComplex> dout(std::size_t((n / 2 + 1) * batch));
  cudaStream_t s;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  cufftHandle plan;
  REQUIRE(cufftPlan1d(&plan, n, CUFFT_R2C, batch) == CUFFT_SUCCESS);
  REQUIRE(cufftSetStream(plan, s) == CUFFT_SUCCESS);
  din.put(x);
  REQUIRE(cudaMemsetAsync(dout.p, 0xFF, dout.n * sizeof(cufftComplex), s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  REQUIRE(cufftExecR2C(plan, din.p, dout.p) == CUFFT_SUCCESS);
  cudaGraph_t g;
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  // Captured, not run: the output still holds the NaN bytes.
  auto before = dout.get();
  CHECK(std::isnan(before[0].x));
  cudaGraphExec_t ge;
  REQUIRE(cudaGraphInstantiate(&ge, g, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(ge, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  const auto first = dout.get();
  CHECK(max_rel_error(x, first, n, batch, 1, n, 1, n / 2 + 1) < 1e-6);
  // Replay on new input: the graph reads the input when it runs.
  x = random_signal(n * batch, 4);
  din.put(x);
  REQUIRE(cudaGraphLaunch(ge, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(max_rel_error(x, dout.get(), n, batch, 1, n, 1, n / 2 + 1) < 1e-6);
  // Making a plan allocates its work area (cudaMalloc): refused during a capture.
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  cufftHandle p2 = CUFFT_PLAN_NULL;
  CHECK(cufftPlan1d(&p2, n, CUFFT_R2C, 1) == CUFFT_ALLOC_FAILED);
  cudaGraph_t g2 = nullptr;
  (void)cudaStreamEndCapture(s, &g2);
  if (g2) (void)cudaGraphDestroy(g2);
  (void)cudaGetLastError();
  CHECK(cufftDestroy(CUFFT_PLAN_NULL) == CUFFT_SUCCESS);
  CHECK(cudaGraphExecDestroy(ge) == cudaSuccess);
  CHECK(cudaGraphDestroy(g) == cudaSuccess);
  CHECK(cufftDestroy(plan) == CUFFT_SUCCESS);
  CHECK(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("emu cuFFT: what is not emulated or not valid is refused") {
  int n = 16;
  cufftHandle plan;
  CHECK(cufftPlan1d(&plan, n, CUFFT_C2C, 1) == CUFFT_NOT_SUPPORTED);
  CHECK(cufftPlan1d(&plan, n, CUFFT_D2Z, 1) == CUFFT_NOT_SUPPORTED);
  CHECK(cufftPlan1d(&plan, n, cufftType(0x7), 1) == CUFFT_INVALID_TYPE);
  CHECK(cufftPlan1d(&plan, 0, CUFFT_R2C, 1) == CUFFT_INVALID_SIZE);
  CHECK(cufftPlan1d(&plan, n, CUFFT_R2C, 0) == CUFFT_INVALID_SIZE);
  int n2[2] = {4, 4};
  CHECK(cufftPlanMany(&plan, 2, n2, nullptr, 1, 0, nullptr, 1, 0, CUFFT_R2C, 1) == CUFFT_NOT_SUPPORTED);
  int emb = n;
  CHECK(cufftPlanMany(&plan, 1, &n, &emb, 1, n, nullptr, 1, 9, CUFFT_R2C, 2) == CUFFT_NOT_SUPPORTED);
  CHECK(cufftPlanMany(&plan, 1, &n, &emb, 0, n, &emb, 1, 9, CUFFT_R2C, 2) == CUFFT_INVALID_VALUE);
  // Output batches that share addresses (odist 4 < 9 outputs, not interleaved).
  CHECK(cufftPlanMany(&plan, 1, &n, &emb, 1, n, &emb, 1, 4, CUFFT_R2C, 2) == CUFFT_NOT_SUPPORTED);
  CHECK(cufftExecR2C(12345, nullptr, nullptr) == CUFFT_INVALID_PLAN);
  CHECK(cufftDestroy(12345) == CUFFT_INVALID_PLAN);

  REQUIRE(cufftPlan1d(&plan, n, CUFFT_R2C, 2) == CUFFT_SUCCESS);
  Dev<float> din(std::size_t(2 * n));
  Dev<cufftComplex> dout(std::size_t(2 * (n / 2 + 1)));
  Dev<float> small_in(std::size_t(2 * n - 1));
  std::vector<float> host(std::size_t(2 * n), 0.f);
  CHECK(cufftExecR2C(plan, host.data(), dout.p) == CUFFT_INVALID_VALUE);       // host memory
  CHECK(cufftExecR2C(plan, small_in.p, dout.p) == CUFFT_INVALID_VALUE);        // input too short
  CHECK(cufftExecR2C(plan, din.p + 1, dout.p) == CUFFT_INVALID_VALUE);         // runs past the allocation
  CHECK(cufftExecR2C(plan, din.p, dout.p + 1) == CUFFT_INVALID_VALUE);         // output past the allocation
  CHECK(cufftExecR2C(plan, din.p, reinterpret_cast<cufftComplex*>(din.p)) == CUFFT_INVALID_VALUE);  // in place: too small
  // In place in one big enough allocation: overlapping, not emulated.
  Dev<cufftComplex> both(std::size_t(4 * n));
  CHECK(cufftExecR2C(plan, reinterpret_cast<float*>(both.p), both.p) == CUFFT_NOT_SUPPORTED);
  CHECK(cufftSetAutoAllocation(plan, 0) == CUFFT_NOT_SUPPORTED);  // after the make
  int nn = n;
  std::size_t ws = 0;
  CHECK(cufftMakePlanMany(plan, 1, &nn, nullptr, 1, 0, nullptr, 1, 0, CUFFT_R2C, 1, &ws) == CUFFT_INVALID_PLAN);
  CHECK(cufftDestroy(plan) == CUFFT_SUCCESS);
  CHECK(cufftDestroy(plan) == CUFFT_INVALID_PLAN);
}

TEST_CASE("emu cuFFT: the work area is scribbled on; one overlapping the data is refused") {
  const int n = 8;
  cufftHandle plan;
  REQUIRE(cufftCreate(&plan) == CUFFT_SUCCESS);
  REQUIRE(cufftSetAutoAllocation(plan, 0) == CUFFT_SUCCESS);
  int nn = n;
  std::size_t ws = 0;
  REQUIRE(cufftMakePlanMany(plan, 1, &nn, nullptr, 1, 0, nullptr, 1, 0, CUFFT_R2C, 1, &ws) == CUFFT_SUCCESS);
  Dev<float> buf(1024);
  Dev<cufftComplex> dout(n / 2 + 1);
  buf.put(std::vector<float>(1024, 1.f));
  REQUIRE(cufftSetWorkArea(plan, buf.p) == CUFFT_SUCCESS);
  CHECK(cufftExecR2C(plan, buf.p, dout.p) == CUFFT_INVALID_VALUE);  // input inside the work area
  CHECK(cufftExecR2C(plan, buf.p + 512, dout.p) == CUFFT_SUCCESS);   // disjoint
  const auto b = buf.get();
  CHECK(std::isnan(b[0]));               // the work area was overwritten
  CHECK(dout.get()[0].x == float(n));    // sum of eight ones
  CHECK(cufftDestroy(plan) == CUFFT_SUCCESS);
}
