// `melforge-bench conv`: the fused conv + bias + ReLU + 2x2 max-pool kernels,
// forward and backward, for the three LeakCNN-64 layers, against cuDNN's
// fastest algorithms found by cuDNN's own search (cudnnFind*AlgorithmEx with a
// 1 GiB workspace) for the unfused sequence it offers:
//   forward:  convolution (or cudnnConvolutionBiasActivationForward when it
//             accepts the found algorithm) -> bias + ReLU -> max pool
//   backward: max-pool backward -> ReLU backward -> bias grad -> filter grad ->
//             data grad (not for layer 1, as ours)
// NHWC tensors and OHWI (NHWC-format) filters in cuDNN too. Math policy: FP32
// runs without TF32 on both sides (CUDNN_FMA_MATH); BF16/FP16 use tensor cores
// with f32 accumulation on both sides (CUDNN_TENSOR_OP_MATH). cuDNN's dw is in
// the data type, ours f32.
//
// Every variant is validated against the CPU twin (batch 4) before it is timed;
// a variant that fails is reported and not timed. Times are medians of CUDA
// event pairs with the L2 flushed before each run (bench_common).
// Roofline: FLOPs = 2*N*H*W*Cout*k*k*Cin per conv pass (backward: dw + dx);
// bytes = the fused op's compulsory traffic (x, w, b, y, code forward; x, w,
// dy, code, dx, dw, db backward). Peaks: --peak-gbps / --peak-tflops /
// --peak-fp32-tflops, else the newest `melforge-bench ceilings` JSON in
// --out-dir (d2d_copy_GBps, bf16_gemm_TFLOPs; FP32 has no measured ceiling and
// needs the flag).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#ifdef MELFORGE_HAVE_CUDNN
#include <cudnn.h>
#endif

#include <algorithm>
#include <cstdint>
#include <limits>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_common.hpp"
#include "bench/suites.hpp"
#include "engine/device.hpp"
#include "engine/error.hpp"
#include "engine/stream.hpp"
#include "engine/tensor.hpp"
#include "kernels/conv_algo_lab.hpp"
#include "kernels/conv_relu_pool.hpp"
#include "kernels/ops.hpp"

namespace mf::bench {

namespace {

struct ConvOptions {
  std::vector<std::int64_t> batches{256, 1024, 4096, 8192};
  std::vector<std::string> dtypes{"f32", "bf16", "f16"};
  std::vector<std::string> algos{"direct", "tiled", "mma", "cin1", "resident"};
  std::vector<int> layers{1, 2, 3};
  int reps = 20;
  double peak_gbps = 0, peak_tflops = 0, peak_fp32_tflops = 0;
  bool no_cudnn = false;
};

ConvOptions& opts() {
  static ConvOptions o;
  return o;
}

struct Layer {
  int index, h, cin, cout;
};
constexpr Layer kLayers[] = {{1, 64, 1, 32}, {2, 32, 32, 64}, {3, 16, 64, 128}};

kernels::ConvReluPoolDims dims(const Layer& l, std::int64_t n) {
  kernels::ConvReluPoolDims d;
  d.n = n;
  d.h = d.w = l.h;
  d.cin = l.cin;
  d.cout = l.cout;
  d.k = 3;
  d.pool = 2;
  return d;
}

// Fills a device tensor with a repeating pattern of uniform values.
void fill_random(Tensor& t, std::uint64_t seed, float lo, float hi, cudaStream_t s) {
  const std::int64_t block = std::min<std::int64_t>(t.numel(), 1 << 20);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(block));
  for (float& f : v) f = dist(rng);
  Tensor host = Tensor::from_floats(v, {block}, t.dtype());
  Tensor flat = t.reshape({t.numel()});
  for (std::int64_t off = 0; off < t.numel(); off += block) {
    const std::int64_t len = std::min(block, t.numel() - off);
    flat.slice(off, off + len).copy_from(host.slice(0, len), s);
  }
}

struct Buffers {
  Tensor x, w, b, y, code, dy, dx, dw, db;
};

Buffers make_buffers(const kernels::ConvReluPoolDims& d, DType dt, Device dev, cudaStream_t s) {
  Buffers B;
  const Shape ys{d.n, d.ph(), d.pw(), d.cout};
  B.x = Tensor::empty({d.n, d.h, d.w, d.cin}, dt, dev, Layout::nhwc, s);
  B.w = Tensor::empty({d.cout, d.k, d.k, d.cin}, dt, dev, Layout::plain, s);
  B.b = Tensor::empty({d.cout}, dt, dev, Layout::plain, s);
  B.y = Tensor::empty(ys, dt, dev, Layout::nhwc, s);
  B.code = Tensor::empty(ys, DType::u8, dev, Layout::plain, s);
  B.dy = Tensor::empty(ys, dt, dev, Layout::nhwc, s);
  B.dx = Tensor::empty(B.x.shape(), dt, dev, Layout::nhwc, s);
  B.dw = Tensor::empty(B.w.shape(), DType::f32, dev, Layout::plain, s);
  B.db = Tensor::empty({d.cout}, DType::f32, dev, Layout::plain, s);
  const float ws = 1.f / std::sqrt(float(d.k * d.k * d.cin));
  fill_random(B.x, 1, -1.f, 1.f, s);
  fill_random(B.w, 2, -ws, ws, s);
  fill_random(B.b, 3, -0.1f, 0.1f, s);
  fill_random(B.dy, 4, -1.f, 1.f, s);
  return B;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    num += double(a[i] - b[i]) * double(a[i] - b[i]);
    den += double(b[i]) * double(b[i]);
  }
  return den == 0 ? (num == 0 ? 0 : INFINITY) : std::sqrt(num / den);
}

// Runs the variant at batch 4 and compares with the CPU twin; returns an error text or "".
std::string validate(const Layer& l, DType dt, kernels::ConvAlgo algo, cudaStream_t s) {
  const auto d = dims(l, 4);
  kernels::set_conv_relu_pool_algo(algo);
  Buffers g = make_buffers(d, dt, Device::cuda(0), s);
  g.y.fill_bytes(0xff, s);
  g.dx.fill_bytes(0xff, s);
  g.dw.fill_bytes(0xff, s);
  Tensor* dxp = l.cin == 1 ? nullptr : &g.dx;
  ops::conv_relu_pool_forward(g.x, g.w, g.b, d.pool, g.y, &g.code, s);
  ops::conv_relu_pool_backward(g.x, g.w, g.dy, g.code, d.pool, g.dw, g.db, dxp, s);
  MF_CUDA_CHECK(cudaStreamSynchronize(s));
  const Tensor x = g.x.to(Device::cpu()), w = g.w.to(Device::cpu()), b = g.b.to(Device::cpu());
  const Tensor dy = g.dy.to(Device::cpu()), code = g.code.to(Device::cpu());
  Tensor y = Tensor::empty(g.y.shape(), dt), dx = Tensor::empty(x.shape(), dt);
  Tensor dw = Tensor::empty(w.shape(), DType::f32), db = Tensor::empty({d.cout}, DType::f32);
  ops::conv_relu_pool_forward(x, w, b, d.pool, y, nullptr);
  ops::conv_relu_pool_backward(x, w, dy, code, d.pool, dw, db, l.cin == 1 ? nullptr : &dx);
  const double tol = dt == DType::bf16 ? 1e-2 : (dt == DType::f16 ? 2e-3 : 1e-5);
  const double ey = rel_l2(g.y.to_floats(), y.to_floats());
  const double edx = l.cin == 1 ? 0.0 : rel_l2(g.dx.to_floats(), dx.to_floats());
  const double edw = rel_l2(g.dw.to_floats(), dw.to_floats());
  if (ey > tol || edx > tol || edw > 1e-4)
    return fmt::format("y {:.2e}, dx {:.2e}, dw {:.2e} (tolerance {:.0e}, dw 1e-4)", ey, edx, edw, tol);
  return {};
}

struct Peaks {
  double gbps = 0, tflops_tc = 0, tflops_fp32 = 0;
  std::string source;
};

Peaks load_peaks() {
  Peaks p;
  p.gbps = opts().peak_gbps;
  p.tflops_tc = opts().peak_tflops;
  p.tflops_fp32 = opts().peak_fp32_tflops;
  p.source = "flags";
  namespace fs = std::filesystem;
  const fs::path dir = common().out_dir;
  std::optional<fs::path> newest;
  std::error_code ec;
  if (fs::is_directory(dir, ec))
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().filename().string().rfind("ceilings-", 0) == 0 && e.path().extension() == ".json")
        if (!newest || fs::last_write_time(e.path()) > fs::last_write_time(*newest)) newest = e.path();
  if (newest) {
    try {
      std::ifstream f(*newest);
      const auto j = nlohmann::json::parse(f);
      const auto& r = j.at("results");
      if (p.gbps == 0 && r.contains("d2d_copy_GBps")) p.gbps = r["d2d_copy_GBps"].get<double>();
      if (p.tflops_tc == 0 && r.contains("bf16_gemm_TFLOPs")) p.tflops_tc = r["bf16_gemm_TFLOPs"].get<double>();
      p.source = "flags + " + newest->string();
    } catch (const std::exception& e) {
      fmt::print("conv: ignoring {}: {}\n", newest->string(), e.what());
    }
  }
  return p;
}

#ifdef MELFORGE_HAVE_CUDNN
cudnnDataType_t cudnn_type(DType t) {
  return t == DType::f32 ? CUDNN_DATA_FLOAT : (t == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF);
}

// cuDNN's sequence for one layer: descriptors, the algorithms its search found,
// a workspace, and the intermediate tensors it needs (pre-activation, activation).
class CudnnLayer {
 public:
  CudnnLayer(cudnnHandle_t h, const kernels::ConvReluPoolDims& d, DType dt, Buffers& B, cudaStream_t s)
      : h_(h), d_(d), B_(B) {
    const cudnnDataType_t t = cudnn_type(dt);
    MF_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x_));
    MF_CUDNN_CHECK(cudnnCreateTensorDescriptor(&c_));
    MF_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p_));
    MF_CUDNN_CHECK(cudnnCreateTensorDescriptor(&b_));
    MF_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w_));
    MF_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_));
    MF_CUDNN_CHECK(cudnnCreateActivationDescriptor(&act_));
    MF_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&pool_));
    const int n = int(d.n);
    MF_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NHWC, t, n, d.cin, d.h, d.w));
    MF_CUDNN_CHECK(cudnnSetTensor4dDescriptor(c_, CUDNN_TENSOR_NHWC, t, n, d.cout, d.h, d.w));
    MF_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p_, CUDNN_TENSOR_NHWC, t, n, d.cout, d.ph(), d.pw()));
    MF_CUDNN_CHECK(cudnnSetTensor4dDescriptor(b_, CUDNN_TENSOR_NHWC, t, 1, d.cout, 1, 1));
    MF_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_, t, CUDNN_TENSOR_NHWC, d.cout, d.cin, d.k, d.k));
    MF_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_, d.k / 2, d.k / 2, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                                   CUDNN_DATA_FLOAT));
    MF_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_, dt == DType::f32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
    MF_CUDNN_CHECK(cudnnSetActivationDescriptor(act_, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
    MF_CUDNN_CHECK(cudnnSetPooling2dDescriptor(pool_, CUDNN_POOLING_MAX, CUDNN_PROPAGATE_NAN, d.pool, d.pool, 0, 0,
                                               d.pool, d.pool));
    pre_ = Tensor::empty({d.n, d.h, d.w, d.cout}, dt, Device::cuda(0), Layout::nhwc, s);
    act_t_ = Tensor::empty({d.n, d.h, d.w, d.cout}, dt, Device::cuda(0), Layout::nhwc, s);
    dw_t_ = Tensor::empty(B.w.shape(), dt, Device::cuda(0), Layout::plain, s);
    db_t_ = Tensor::empty({d.cout}, dt, Device::cuda(0), Layout::plain, s);
    dact_ = Tensor::empty({d.n, d.h, d.w, d.cout}, dt, Device::cuda(0), Layout::nhwc, s);
    ws_bytes_ = std::size_t(1) << 30;
    ws_ = Tensor::empty({std::int64_t(ws_bytes_)}, DType::u8, Device::cuda(0), Layout::plain, s);
    MF_CUDA_CHECK(cudaStreamSynchronize(s));
    MF_CUDNN_CHECK(cudnnSetStream(h_, s));
    int got = 0;
    cudnnConvolutionFwdAlgoPerf_t fp[8];
    MF_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h_, x_, B.x.raw(), w_, B.w.raw(), conv_, c_, pre_.raw(), 8,
                                                          &got, fp, ws_.raw(), ws_bytes_));
    fwd_algo_ = first_ok(fp, got);
    cudnnConvolutionBwdFilterAlgoPerf_t wp[8];
    MF_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h_, x_, B.x.raw(), c_, pre_.raw(), conv_, w_,
                                                                 dw_t_.raw(), 8, &got, wp, ws_.raw(), ws_bytes_));
    bwd_filter_algo_ = first_ok(wp, got);
    if (d.cin > 1) {
      cudnnConvolutionBwdDataAlgoPerf_t dp[8];
      MF_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h_, w_, B.w.raw(), c_, pre_.raw(), conv_, x_,
                                                                 B.dx.raw(), 8, &got, dp, ws_.raw(), ws_bytes_));
      bwd_data_algo_ = first_ok(dp, got);
    }
    // Does the fused conv + bias + ReLU accept the algorithm cuDNN found?
    fused_ok_ = try_fused_forward() == CUDNN_STATUS_SUCCESS;
    // cuDNN's bias gradient has no bf16 kernel (CUDNN_STATUS_NOT_SUPPORTED on
    // an H200, cuDNN 9); PyTorch sums the gradient with its own reduction
    // then. The stand-in here is cuBLAS: db (f32) = dact^T (C x NHW) * ones.
    const float one = 1.f, zero = 0.f;
    const cudnnStatus_t bias_status = cudnnConvolutionBackwardBias(h_, &one, c_, dact(), &zero, b_, db_t_.raw());
    if (bias_status != CUDNN_STATUS_SUCCESS) {
      MF_CHECK(bias_status == CUDNN_STATUS_NOT_SUPPORTED, "cuDNN's bias gradient failed: {}",
               cudnnGetErrorString(bias_status));
      const std::int64_t rows = d.n * d.h * d.w;
      MF_CHECK(rows <= std::numeric_limits<int>::max(), "conv: {} rows are too many for cuBLAS's bias sum", rows);
      MF_CUBLAS_CHECK(cublasCreate(&cublas_));
      MF_CUBLAS_CHECK(cublasSetStream(cublas_, s));
      ones_ = Tensor::empty({rows}, dt, Device::cuda(0), Layout::plain, s);
      ones_.fill(1.f, s);
      db_f32_ = Tensor::empty({d.cout}, DType::f32, Device::cuda(0), Layout::plain, s);
    }
    MF_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  ~CudnnLayer() {
    cudnnDestroyTensorDescriptor(x_);
    cudnnDestroyTensorDescriptor(c_);
    cudnnDestroyTensorDescriptor(p_);
    cudnnDestroyTensorDescriptor(b_);
    cudnnDestroyFilterDescriptor(w_);
    cudnnDestroyConvolutionDescriptor(conv_);
    cudnnDestroyActivationDescriptor(act_);
    cudnnDestroyPoolingDescriptor(pool_);
    if (cublas_) cublasDestroy(cublas_);
  }
  CudnnLayer(const CudnnLayer&) = delete;
  CudnnLayer& operator=(const CudnnLayer&) = delete;

  void forward() {
    const float one = 1.f, zero = 0.f;
    if (fused_ok_) {
      MF_CUDNN_CHECK(try_fused_forward());
    } else {
      MF_CUDNN_CHECK(cudnnConvolutionForward(h_, &one, x_, B_.x.raw(), w_, B_.w.raw(), conv_, fwd_algo_, ws_.raw(),
                                             ws_bytes_, &zero, c_, pre_.raw()));
      MF_CUDNN_CHECK(cudnnAddTensor(h_, &one, b_, B_.b.raw(), &one, c_, pre_.raw()));
      MF_CUDNN_CHECK(cudnnActivationForward(h_, act_, &one, c_, pre_.raw(), &zero, c_, act_t_.raw()));
    }
    MF_CUDNN_CHECK(cudnnPoolingForward(h_, pool_, &one, c_, act_t_.raw(), &zero, p_, B_.y.raw()));
  }

  void backward() {
    const float one = 1.f, zero = 0.f;
    // ReLU's backward needs only where the activation is > 0, which the
    // activation itself tells (the fused forward never materializes pre_).
    MF_CUDNN_CHECK(cudnnPoolingBackward(h_, pool_, &one, p_, B_.y.raw(), p_, B_.dy.raw(), c_, act_t_.raw(), &zero, c_,
                                        dact()));
    MF_CUDNN_CHECK(cudnnActivationBackward(h_, act_, &one, c_, act_t_.raw(), c_, dact(), c_, act_t_.raw(), &zero, c_,
                                           dact()));
    bias_backward();
    MF_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h_, &one, x_, B_.x.raw(), c_, dact(), conv_, bwd_filter_algo_,
                                                  ws_.raw(), ws_bytes_, &zero, w_, dw_t_.raw()));
    if (d_.cin > 1)
      MF_CUDNN_CHECK(cudnnConvolutionBackwardData(h_, &one, w_, B_.w.raw(), c_, dact(), conv_, bwd_data_algo_,
                                                  ws_.raw(), ws_bytes_, &zero, x_, B_.dx.raw()));
  }

  std::string algos() const {
    return fmt::format("fwd {}{} wgrad {} dgrad {} bgrad {}", int(fwd_algo_), fused_ok_ ? " fused" : "",
                       int(bwd_filter_algo_), d_.cin > 1 ? std::to_string(int(bwd_data_algo_)) : "-",
                       cublas_ ? "cublas" : "cudnn");
  }

 private:
  template <class Perf>
  static decltype(Perf::algo) first_ok(const Perf* p, int n) {
    for (int i = 0; i < n; ++i)
      if (p[i].status == CUDNN_STATUS_SUCCESS) return p[i].algo;
    MF_THROW("cuDNN's search found no working algorithm");
  }
  cudnnStatus_t try_fused_forward() {
    const float one = 1.f, zero = 0.f;
    return cudnnConvolutionBiasActivationForward(h_, &one, x_, B_.x.raw(), w_, B_.w.raw(), conv_, fwd_algo_, ws_.raw(),
                                                 ws_bytes_, &zero, c_, act_t_.raw(), b_, B_.b.raw(), act_, c_,
                                                 act_t_.raw());
  }
  void* dact() { return dact_.raw(); }
  void bias_backward() {
    const float one = 1.f, zero = 0.f;
    if (!cublas_) {
      MF_CUDNN_CHECK(cudnnConvolutionBackwardBias(h_, &one, c_, dact(), &zero, b_, db_t_.raw()));
      return;
    }
    // dact is NHWC, so column-major it is C x NHW with leading dimension C.
    const int c = int(d_.cout), rows = int(ones_.numel());
    const cudaDataType_t t = ones_.dtype() == DType::bf16 ? CUDA_R_16BF
                             : ones_.dtype() == DType::f16 ? CUDA_R_16F
                                                           : CUDA_R_32F;
    MF_CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, c, 1, rows, &one, dact(), t, c, ones_.raw(), t,
                                 rows, &zero, db_f32_.raw(), CUDA_R_32F, c, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  cudnnHandle_t h_;
  kernels::ConvReluPoolDims d_;
  Buffers& B_;
  cudnnTensorDescriptor_t x_{}, c_{}, p_{}, b_{};
  cudnnFilterDescriptor_t w_{};
  cudnnConvolutionDescriptor_t conv_{};
  cudnnActivationDescriptor_t act_{};
  cudnnPoolingDescriptor_t pool_{};
  Tensor pre_, act_t_, dact_, dw_t_, db_t_, ws_;
  cublasHandle_t cublas_ = nullptr;  // set only where cuDNN has no bias gradient
  Tensor ones_, db_f32_;
  std::size_t ws_bytes_ = 0;
  cudnnConvolutionFwdAlgo_t fwd_algo_{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo_{};
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo_{};
  bool fused_ok_ = false;
};
#endif

void run_conv() {
  if (!gpu_available()) {
    fmt::print("melforge-bench conv: no GPU ({}); nothing to measure\n", gpu_info().why_none);
    return;
  }
  Stream stream(Device::cuda(0), "bench-conv");
  cudaStream_t s = stream;
  const Peaks peaks = load_peaks();
  fmt::print("device {}; peaks: {:.0f} GB/s, {:.0f} TFLOP/s bf16/f16, {:.0f} TFLOP/s fp32 (0 = unknown; {})\n",
             device_properties(0).name, peaks.gbps, peaks.tflops_tc, peaks.tflops_fp32, peaks.source);
#ifdef MELFORGE_HAVE_CUDNN
  cudnnHandle_t cudnn = nullptr;
  if (!opts().no_cudnn) MF_CUDNN_CHECK(cudnnCreate(&cudnn));
#else
  fmt::print("cuDNN was not found at build time: no comparison\n");
#endif
  const kernels::ConvAlgo saved = kernels::conv_relu_pool_algo();
  nlohmann::json rows = nlohmann::json::array();
  fmt::print("{:<6} {:<5} {:<8} {:>5} | {:>9} {:>7} {:>7} {:>5} {:>9} {:>6} | {:>9} {:>7} {:>7} {:>5} {:>9} {:>6} "
             "{:>9}\n",
             "layer", "dtype", "variant", "batch", "fwd us", "TFLOP/s", "GB/s", "roof%", "cudnn us", "x", "bwd us",
             "TFLOP/s", "GB/s", "roof%", "cudnn us", "x", "dw us");
  for (int li : opts().layers) {
    MF_CHECK(li >= 1 && li <= 3, "conv: --layers takes 1, 2 or 3, got {}", li);
    const Layer& l = kLayers[li - 1];
    for (const std::string& dts : opts().dtypes) {
      const DType dt = parse_dtype(dts);
      const double peak_flops = (dt == DType::f32 ? peaks.tflops_fp32 : peaks.tflops_tc) * 1e12;
      // Validate each requested variant before timing anything.
      std::vector<std::pair<kernels::ConvAlgo, std::string>> variants;
      for (const std::string& an : opts().algos) {
        const kernels::ConvAlgo a = an == "direct" ? kernels::ConvAlgo::direct
                                    : an == "tiled" ? kernels::ConvAlgo::tiled
                                    : an == "mma"   ? kernels::ConvAlgo::mma
                                    : an == "cin1"  ? kernels::ConvAlgo::cin1
                                    : an == "resident" ? kernels::ConvAlgo::resident
                                                    : kernels::ConvAlgo::automatic;
        const kernels::ConvAlgo ran = kernels::conv_relu_pool_resolve_algo(dims(l, 4), dt, a);
        if (ran != a && a != kernels::ConvAlgo::automatic) {
          fmt::print("layer {} {} {}: not available for this shape (falls back to {}); skipped\n", l.index, dts, an,
                     kernels::conv_algo_name(ran));
          continue;
        }
        const std::string err = validate(l, dt, a, s);
        if (!err.empty()) {
          fmt::print("layer {} {} {}: VALIDATION FAILED against the CPU twin: {}; not timed\n", l.index, dts, an, err);
          rows.push_back({{"layer", l.index}, {"dtype", dts}, {"variant", an}, {"valid", false}, {"error", err}});
          continue;
        }
        variants.emplace_back(a, an);
      }
      for (std::int64_t n : opts().batches) {
        const auto d = dims(l, n);
        Buffers B = make_buffers(d, dt, Device::cuda(0), s);
        Tensor* dxp = l.cin == 1 ? nullptr : &B.dx;
        const double conv_flops = 2.0 * double(n) * d.h * d.w * d.cout * d.k * d.k * d.cin;
        const double fwd_flops = conv_flops, bwd_flops = conv_flops * (dxp ? 2 : 1);
        const double ts = double(dtype_size(dt));
        const double xb = double(B.x.numel()) * ts, wb = double(B.w.numel()) * ts, yb = double(B.y.numel()) * ts;
        const double cb = double(B.code.numel());
        const double fwd_bytes = xb + wb + double(d.cout) * ts + yb + cb;
        const double bwd_bytes = xb + wb + yb + cb + (dxp ? xb : 0) + double(B.w.numel() + d.cout) * 4;
        double cudnn_fwd = 0, cudnn_bwd = 0;
        std::string cudnn_algos;
#ifdef MELFORGE_HAVE_CUDNN
        if (cudnn) {
          try {
            CudnnLayer c(cudnn, d, dt, B, s);
            cudnn_fwd = time_cuda_ms([&] { c.forward(); }, s, 3, opts().reps) * 1e3;
            cudnn_bwd = time_cuda_ms([&] { c.backward(); }, s, 3, opts().reps) * 1e3;
            cudnn_algos = c.algos();
          } catch (const std::exception& e) {
            fmt::print("layer {} {} batch {}: cuDNN failed: {}\n", l.index, dts, n, e.what());
          }
        }
#endif
        for (const auto& [a, an] : variants) {
          kernels::set_conv_relu_pool_algo(a);
          const double fus = time_cuda_ms([&] { ops::conv_relu_pool_forward(B.x, B.w, B.b, d.pool, B.y, &B.code, s); },
                                          s, 3, opts().reps) * 1e3;
          const double bus = time_cuda_ms(
              [&] { ops::conv_relu_pool_backward(B.x, B.w, B.dy, B.code, d.pool, B.dw, B.db, dxp, s); }, s, 3,
              opts().reps) * 1e3;
          // dw + db alone (the backward without dx), so dx's share is bwd - dw.
          const double wus = !dxp ? bus
                                  : time_cuda_ms(
                                        [&] {
                                          ops::conv_relu_pool_backward(B.x, B.w, B.dy, B.code, d.pool, B.dw, B.db,
                                                                       nullptr, s);
                                        },
                                        s, 3, opts().reps) *
                                        1e3;
          auto roof = [&](double flops, double bytes, double us) {
            if (peak_flops <= 0 || peaks.gbps <= 0) return 0.0;
            return 100.0 * std::max(flops / peak_flops, bytes / (peaks.gbps * 1e9)) / (us * 1e-6);
          };
          const double fr = roof(fwd_flops, fwd_bytes, fus), br = roof(bwd_flops, bwd_bytes, bus);
          fmt::print("{:<6} {:<5} {:<8} {:>5} | {:>9.1f} {:>7.1f} {:>7.0f} {:>5.0f} {:>9.1f} {:>6.2f} | {:>9.1f} {:>7.1f} "
                     "{:>7.0f} {:>5.0f} {:>9.1f} {:>6.2f} {:>9.1f}\n",
                     l.index, dts, an, n, fus, fwd_flops / fus * 1e-6, fwd_bytes / fus * 1e-3, fr, cudnn_fwd,
                     cudnn_fwd > 0 ? cudnn_fwd / fus : 0.0, bus, bwd_flops / bus * 1e-6, bwd_bytes / bus * 1e-3, br,
                     cudnn_bwd, cudnn_bwd > 0 ? cudnn_bwd / bus : 0.0, wus);
          rows.push_back({{"layer", l.index}, {"dtype", dts}, {"variant", an}, {"valid", true}, {"batch", n},
                          {"h", d.h}, {"cin", d.cin}, {"cout", d.cout},
                          {"fwd_us", fus}, {"fwd_TFLOPs", fwd_flops / fus * 1e-6}, {"fwd_GBps", fwd_bytes / fus * 1e-3},
                          {"fwd_roofline_pct", fr}, {"cudnn_fwd_us", cudnn_fwd},
                          {"bwd_us", bus}, {"bwd_TFLOPs", bwd_flops / bus * 1e-6}, {"bwd_GBps", bwd_bytes / bus * 1e-3},
                          {"bwd_roofline_pct", br}, {"bwd_dw_only_us", wus}, {"cudnn_bwd_us", cudnn_bwd},
                          {"cudnn_algos", cudnn_algos},
                          {"speedup_fwd_vs_cudnn", cudnn_fwd > 0 ? cudnn_fwd / fus : 0.0},
                          {"speedup_bwd_vs_cudnn", cudnn_bwd > 0 ? cudnn_bwd / bus : 0.0}});
        }
      }
    }
  }
  kernels::set_conv_relu_pool_algo(saved);
#ifdef MELFORGE_HAVE_CUDNN
  if (cudnn) cudnnDestroy(cudnn);
#endif
  fmt::print("x = cuDNN time / ours (> 1: ours faster). roof% = the roofline bound (max of FLOPs/peak, bytes/peak) "
             "over the measured time. dw us = the backward without dx (dw + db alone).\n");
  nlohmann::json res;
  res["peaks"] = {{"GBps", peaks.gbps}, {"TFLOPs_tensor", peaks.tflops_tc}, {"TFLOPs_fp32", peaks.tflops_fp32},
                  {"source", peaks.source}};
  res["rows"] = rows;
  if (!common().no_write) fmt::print("wrote {}\n", write_results(common().out_dir, "conv", res));
}

}  // namespace

void register_conv(CLI::App& app) {
  auto* cmd = app.add_subcommand("conv", "Fused conv+ReLU+maxpool kernels (forward, backward) against cuDNN");
  auto& o = opts();
  cmd->add_option("--batch", o.batches, "Batch sizes")->capture_default_str();
  cmd->add_option("--dtype", o.dtypes, "Precisions: f32, bf16, f16")->capture_default_str();
  cmd->add_option("--algo", o.algos, "Variants: direct, tiled, mma, cin1, resident, auto")
      ->check(CLI::IsMember({"direct", "tiled", "mma", "cin1", "resident", "auto"}))
      ->capture_default_str();
  cmd->add_option("--layers", o.layers, "LeakCNN-64 layers: 1 (1->32 @64x64), 2 (32->64 @32x32), 3 (64->128 @16x16)")
      ->capture_default_str();
  cmd->add_option("--reps", o.reps, "Timed repetitions (median)")->capture_default_str();
  cmd->add_option("--peak-gbps", o.peak_gbps, "Memory bandwidth ceiling (default: the ceilings JSON)");
  cmd->add_option("--peak-tflops", o.peak_tflops, "BF16/FP16 tensor-core ceiling (default: the ceilings JSON)");
  cmd->add_option("--peak-fp32-tflops", o.peak_fp32_tflops, "FP32 CUDA-core ceiling (no default)");
  cmd->add_flag("--no-cudnn", o.no_cudnn, "Time only melforge's kernels");
  cmd->callback(run_conv);
}

}  // namespace mf::bench
