// dense on the GPU through cuBLASLt (row-major problems mapped to cuBLASLt's
// column-major view: a row-major [r, c] matrix is a column-major [c, r] one).
//   forward  y^T[N,M]  = W^T'(op T on [K,N]) * x^T[K,M], epilogue BIAS or
//            RELU_BIAS (bias + ReLU fused into the GEMM's store)
//   backward dz = dy * (y > 0) in place and db = column sums of dz: one kernel,
//            a block per 32 columns, fixed-order reduction (no atomics);
//            variant 2 (MELFORGE_DENSE_VARIANT=2) takes db from the dW GEMM's
//            BGRADB epilogue instead.
//            dW^T[K,N] (f32) = x^T[K,M] * dz[M,N] (op T on dz^T)
//            dx^T[K,M]       = W^T[K,N] * dz^T[N,M]
// One cuBLASLt handle and one 32 MiB workspace per device, created on first
// use (the first, eager step, never inside a graph capture); matmul plans
// (descriptors, layouts, heuristic algorithm) cached per problem.
// Precision: FP32 uses CUBLAS_COMPUTE_32F (no TF32); BF16/FP16 operands with
// f32 accumulation; dW is written in f32.
#include <cublasLt.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#include "engine/error.hpp"
#include "kernels/block_reduce.cuh"
#include "kernels/cuda_types.cuh"
#include "kernels/dense.hpp"
#include "kernels/launch.cuh"

namespace mf::kernels {

namespace {

constexpr std::size_t kWorkspaceBytes = std::size_t(32) << 20;

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

// (m, n, k, opA, opB, in type, out type, epilogue, alignment of A, B, D and of
// the bias in bytes). The bias pointer set before the heuristic tells cuBLASLt
// the bias alignment to expect, so two layers of one shape whose biases differ
// in alignment need two plans (found by the CUDA emulator's cuBLASLt).
using PlanKey = std::tuple<std::int64_t, std::int64_t, std::int64_t, int, int, int, int, int, int, int, int, int>;

// The largest power of two (<= 256) dividing the address. cuBLASLt's heuristic
// assumes 256-byte aligned buffers unless told otherwise, and the parameter
// views (model/param_buffer.hpp) are only 16-byte aligned.
int alignment_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  int al = 256;
  while (al > 1 && (a % std::uintptr_t(al)) != 0) al /= 2;
  return al;
}

struct Context {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<PlanKey, Plan> plans;
};

std::mutex g_mutex;
std::map<int, Context> g_contexts;

Context& context() {
  int dev = 0;
  MF_CUDA_CHECK(cudaGetDevice(&dev));
  Context& c = g_contexts[dev];
  if (!c.handle) {
    MF_CUBLAS_CHECK(cublasLtCreate(&c.handle));
    MF_CUDA_CHECK(cudaMalloc(&c.workspace, kWorkspaceBytes));
  }
  return c;
}

// D[m,n] (column-major) = op(A) op(B); A is [k,m] when opA = T, else [m,k].
void matmul(std::int64_t m, std::int64_t n, std::int64_t k, cublasOperation_t opa,
            cublasOperation_t opb, DType in, DType out, cublasLtEpilogue_t epi, const void* a,
            std::int64_t lda, const void* b, std::int64_t ldb, void* d, std::int64_t ldd,
            const void* bias, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Context& ctx = context();
  const int al_a = alignment_of(a), al_b = alignment_of(b), al_d = alignment_of(d);
  const int al_bias = bias ? alignment_of(bias) : 256;
  const PlanKey key{m, n, k, int(opa), int(opb), int(in), int(out), int(epi), al_a, al_b, al_d, al_bias};
  auto it = ctx.plans.find(key);
  if (it == ctx.plans.end()) {
    Plan p;
    MF_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    MF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
    MF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
    MF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
      const cudaDataType_t bt = cuda_type(out);
      MF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
      MF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    const bool ta = opa == CUBLAS_OP_T, tb = opb == CUBLAS_OP_T;
    MF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, cuda_type(in), ta ? k : m, ta ? m : k, lda));
    MF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, cuda_type(in), tb ? n : k, tb ? k : n, ldb));
    MF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, cuda_type(out), m, n, ldd));
    cublasLtMatmulPreference_t pref;
    MF_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const std::uint64_t ws = kWorkspaceBytes;
    MF_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    const std::uint32_t ua = std::uint32_t(al_a), ub = std::uint32_t(al_b), ud = std::uint32_t(al_d);
    MF_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &ua, sizeof(ua)));
    MF_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ub, sizeof(ub)));
    MF_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ud, sizeof(ud)));
    MF_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ud, sizeof(ud)));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    MF_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(ctx.handle, p.desc, p.a, p.b, p.d, p.d, pref, 1, &res, &found));
    MF_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (found == 0) MF_CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED);
    p.algo = res.algo;
    it = ctx.plans.emplace(key, p).first;
  }
  Plan& p = it->second;
  if (epi != CUBLASLT_EPILOGUE_DEFAULT)
    MF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  const float alpha = 1.f, beta = 0.f;
  MF_CUBLAS_CHECK(cublasLtMatmul(ctx.handle, p.desc, &alpha, a, p.a, b, p.b, &beta, d, p.d, d, p.d, &p.algo,
                                 ctx.workspace, kWorkspaceBytes, stream));
}

int variant() {
  static const int v = [] {
    const char* s = std::getenv("MELFORGE_DENSE_VARIANT");
    return s ? std::atoi(s) : 1;
  }();
  return v;
}

// relu_mask_bias_grad's block: kBiasGradCols columns (threadIdx.x) x
// kBiasGradLanes row lanes (threadIdx.y, the height of the column tree).
constexpr int kBiasGradCols = 32, kBiasGradLanes = 32;

// dz = relu ? dy * (y > 0) : dy (in place), db[n] = sum_m dz[m, n].
// threadIdx.x a column of the block's kBiasGradCols, threadIdx.y a row lane;
// lanes sum rows y, y + kBiasGradLanes, ... then the lane sums are added in a
// fixed tree (cuda::block_reduce_columns).
template <class T>
__global__ void relu_mask_bias_grad(std::int64_t m, int n, bool relu, const T* __restrict__ y,
                                    T* __restrict__ dy, float* __restrict__ db) {
  __shared__ float part[kBiasGradLanes][kBiasGradCols + 1];
  const int col = blockIdx.x * kBiasGradCols + threadIdx.x;
  float acc = 0.f;
  if (col < n) {
    for (std::int64_t r = threadIdx.y; r < m; r += kBiasGradLanes) {
      const std::int64_t i = r * n + col;
      float g = cuda::load_f32(dy[i]);
      if (relu) {
        if (!(cuda::load_f32(y[i]) > 0.f)) {
          g = 0.f;
          dy[i] = cuda::store_f32<T>(0.f);
        }
      }
      acc += g;
    }
  }
  acc = cuda::block_reduce_columns<kBiasGradLanes>(acc, part, cuda::Add{});
  if (threadIdx.y == 0 && col < n && db) db[col] = acc;
}

template <class T>
__global__ void relu_mask_only(std::int64_t total, int n, const T* __restrict__ y, T* __restrict__ dy) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x)
    if (!(cuda::load_f32(y[i]) > 0.f)) dy[i] = cuda::store_f32<T>(0.f);
}

template <class T>
void mask_and_db(const DenseDims& d, const void* y, void* dy, float* db, bool want_db, cudaStream_t stream) {
  using D = cuda::device_t<T>;
  if (want_db) {
    const dim3 block(kBiasGradCols, kBiasGradLanes);
    relu_mask_bias_grad<D><<<cuda::blocks_for(d.n, kBiasGradCols), block, 0, stream>>>(
        d.m, d.n, d.relu, static_cast<const D*>(y), static_cast<D*>(dy), db);
  } else if (d.relu) {
    constexpr unsigned threads = cuda::kElementwiseThreads;
    relu_mask_only<D><<<cuda::grid_for(d.m * d.n, threads), threads, 0, stream>>>(
        d.m * d.n, d.n, static_cast<const D*>(y), static_cast<D*>(dy));
  }
  MF_CUDA_CHECK_LAUNCH();
}

}  // namespace

void dense_forward_cuda(const DenseDims& d, DType dtype, const void* x, const void* w, const void* b,
                        void* y, cudaStream_t stream) {
  if (d.m == 0) return;
  matmul(d.n, d.m, d.k, CUBLAS_OP_T, CUBLAS_OP_N, dtype, dtype,
         d.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS, w, d.k, x, d.k, y, d.n, b, stream);
}

void dense_backward_cuda(const DenseDims& d, DType dtype, const void* x, const void* w, const void* y,
                         void* dy, void* dx, float* dw, float* db, cudaStream_t stream) {
  const bool fused_db = variant() == 2;
  if (d.m == 0) {
    MF_CUDA_CHECK(cudaMemsetAsync(dw, 0, std::size_t(d.n) * d.k * 4, stream));
    MF_CUDA_CHECK(cudaMemsetAsync(db, 0, std::size_t(d.n) * 4, stream));
    return;
  }
  switch (dtype) {
    case DType::f32: mask_and_db<float>(d, y, dy, db, !fused_db, stream); break;
    case DType::f16: mask_and_db<f16>(d, y, dy, db, !fused_db, stream); break;
    case DType::bf16: mask_and_db<bf16>(d, y, dy, db, !fused_db, stream); break;
    default: break;
  }
  // dW^T [K,N] = x^T [K,M] * dz [M,N]; dz row-major [M,N] is column-major [N,M], op T.
  matmul(d.k, d.n, d.m, CUBLAS_OP_N, CUBLAS_OP_T, dtype, DType::f32,
         fused_db ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT, x, d.k, dy, d.n, dw, d.k, db,
         stream);
  if (dx) {
    // dx^T [K,M] = W^T [K,N] * dz^T [N,M].
    matmul(d.k, d.m, d.n, CUBLAS_OP_N, CUBLAS_OP_N, dtype, dtype, CUBLASLT_EPILOGUE_DEFAULT, w, d.k, dy,
           d.n, dx, d.k, nullptr, stream);
  }
}

}  // namespace mf::kernels
