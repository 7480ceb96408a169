// logmel: log-mel features of a batch of waveforms, the op behind
// `melforge data build` and `melforge predict --audio` (audio/frontend_params.hpp
// defines the features: librosa's melspectrogram, then 10*log10(max(S, 1e-10))).
//
// Input  wave [batch, p.window_samples()] f32: row b is the first
//        window_samples() samples of file b at p.sample_rate, zeros past the
//        file's end (the op adds the n_fft/2 zeros of center=True on the left).
// Output out  [batch, p.segments(), p.n_mels, p.frames] f32, in dB:
//        out[b, s, m, f] = 10*log10(max(mel[b, m, s*frames + f], 1e-10)).
// The CPU twin (logmel_cpu.cpp) takes host pointers; the CUDA op
// (logmel.cu, cuFFT) device pointers, enqueued on `stream`. Both are
// deterministic: the same input gives the same bits, whatever the thread count.
// They agree with each other and with librosa to the tolerance stated in
// tests/audio/README.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "audio/frontend_params.hpp"

namespace mf::audio {

class LogmelOp {
 public:
  virtual ~LogmelOp() = default;
  // batch <= max_batch(). wave/out: host memory (CPU op) or device memory (CUDA op).
  virtual void compute(std::int64_t batch, const float* wave, float* out, cudaStream_t stream) = 0;
  virtual bool on_device() const = 0;
  virtual std::int64_t max_batch() const = 0;
};

// The CPU twin's variants:
//   fftw  (1): FFTW3 r2c per frame, mel sum in double; any even n_fft. The
//              reference the other variant is tested against.
//   simd8 (2): eight frames per pass, one per SIMD lane (audio/logmel_cpu_x8.cpp,
//              audio/power_spectrum_x8.hpp), mel sum in float; power-of-two
//              n_fft (others run fftw).
//   automatic: simd8 where it applies.
// The two agree within the op's tolerance, not bit for bit. Process-wide
// default: the environment variable MELFORGE_LOGMEL_CPU (auto, fftw, simd8).
enum class LogmelCpuAlgo { automatic, fftw, simd8 };
LogmelCpuAlgo logmel_cpu_algo_from_env();  // throws on a value it does not know
const char* logmel_cpu_algo_name(LogmelCpuAlgo algo);
// The variant make_logmel_cpu runs for p and a requested algo.
LogmelCpuAlgo resolve_logmel_cpu_algo(const FrontendParams& p, LogmelCpuAlgo algo);

// CPU twin, any batch size. threaded: frames spread over every core
// (engine/parallel.hpp); false: all on the calling thread, for callers that
// run one op per thread of their own (the feature pipeline's decode threads).
// The bits are the same either way. algo automatic: the environment's choice.
std::unique_ptr<LogmelOp> make_logmel_cpu(const FrontendParams& p, bool threaded = true,
                                          LogmelCpuAlgo algo = LogmelCpuAlgo::automatic);
// CUDA: plans and workspace for up to max_batch files, allocated once here.
std::unique_ptr<LogmelOp> make_logmel_cuda(const FrontendParams& p, std::int64_t max_batch);

}  // namespace mf::audio
