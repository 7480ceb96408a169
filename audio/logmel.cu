// The logmel op on the GPU (audio/logmel.hpp): frames, cuFFT, mel, dB.
//
// Per compute(batch), over the batch's batch * T frames (T = total_frames(),
// global frame g = b * T + t), in pieces of at most chunk_ frames:
//   1. frames_kernel: frames[r][i] = row_b[t*hop + i - n_fft/2] * hann[i]
//      (0 outside the row: the n_fft/2 zeros of center=True on the left, zeros
//      past window_samples()), one block per frame row, threads over i.
//   2. cuFFT R2C of size n_fft on the piece's rows (unnormalized, n_fft/2+1 bins).
//   3. mel_kernel: power re^2 + im^2, then each band's sum of w * power over
//      its nonzero bins in increasing bin order (float fma), then
//      10 * log10(max(mel, 1e-10)), written to out[b, s, m, f] with
//      t = s * frames + f. A block covers 32 consecutive frames x 8 bands at a
//      time, threadIdx.x over frames, so each warp's stores are consecutive f.
// Variant 1, the simple one: no shared memory; kernel 3 reads the spectrum
// uncoalesced (rows n_bins apart), through the caches. Speed is measured on a
// GPU later.
//
// The same bits as the CPU twin (logmel_cpu.cpp) for the frames (the same
// hann in double rounded to float, one float multiply); the FFT differs
// (cuFFT's float rounding vs FFTW's), and the mel sum is float here, double
// there: tests/audio/test_logmel_gpu.cpp bounds the difference.
//
// Plans and buffers, all made in the constructor (compute() allocates and
// synchronizes nothing, so it can be captured into a CUDA graph):
//   chunk_ = min(max_batch * T, the frames whose frame and spectrum buffers
//   fit in kBufferBudget = 512 MiB; audio/logmel_cuda.hpp takes another budget
//   for the tests); cuFFT plans for chunk_ frames and for
//   every power of two below it, sharing one work area (at most kWorkBudget =
//   512 MiB: chunk_ is halved until the largest plan's work area fits). A piece
//   of n < chunk_ frames runs one plan per set bit of n, so a small batch on an
//   op sized for a large one does no wasted FFT work.
// Deterministic: no atomics; every output is computed by one thread in a fixed order.
#include <cufft.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "audio/logmel.hpp"
#include "audio/logmel_cuda.hpp"
#include "audio/mel_filterbank.hpp"
#include "engine/error.hpp"

#define MF_CUFFT_CHECK(call)                                                                       \
  do {                                                                                             \
    const cufftResult mf_status_ = (call);                                                         \
    if (mf_status_ != CUFFT_SUCCESS) [[unlikely]]                                                  \
      ::mf::detail::throw_cuda(__FILE__, __LINE__, #call, "cuFFT", int(mf_status_), cufft_name(mf_status_)); \
  } while (0)

namespace mf::audio {

namespace {

// cuFFT has no status-string function: the enum's names (cufft.h).
const char* cufft_name(cufftResult s) {
  switch (s) {
    case CUFFT_SUCCESS: return "CUFFT_SUCCESS";
    case CUFFT_INVALID_PLAN: return "CUFFT_INVALID_PLAN";
    case CUFFT_ALLOC_FAILED: return "CUFFT_ALLOC_FAILED";
    case CUFFT_INVALID_TYPE: return "CUFFT_INVALID_TYPE";
    case CUFFT_INVALID_VALUE: return "CUFFT_INVALID_VALUE";
    case CUFFT_INTERNAL_ERROR: return "CUFFT_INTERNAL_ERROR";
    case CUFFT_EXEC_FAILED: return "CUFFT_EXEC_FAILED";
    case CUFFT_SETUP_FAILED: return "CUFFT_SETUP_FAILED";
    case CUFFT_INVALID_SIZE: return "CUFFT_INVALID_SIZE";
    case CUFFT_NOT_SUPPORTED: return "CUFFT_NOT_SUPPORTED";
    default: return "a cuFFT error";
  }
}

constexpr std::int64_t kBufferBudget = std::int64_t(512) << 20;  // frames + spectrum, bytes (default)
constexpr std::int64_t kWorkBudget = std::int64_t(512) << 20;    // cuFFT work area, bytes
constexpr unsigned kFramesBlock = 256;
constexpr unsigned kMelFrames = 32, kMelBands = 8;  // mel_kernel's block: frames x bands

// Shapes the kernels need (copied by value into each launch).
struct Dims {
  std::int64_t n_fft, n_bins, hop, window_samples;
  std::int64_t total_frames;  // T, frames per file
  std::int64_t frames;        // per segment
  std::int64_t n_mels;
};

// Rows r in [0, n) of one piece: global frame g0 + r.
__global__ void frames_kernel(Dims d, const float* __restrict__ wave, const float* __restrict__ window,
                              float* __restrict__ frames, std::int64_t g0, std::int64_t n) {
  for (std::int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const std::int64_t g = g0 + r, b = g / d.total_frames, t = g - b * d.total_frames;
    const std::int64_t start = t * d.hop - d.n_fft / 2;
    const float* row = wave + b * d.window_samples;
    float* x = frames + r * d.n_fft;
    for (std::int64_t i = threadIdx.x; i < d.n_fft; i += blockDim.x) {
      const std::int64_t pos = start + i;
      x[i] = (pos >= 0 && pos < d.window_samples) ? row[pos] * window[i] : 0.f;
    }
  }
}

// Band m's weights are weights[offset[m] .. offset[m] + count[m]), for bins
// first[m] onwards.
__global__ void mel_kernel(Dims d, const cufftComplex* __restrict__ spec, const float* __restrict__ weights,
                           const std::int32_t* __restrict__ first, const std::int32_t* __restrict__ count,
                           const std::int32_t* __restrict__ offset, float* __restrict__ out, std::int64_t g0,
                           std::int64_t n) {
  const std::int64_t r = std::int64_t(blockIdx.x) * kMelFrames + threadIdx.x;
  if (r >= n) return;
  const std::int64_t g = g0 + r, b = g / d.total_frames, t = g - b * d.total_frames;
  const std::int64_t s = t / d.frames, f = t - s * d.frames;
  const cufftComplex* x = spec + r * d.n_bins;
  // out[b, s, m, f]: b's block is T * n_mels values, s's is n_mels * frames.
  float* o = out + b * d.total_frames * d.n_mels + s * d.n_mels * d.frames + f;
  for (std::int64_t m = threadIdx.y; m < d.n_mels; m += kMelBands) {
    const cufftComplex* xb = x + first[m];
    const float* w = weights + offset[m];
    const std::int32_t c = count[m];
    float acc = 0.f;
    for (std::int32_t j = 0; j < c; ++j) {
      const cufftComplex z = xb[j];
      acc = fmaf(w[j], z.x * z.x + z.y * z.y, acc);
    }
    // max(mel, 1e-10) as the twin writes it: a NaN stays NaN.
    o[m * d.frames] = 10.f * log10f(acc < 1e-10f ? 1e-10f : acc);
  }
}

// One device array, freed without throwing.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(std::size_t n, const char* what) {
    if (n == 0) return;
    if (cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T)) != cudaSuccess) {
      (void)cudaGetLastError();
      p_ = nullptr;
      ::mf::detail::throw_error(__FILE__, __LINE__,
                                "logmel (CUDA): out of GPU memory allocating " +
                                    std::to_string(double(n * sizeof(T)) / 1048576.0) + " MiB for " + what +
                                    "; use a smaller batch");
    }
  }
  DeviceArray(const std::vector<T>& host, const char* what) : DeviceArray(host.size(), what) {
    if (!host.empty()) MF_CUDA_CHECK(cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DeviceArray() {
    if (p_) MF_CUDA_CHECK_PRINT(cudaFree(p_));
  }
  DeviceArray(DeviceArray&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
};

// cuFFT plans for `frames` frames each (descending), destroyed without throwing.
class PlanLadder {
 public:
  PlanLadder() = default;
  ~PlanLadder() { destroy(); }
  PlanLadder(const PlanLadder&) = delete;
  PlanLadder& operator=(const PlanLadder&) = delete;

  // Plans for `chunk` frames and every power of two below it; returns the
  // largest work area any of them needs (auto-allocation off: the caller sets one).
  std::size_t make(std::int64_t n_fft, std::int64_t chunk) {
    destroy();
    std::size_t work = 0;
    std::vector<std::int64_t> sizes{chunk};
    for (std::int64_t q = std::int64_t(1) << 40; q >= 1; q /= 2)
      if (q < chunk) sizes.push_back(q);
    for (const std::int64_t frames : sizes) {
      cufftHandle h;
      MF_CUFFT_CHECK(cufftCreate(&h));
      plans_.push_back({frames, h});
      MF_CUFFT_CHECK(cufftSetAutoAllocation(h, 0));
      int n = int(n_fft);
      std::size_t ws = 0;
      MF_CUFFT_CHECK(cufftMakePlanMany(h, 1, &n, nullptr, 1, int(n_fft), nullptr, 1, int(n_fft / 2 + 1), CUFFT_R2C,
                                       int(frames), &ws));
      work = ws > work ? ws : work;
    }
    return work;
  }
  void set_work_area(void* work) {
    for (const auto& [frames, h] : plans_) MF_CUFFT_CHECK(cufftSetWorkArea(h, work));
  }
  // R2C of n <= chunk rows of `in` into `out`, on `stream`.
  void run(std::int64_t n, std::int64_t n_fft, float* in, cufftComplex* out, cudaStream_t stream) const {
    std::int64_t done = 0;
    for (const auto& [frames, h] : plans_) {
      if (n - done < frames) continue;
      MF_CUFFT_CHECK(cufftSetStream(h, stream));
      MF_CUFFT_CHECK(cufftExecR2C(h, in + done * n_fft, out + done * (n_fft / 2 + 1)));
      done += frames;
    }
  }

 private:
  void destroy() noexcept {
    for (const auto& [frames, h] : plans_) {
      const cufftResult st = cufftDestroy(h);
      if (st != CUFFT_SUCCESS)
        ::mf::detail::print_cuda(__FILE__, __LINE__, "cufftDestroy(h)", "cuFFT", int(st), cufft_name(st));
    }
    plans_.clear();
  }
  std::vector<std::pair<std::int64_t, cufftHandle>> plans_;
};

class LogmelCuda final : public LogmelOp {
 public:
  LogmelCuda(const FrontendParams& p, std::int64_t max_batch, std::int64_t buffer_budget)
      : p_(p), max_batch_(max_batch) {
    d_ = Dims{p.n_fft, p.n_bins(), p.hop_length, p.window_samples(), p.total_frames(), p.frames, p.n_mels};
    upload_tables();
    const std::int64_t per_frame = p.n_fft * std::int64_t(sizeof(float)) + p.n_bins() * std::int64_t(sizeof(cufftComplex));
    const std::int64_t cap = buffer_budget / per_frame, t = p.total_frames();
    chunk_ = max_batch <= cap / t ? max_batch * t : cap;  // min(max_batch * T, cap) without overflow
    if (chunk_ < 1) chunk_ = 1;
    std::size_t work = plans_.make(p.n_fft, chunk_);
    while (work > std::size_t(kWorkBudget) && chunk_ > 1) {
      chunk_ /= 2;
      work = plans_.make(p.n_fft, chunk_);
    }
    frames_ = DeviceArray<float>(std::size_t(chunk_ * p.n_fft), "the FFT input frames");
    spec_ = DeviceArray<cufftComplex>(std::size_t(chunk_ * p.n_bins()), "the spectra");
    work_ = DeviceArray<char>(work, "cuFFT's work area");
    if (work > 0) plans_.set_work_area(work_.get());
  }

  void compute(std::int64_t batch, const float* wave, float* out, cudaStream_t stream) override {
    if (batch < 0 || batch > max_batch_)
      ::mf::detail::throw_error(__FILE__, __LINE__,
                                "logmel (CUDA): batch " + std::to_string(batch) + ": expected 0.." +
                                    std::to_string(max_batch_) + " (the op's max_batch)");
    if (batch == 0) return;
    if (wave == nullptr || out == nullptr)
      ::mf::detail::throw_error(__FILE__, __LINE__,
                                "logmel (CUDA): null wave or out pointer for a batch of " + std::to_string(batch));
    const std::int64_t total = batch * d_.total_frames;
    for (std::int64_t g0 = 0; g0 < total; g0 += chunk_) {
      const std::int64_t n = total - g0 < chunk_ ? total - g0 : chunk_;
      const unsigned grid = unsigned(n < 65535 ? n : 65535);
      frames_kernel<<<grid, kFramesBlock, 0, stream>>>(d_, wave, window_.get(), frames_.get(), g0, n);
      MF_CUDA_CHECK_LAUNCH();
      plans_.run(n, d_.n_fft, frames_.get(), spec_.get(), stream);
      const unsigned tiles = unsigned((n + kMelFrames - 1) / kMelFrames);
      mel_kernel<<<tiles, dim3(kMelFrames, kMelBands), 0, stream>>>(d_, spec_.get(), weights_.get(), first_.get(),
                                                                   count_.get(), offset_.get(), out, g0, n);
      MF_CUDA_CHECK_LAUNCH();
    }
  }
  bool on_device() const override { return true; }
  std::int64_t max_batch() const override { return max_batch_; }

 private:
  // The periodic hann window (as the twin computes it: double, rounded to
  // float) and the filter bank's nonzero weights, packed band after band.
  void upload_tables() {
    std::vector<float> hann(std::size_t(p_.n_fft));
    for (std::int64_t i = 0; i < p_.n_fft; ++i)
      hann[std::size_t(i)] = float(0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * double(i) / double(p_.n_fft)));
    const MelFilterbank fb = mel_filterbank(p_);
    std::vector<float> packed;
    std::vector<std::int32_t> offset(std::size_t(fb.n_mels));
    for (std::int64_t m = 0; m < fb.n_mels; ++m) {
      const std::size_t i = std::size_t(m);
      offset[i] = std::int32_t(packed.size());
      const float* row = &fb.weights[i * std::size_t(fb.n_bins)] + fb.first[i];
      packed.insert(packed.end(), row, row + fb.count[i]);
    }
    window_ = DeviceArray<float>(hann, "the window");
    weights_ = DeviceArray<float>(packed, "the mel weights");
    first_ = DeviceArray<std::int32_t>(fb.first, "the mel bands");
    count_ = DeviceArray<std::int32_t>(fb.count, "the mel bands");
    offset_ = DeviceArray<std::int32_t>(offset, "the mel bands");
  }

  FrontendParams p_;
  std::int64_t max_batch_;
  Dims d_{};
  std::int64_t chunk_ = 1;  // frames per piece (FFT buffer rows)
  DeviceArray<float> window_, weights_;
  DeviceArray<std::int32_t> first_, count_, offset_;
  DeviceArray<float> frames_;
  DeviceArray<cufftComplex> spec_;
  DeviceArray<char> work_;
  PlanLadder plans_;  // declared last: destroyed first, before the work area it uses
};

}  // namespace

std::unique_ptr<LogmelOp> make_logmel_cuda_with_budget(const FrontendParams& p, std::int64_t max_batch,
                                                       std::int64_t buffer_budget_bytes) {
  p.validate();
  if (max_batch < 1)
    ::mf::detail::throw_error(__FILE__, __LINE__,
                              "logmel (CUDA): max_batch " + std::to_string(max_batch) + ": expected >= 1");
  return std::make_unique<LogmelCuda>(p, max_batch, buffer_budget_bytes);
}

std::unique_ptr<LogmelOp> make_logmel_cuda(const FrontendParams& p, std::int64_t max_batch) {
  return make_logmel_cuda_with_budget(p, max_batch, kBufferBudget);
}

}  // namespace mf::audio
