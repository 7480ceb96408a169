// melforge's CUDA emulator (tests only): the cuBLASLt C API subset melforge
// uses, computed on the CPU. In the emulated build "device" pointers are host
// pointers; cublasLtMatmul's product is stream work (tests/cudaemu/emu_launch.hpp):
// run at the call, or recorded into a stream capture and run by the graph.
//
// Semantics follow NVIDIA's documentation, not melforge's use of it:
//   cuBLASLt API reference   https://docs.nvidia.com/cuda/cublas/#using-the-cublaslt-api
//   cublasLtMatmul()         https://docs.nvidia.com/cuda/cublas/#cublasltmatmul
//   cublasLtEpilogue_t       https://docs.nvidia.com/cuda/cublas/#cublasltepilogue-t
//   cublasLtMatmulDescAttributes_t
//                            https://docs.nvidia.com/cuda/cublas/#cublasltmatmuldescattributes-t
//   cublasLtMatmulPreferenceAttributes_t
//                            https://docs.nvidia.com/cuda/cublas/#cublasltmatmulpreferenceattributes-t
// and the doc comments of the same enums in cublasLt.h (CUDA 13.0 / cuBLAS 13.1).
//
//   D = epilogue(alpha * op(A) * op(B) + beta * C), all matrices column-major
//   with a leading dimension (ld >= rows); op(A) is m x k, op(B) is k x n,
//   C and D are m x n. CUBLAS_OP_T (and CUBLAS_OP_C, which is the same for the
//   real types supported here) transposes the stored matrix: a layout of
//   rows x cols under op T is a cols x rows operand.
//
// Supported (anything else is CUBLAS_STATUS_NOT_SUPPORTED, so a new use shows
// up as an error rather than as silently wrong numbers):
//   compute type CUBLAS_COMPUTE_32F / _32F_PEDANTIC, scale type CUDA_R_32F
//   (alpha, beta are floats), Atype == Btype, Ctype == Dtype, and, from the
//   cublasLtMatmul() "regular" datatype table:
//     A/B CUDA_R_32F  -> C/D CUDA_R_32F
//     A/B CUDA_R_16F  -> C/D CUDA_R_16F or CUDA_R_32F
//     A/B CUDA_R_16BF -> C/D CUDA_R_16BF or CUDA_R_32F
//   order COL, batch count 1 (no layout attributes can be set).
// Numerics: operands are converted to float, each D element is one float FMA
// chain over k in increasing order, then alpha/beta, bias and ReLU in float,
// and the result is rounded once to the D type (round to nearest even).
// beta == 0: C is not read (it may hold NaNs or be null).
//
// Epilogues (cublasLtEpilogue_t, https://docs.nvidia.com/cuda/cublas/#cublasltepilogue-t):
//   DEFAULT    "No special postprocessing, just scale and quantize results if
//              necessary": D = alpha*op(A)op(B) + beta*C.
//   BIAS       "apply (broadcasted) Bias from bias vector. Bias vector length
//              must match matrix D rows, it must be packed (stride between
//              vector elements is 1). Bias vector is broadcasted to all columns
//              and added before applying final postprocessing":
//              D[i,j] = alpha*(op(A)op(B))[i,j] + beta*C[i,j] + bias[i], i < m.
//              The bias is added after the alpha/beta scaling (the doc says
//              "added before applying final postprocessing"; it does not say
//              whether alpha scales the bias; we read it as not scaled).
//              Bias type: BIAS_DATA_TYPE, default (-1) = Dtype; per the
//              attribute's doc the bias elements are of the D type (exceptions
//              only for IMMA and fp8 kernels), so any other type is
//              NOT_SUPPORTED here.
//   RELU_BIAS  "apply Bias and then ReLu transform": D[i,j] = max(that, 0).
//   BGRADB     "Bias gradient based on the input matrix B. The bias size
//              corresponds to the number of columns of the matrix D. The
//              reduction happens over the GEMM's "k" dimension. Stores Bias
//              gradient in the auxiliary output (see BIAS_POINTER)":
//              bias[j] = sum_{p<k} op(B)[p,j], j < n, and D is computed as with
//              DEFAULT. Ambiguities, resolved as follows: (1) "input matrix B"
//              is read as op(B) (the only reading under which a reduction over
//              k gives n values for either transb); (2) alpha is NOT applied to
//              the bias gradient (the doc mentions no scaling); (3) the
//              gradient's element type is the output type per the BIAS_POINTER
//              doc ("Bias gradient vector elements are the same type as the
//              output elements (Ctype)"); a BIAS_DATA_TYPE other than Ctype is
//              NOT_SUPPORTED; (4) the doc lists no restriction on transa/transb
//              for BGRADB, so none is emulated, although real kernels may
//              support only some transpose combinations.
//   Every other epilogue: NOT_SUPPORTED (not emulated).
//
// Strictness beyond "compute the right numbers" (documented emulator choices):
//   * Layout ld < max(1, rows), op/shape mismatches, null operands, a null
//     bias for a bias epilogue, requestedAlgoCount <= 0: INVALID_VALUE. Layout
//     and descriptor creation accept anything (their docs list only
//     ALLOC_FAILED); the checks run in the heuristic and in cublasLtMatmul.
//   * In-place C == D requires ldc == ldd (cuBLASLt documents in-place only for
//     identical C and D layouts); otherwise INVALID_VALUE.
//   * MIN_ALIGNMENT_{A,B,C,D}_BYTES (default 256, per cublasLt.h): the
//     heuristic records what it was told inside the returned algo; cublasLtMatmul
//     with that algo returns INVALID_VALUE if A, B, C or D is less aligned than
//     recorded. Real cuBLASLt may fail (or fault) when it ran an algorithm that
//     needs more alignment than the buffers have; we always report it. An
//     alignment preference smaller than the element size makes the heuristic
//     return NOT_SUPPORTED (no kernel works on element-misaligned data).
//   * The BIAS_POINTER doc says routines that do not dereference it, "like
//     cublasLtMatmulAlgoGetHeuristic() depend on its value to determine
//     expected pointer alignment": the heuristic records the bias pointer's
//     alignment (largest power of two <= 256 dividing it; 256 for null) and
//     cublasLtMatmul returns INVALID_VALUE if the bias pointer is less aligned.
//   * An algo from the heuristic is only accepted for the same compute/scale
//     types, A/B/C/D types, transa/transb and epilogue it was obtained for
//     (INVALID_VALUE otherwise; it is not re-validated like
//     cublasLtMatmulAlgoCheck would). algo == nullptr (documented as an
//     implicit heuristic query) skips the alignment records but still requires
//     element-aligned pointers.
//   * Descriptor/preference attributes the emulator does not implement are
//     refused with NOT_SUPPORTED (real cuBLASLt would accept them); a buf of
//     the wrong size is INVALID_VALUE as documented.
//   * Objects are tracked: a destroyed or never-created handle is
//     NOT_INITIALIZED, a destroyed descriptor/layout/preference INVALID_VALUE.
// Diagnostics for every error go to stderr with the prefix "[emu cublasLt]".
#include <cublasLt.h>
#include "tests/cudaemu/emu_launch.hpp"
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <unordered_set>
#include <vector>

// cublasLt.h declares the handle as a pointer to this incomplete struct.
struct cublasLtContext {
  std::uint64_t magic;
};

namespace {

constexpr std::uint64_t kHandleMagic = 0x6d66656d754c7448ull;  // "mfemuLtH"
constexpr std::uint64_t kDescMagic = 0x6d66656d754c7444ull;
constexpr std::uint64_t kLayoutMagic = 0x6d66656d754c744cull;
constexpr std::uint64_t kPrefMagic = 0x6d66656d754c7450ull;
constexpr std::uint64_t kAlgoMagic = 0x6d66656d754c7441ull;

struct LayoutState {
  std::uint64_t magic;
  std::int32_t type;
  std::uint64_t rows, cols;
  std::int64_t ld;
};

struct DescState {
  std::uint64_t magic;
  std::int32_t compute;
  std::int32_t scale;
  std::int32_t pointer_mode;
  std::int32_t transa, transb;
  std::uint32_t epilogue;
  const void* bias;
  std::int64_t bias_batch_stride;
  std::int32_t bias_type;  // -1: default
};

struct PrefState {
  std::uint64_t magic;
  std::uint64_t max_workspace;
  std::uint32_t align[4];  // A, B, C, D
};

struct AlgoState {
  std::uint64_t magic;
  std::int32_t compute;
  std::int32_t scale;
  std::int32_t type[4];  // A, B, C, D
  std::int32_t transa, transb;
  std::uint32_t epilogue;
  std::uint32_t align[5];  // A, B, C, D, bias
};

static_assert(sizeof(LayoutState) <= sizeof(cublasLtMatrixLayoutOpaque_t));
static_assert(sizeof(DescState) <= sizeof(cublasLtMatmulDescOpaque_t));
static_assert(sizeof(PrefState) <= sizeof(cublasLtMatmulPreferenceOpaque_t));
static_assert(sizeof(AlgoState) <= sizeof(cublasLtMatmulAlgo_t));

template <class S, class O>
S load_state(const O* o) {
  static_assert(std::is_trivially_copyable_v<S> && std::is_trivially_copyable_v<O>);
  S s;
  std::memcpy(&s, o, sizeof(S));
  return s;
}

template <class S, class O>
void store_state(O* o, const S& s) {
  std::memset(o, 0, sizeof(O));
  std::memcpy(o, &s, sizeof(S));
}

// Live objects created here (a destroyed or foreign pointer is never read).
std::mutex g_mutex;
std::unordered_set<const void*>& live() {
  static std::unordered_set<const void*> s;
  return s;
}

bool is_live(const void* p) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return p != nullptr && live().count(p) != 0;
}

void add_live(const void* p) {
  std::lock_guard<std::mutex> lock(g_mutex);
  live().insert(p);
}

bool remove_live(const void* p) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return p != nullptr && live().erase(p) != 0;
}

cublasStatus_t fail(cublasStatus_t st, const char* fn, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
cublasStatus_t fail(cublasStatus_t st, const char* fn, const char* fmt, ...) {
  std::fprintf(stderr, "[emu cublasLt] %s: ", fn);
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "\n");
  return st;
}

bool valid_handle(cublasLtHandle_t h) { return is_live(h) && h->magic == kHandleMagic; }

bool get_desc(cublasLtMatmulDesc_t d, DescState& s) {
  if (!is_live(d)) return false;
  s = load_state<DescState>(d);
  return s.magic == kDescMagic;
}

bool get_layout(cublasLtMatrixLayout_t l, LayoutState& s) {
  if (!is_live(l)) return false;
  s = load_state<LayoutState>(l);
  return s.magic == kLayoutMagic;
}

bool get_pref(cublasLtMatmulPreference_t p, PrefState& s) {
  if (!is_live(p)) return false;
  s = load_state<PrefState>(p);
  return s.magic == kPrefMagic;
}

std::size_t elem_size(std::int32_t t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    default: return 0;
  }
}

const char* type_name(std::int32_t t) {
  switch (t) {
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_16BF: return "CUDA_R_16BF";
    default: return "unsupported type";
  }
}

bool is_trans(std::int32_t op) { return op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

bool uses_bias_input(std::uint32_t epi) {
  return epi == CUBLASLT_EPILOGUE_BIAS || epi == CUBLASLT_EPILOGUE_RELU_BIAS;
}

std::uint32_t pointer_alignment(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al /= 2;
  return al;
}

bool aligned_to(const void* p, std::uint64_t bytes) {
  return bytes <= 1 || reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

struct Problem {
  std::uint64_t m = 0, n = 0, k = 0;
  bool ta = false, tb = false;
  std::int32_t bias_type = -1;  // resolved type of the bias / bias-gradient vector
};

// Shared validation of the heuristic and of cublasLtMatmul.
cublasStatus_t validate(const char* fn, const DescState& d, const LayoutState& a, const LayoutState& b,
                        const LayoutState& c, const LayoutState& dd, Problem& p) {
  if (d.compute != CUBLAS_COMPUTE_32F && d.compute != CUBLAS_COMPUTE_32F_PEDANTIC)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "compute type %d not emulated (CUBLAS_COMPUTE_32F only)",
                d.compute);
  if (d.scale != CUDA_R_32F)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "scale type %d with CUBLAS_COMPUTE_32F (needs CUDA_R_32F)",
                d.scale);
  if (d.pointer_mode != CUBLASLT_POINTER_MODE_HOST && d.pointer_mode != CUBLASLT_POINTER_MODE_DEVICE)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "pointer mode %d not emulated", d.pointer_mode);
  for (std::int32_t op : {d.transa, d.transb})
    if (op != CUBLAS_OP_N && op != CUBLAS_OP_T && op != CUBLAS_OP_C)
      return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "invalid cublasOperation_t %d", op);
  if (a.type != b.type)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "Atype %s != Btype %s", type_name(a.type), type_name(b.type));
  if (c.type != dd.type)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "Ctype %s != Dtype %s", type_name(c.type), type_name(dd.type));
  const bool types_ok = (a.type == CUDA_R_32F && dd.type == CUDA_R_32F) ||
                        (a.type == CUDA_R_16F && (dd.type == CUDA_R_16F || dd.type == CUDA_R_32F)) ||
                        (a.type == CUDA_R_16BF && (dd.type == CUDA_R_16BF || dd.type == CUDA_R_32F));
  if (!types_ok)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "A/B %s with C/D %s is not a supported combination",
                type_name(a.type), type_name(dd.type));

  p.ta = is_trans(d.transa);
  p.tb = is_trans(d.transb);
  p.m = dd.rows;
  p.n = dd.cols;
  const std::uint64_t am = p.ta ? a.cols : a.rows;
  p.k = p.ta ? a.rows : a.cols;
  const std::uint64_t bk = p.tb ? b.cols : b.rows, bn = p.tb ? b.rows : b.cols;
  if (am != p.m || bk != p.k || bn != p.n || c.rows != p.m || c.cols != p.n)
    return fail(CUBLAS_STATUS_INVALID_VALUE, fn,
                "shape mismatch: op(A) %llux%llu, op(B) %llux%llu, C %llux%llu, D %llux%llu",
                (unsigned long long)am, (unsigned long long)p.k, (unsigned long long)bk, (unsigned long long)bn,
                (unsigned long long)c.rows, (unsigned long long)c.cols, (unsigned long long)dd.rows,
                (unsigned long long)dd.cols);
  const char* names = "ABCD";
  const LayoutState* ls[4] = {&a, &b, &c, &dd};
  for (int i = 0; i < 4; ++i) {
    const std::uint64_t need = ls[i]->rows > 0 ? ls[i]->rows : 1;
    if (ls[i]->ld < 0 || std::uint64_t(ls[i]->ld) < need)
      return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "matrix %c: ld %lld < rows %llu", names[i],
                  (long long)ls[i]->ld, (unsigned long long)ls[i]->rows);
  }

  switch (d.epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT: break;
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU_BIAS:
      p.bias_type = d.bias_type == -1 ? dd.type : d.bias_type;
      if (p.bias_type != dd.type)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "bias type %s must be the D type %s", type_name(p.bias_type),
                    type_name(dd.type));
      break;
    case CUBLASLT_EPILOGUE_BGRADB:
      p.bias_type = d.bias_type == -1 ? c.type : d.bias_type;
      if (p.bias_type != c.type)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "bias gradient type %s must be the C type %s",
                    type_name(p.bias_type), type_name(c.type));
      break;
    default:
      return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "epilogue %u not emulated", d.epilogue);
  }
  return CUBLAS_STATUS_SUCCESS;
}

float load_f32(std::int32_t t, const void* base, std::size_t i) {
  switch (t) {
    case CUDA_R_16F: return __half2float(static_cast<const __half*>(base)[i]);
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

void store_f32(std::int32_t t, void* base, std::size_t i, float v) {
  switch (t) {
    case CUDA_R_16F: static_cast<__half*>(base)[i] = __float2half_rn(v); break;
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v); break;
    default: static_cast<float*>(base)[i] = v; break;
  }
}

}  // namespace

extern "C" {

// ---- status strings (cublasGetStatusString is libcublas's; engine/error.hpp uses it) ----

const char* CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the requested functionality is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
  }
  return "unknown error";
}

const char* CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) { return cublasGetStatusName(status); }
const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) { return cublasGetStatusString(status); }

// ---- handle ----

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* lightHandle) {
  if (!lightHandle) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate", "lightHandle is NULL");
  auto* h = new cublasLtContext{kHandleMagic};
  add_live(h);
  *lightHandle = h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (!remove_live(lightHandle))
    return fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy", "handle %p was not created (or destroyed twice)",
                static_cast<void*>(lightHandle));
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- matrix layout ----

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
  if (!matLayout) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate", "matLayout is NULL");
  auto* l = new cublasLtMatrixLayoutOpaque_t;
  store_state(l, LayoutState{kLayoutMagic, std::int32_t(type), rows, cols, ld});
  add_live(l);
  *matLayout = l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  if (!remove_live(matLayout))
    return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutDestroy", "layout %p not live",
                static_cast<void*>(matLayout));
  std::memset(matLayout, 0, sizeof(*matLayout));
  delete matLayout;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- matmul descriptor ----

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc,
                                                     cublasComputeType_t computeType, cudaDataType_t scaleType) {
  if (!matmulDesc) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate", "matmulDesc is NULL");
  auto* d = new cublasLtMatmulDescOpaque_t;
  DescState s{};
  s.magic = kDescMagic;
  s.compute = std::int32_t(computeType);
  s.scale = std::int32_t(scaleType);
  s.pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  s.transa = CUBLAS_OP_N;
  s.transb = CUBLAS_OP_N;
  s.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  s.bias = nullptr;
  s.bias_batch_stride = 0;
  s.bias_type = -1;
  store_state(d, s);
  add_live(d);
  *matmulDesc = d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  if (!remove_live(matmulDesc))
    return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescDestroy", "descriptor %p not live",
                static_cast<void*>(matmulDesc));
  std::memset(matmulDesc, 0, sizeof(*matmulDesc));
  delete matmulDesc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                           cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                           size_t sizeInBytes) {
  static const char* fn = "cublasLtMatmulDescSetAttribute";
  DescState s;
  if (!get_desc(matmulDesc, s)) return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "descriptor not live");
  if (!buf) return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "buf is NULL (attribute %d)", int(attr));
  auto want = [&](std::size_t n) { return sizeInBytes == n; };
  auto bad_size = [&](std::size_t n) {
    return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "attribute %d: sizeInBytes %zu, expected %zu", int(attr),
                sizeInBytes, n);
  };
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      if (!want(4)) return bad_size(4);
      std::memcpy(&s.compute, buf, 4);
      break;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      if (!want(4)) return bad_size(4);
      std::memcpy(&s.scale, buf, 4);
      break;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      if (!want(4)) return bad_size(4);
      std::memcpy(&s.pointer_mode, buf, 4);
      break;
    case CUBLASLT_MATMUL_DESC_TRANSA:
      if (!want(4)) return bad_size(4);
      std::memcpy(&s.transa, buf, 4);
      break;
    case CUBLASLT_MATMUL_DESC_TRANSB:
      if (!want(4)) return bad_size(4);
      std::memcpy(&s.transb, buf, 4);
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      if (!want(4)) return bad_size(4);
      std::memcpy(&s.epilogue, buf, 4);
      break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      if (!want(sizeof(void*))) return bad_size(sizeof(void*));
      std::memcpy(&s.bias, buf, sizeof(void*));
      break;
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
      if (!want(8)) return bad_size(8);
      std::memcpy(&s.bias_batch_stride, buf, 8);
      break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      if (!want(4)) return bad_size(4);
      std::memcpy(&s.bias_type, buf, 4);
      break;
    default:
      return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "attribute %d is not emulated", int(attr));
  }
  store_state(matmulDesc, s);
  return CUBLAS_STATUS_SUCCESS;
}

// ---- heuristic preference ----

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (!pref) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate", "pref is NULL");
  auto* p = new cublasLtMatmulPreferenceOpaque_t;
  store_state(p, PrefState{kPrefMagic, 0, {256, 256, 256, 256}});
  add_live(p);
  *pref = p;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  if (!remove_live(pref))
    return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceDestroy", "preference %p not live",
                static_cast<void*>(pref));
  std::memset(pref, 0, sizeof(*pref));
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                 cublasLtMatmulPreferenceAttributes_t attr,
                                                                 const void* buf, size_t sizeInBytes) {
  static const char* fn = "cublasLtMatmulPreferenceSetAttribute";
  PrefState s;
  if (!get_pref(pref, s)) return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "preference not live");
  if (!buf) return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "buf is NULL (attribute %d)", int(attr));
  auto bad_size = [&](std::size_t n) {
    return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "attribute %d: sizeInBytes %zu, expected %zu", int(attr),
                sizeInBytes, n);
  };
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      if (sizeInBytes != 8) return bad_size(8);
      std::memcpy(&s.max_workspace, buf, 8);
      break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      if (sizeInBytes != 4) return bad_size(4);
      std::memcpy(&s.align[int(attr) - int(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES)], buf, 4);
      break;
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: {
      // Accepted only at values that do not filter out the emulator's single
      // algorithm (best fit search; no split-K reduction).
      if (sizeInBytes != 4) return bad_size(4);
      std::uint32_t v;
      std::memcpy(&v, buf, 4);
      if (attr == CUBLASLT_MATMUL_PREF_SEARCH_MODE && v != CUBLASLT_SEARCH_BEST_FIT)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "search mode %u not emulated", v);
      break;
    }
    default:
      return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "attribute %d is not emulated", int(attr));
  }
  store_state(pref, s);
  return CUBLAS_STATUS_SUCCESS;
}

// ---- heuristic ----

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount) {
  static const char* fn = "cublasLtMatmulAlgoGetHeuristic";
  if (!valid_handle(lightHandle)) return fail(CUBLAS_STATUS_NOT_INITIALIZED, fn, "handle not initialized");
  if (returnAlgoCount) *returnAlgoCount = 0;
  if (requestedAlgoCount <= 0)
    return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "requestedAlgoCount %d <= 0", requestedAlgoCount);
  if (!heuristicResultsArray || !returnAlgoCount)
    return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "NULL results array or returnAlgoCount");
  DescState d;
  LayoutState a, b, c, dd;
  PrefState pr;
  if (!get_desc(operationDesc, d)) return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "operationDesc not live");
  if (!get_layout(Adesc, a) || !get_layout(Bdesc, b) || !get_layout(Cdesc, c) || !get_layout(Ddesc, dd))
    return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "a matrix layout is NULL or not live");
  if (!get_pref(preference, pr)) return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "preference NULL or not live");
  Problem p;
  if (const cublasStatus_t st = validate(fn, d, a, b, c, dd, p); st != CUBLAS_STATUS_SUCCESS) return st;
  const std::int32_t types[4] = {a.type, b.type, c.type, dd.type};
  for (int i = 0; i < 4; ++i)
    if (pr.align[i] < elem_size(types[i]))
      return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "min alignment of %c (%u bytes) below its element size %zu",
                  "ABCD"[i], pr.align[i], elem_size(types[i]));

  AlgoState al{};
  al.magic = kAlgoMagic;
  al.compute = d.compute;
  al.scale = d.scale;
  for (int i = 0; i < 4; ++i) al.type[i] = types[i];
  al.transa = d.transa;
  al.transb = d.transb;
  al.epilogue = d.epilogue;
  for (int i = 0; i < 4; ++i) al.align[i] = pr.align[i];
  al.align[4] = pointer_alignment(d.bias);

  cublasLtMatmulHeuristicResult_t& r = heuristicResultsArray[0];
  std::memset(&r, 0, sizeof(r));
  store_state(&r.algo, al);
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- matmul ----

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                                           const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                                           const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                                           const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                                           cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                                           void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
  static const char* fn = "cublasLtMatmul";
  (void)workspace;
  (void)workspaceSizeInBytes;  // the emulated algorithm needs no workspace (heuristic reports 0)
  if (!valid_handle(lightHandle)) return fail(CUBLAS_STATUS_NOT_INITIALIZED, fn, "handle not initialized");
  DescState d;
  LayoutState a, b, c, dd;
  if (!get_desc(computeDesc, d)) return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "computeDesc NULL or not live");
  if (!get_layout(Adesc, a) || !get_layout(Bdesc, b) || !get_layout(Cdesc, c) || !get_layout(Ddesc, dd))
    return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "a matrix layout is NULL or not live");
  if (!alpha || !beta) return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "alpha or beta is NULL");
  Problem p;
  if (const cublasStatus_t st = validate(fn, d, a, b, c, dd, p); st != CUBLAS_STATUS_SUCCESS) return st;

  float alpha_f, beta_f;
  std::memcpy(&alpha_f, alpha, 4);
  std::memcpy(&beta_f, beta, 4);
  const bool read_c = beta_f != 0.0f;
  const bool has_mn = p.m > 0 && p.n > 0;
  if (has_mn && !D) return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "D is NULL");
  if (has_mn && p.k > 0 && (!A || !B)) return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "A or B is NULL");
  if (has_mn && read_c && !C) return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "C is NULL with beta != 0");
  if (C && C == D && c.ld != dd.ld)
    return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "in-place C == D with ldc %lld != ldd %lld", (long long)c.ld,
                (long long)dd.ld);
  const bool bias_in = uses_bias_input(d.epilogue);
  const bool bgrad = d.epilogue == CUBLASLT_EPILOGUE_BGRADB;
  if (bias_in && p.m > 0 && !d.bias)
    return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "epilogue %u needs BIAS_POINTER (NULL)", d.epilogue);
  if (bgrad && p.n > 0 && !d.bias)
    return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "BGRADB needs BIAS_POINTER for the gradient (NULL)");

  // Alignment: always element alignment; with an algo, what its heuristic was told.
  const void* ptrs[4] = {A, B, C, D};
  const std::int32_t types[4] = {a.type, b.type, c.type, dd.type};
  for (int i = 0; i < 4; ++i)
    if (ptrs[i] && !aligned_to(ptrs[i], elem_size(types[i])))
      return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "%c=%p not aligned to its element size", "ABCD"[i], ptrs[i]);
  if (algo) {
    const AlgoState al = load_state<AlgoState>(algo);
    if (al.magic != kAlgoMagic)
      return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "algo was not returned by cublasLtMatmulAlgoGetHeuristic");
    const bool same = al.compute == d.compute && al.scale == d.scale && al.type[0] == a.type &&
                      al.type[1] == b.type && al.type[2] == c.type && al.type[3] == dd.type &&
                      al.transa == d.transa && al.transb == d.transb && al.epilogue == d.epilogue;
    if (!same)
      return fail(CUBLAS_STATUS_INVALID_VALUE, fn,
                  "algo was obtained for another configuration (types/transposes/epilogue)");
    for (int i = 0; i < 4; ++i)
      if (ptrs[i] && !aligned_to(ptrs[i], al.align[i]))
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn,
                    "%c=%p is less aligned than the %u bytes the heuristic was told (MIN_ALIGNMENT_%c_BYTES)",
                    "ABCD"[i], ptrs[i], al.align[i], "ABCD"[i]);
    if ((bias_in || bgrad) && d.bias && !aligned_to(d.bias, al.align[4]))
      return fail(CUBLAS_STATUS_INVALID_VALUE, fn,
                  "bias pointer %p is less aligned than the %u bytes of the bias pointer the heuristic saw",
                  d.bias, al.align[4]);
  }
  if ((bias_in || bgrad) && d.bias && !aligned_to(d.bias, elem_size(p.bias_type)))
    return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "bias pointer %p not aligned to its element size", d.bias);

  // The product runs as stream work: now, or when a captured graph replays
  // (descriptor values and alpha/beta as they are at this call, like the library).
  auto work = [=]() {
    const std::size_t m = p.m, n = p.n, k = p.k;
    // op(A) as row-major m x k floats, op(B) as n rows of k floats (column j of op(B)).
    std::vector<float> opa(m * k), opb(n * k);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t q = 0; q < k; ++q)
        opa[i * k + q] = load_f32(a.type, A, p.ta ? q + i * std::size_t(a.ld) : i + q * std::size_t(a.ld));
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t q = 0; q < k; ++q)
        opb[j * k + q] = load_f32(b.type, B, p.tb ? j + q * std::size_t(b.ld) : q + j * std::size_t(b.ld));

    std::vector<float> out(m * n);
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t i = 0; i < m; ++i) {
        float acc = 0.0f;
        const float* ar = &opa[i * k];
        const float* bc = &opb[j * k];
        for (std::size_t q = 0; q < k; ++q) acc = std::fma(ar[q], bc[q], acc);
        float t = alpha_f * acc;
        if (read_c) t += beta_f * load_f32(c.type, C, i + j * std::size_t(c.ld));
        if (bias_in) t += load_f32(p.bias_type, d.bias, i);
        if (d.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS) t = t > 0.0f ? t : 0.0f;  // max(x, 0); NaN -> 0
        out[j * m + i] = t;
      }
    }
    // Bias gradient from op(B) (read before D is written, in case they alias).
    std::vector<float> grad;
    if (bgrad) {
      grad.assign(n, 0.0f);
      for (std::size_t j = 0; j < n; ++j) {
        float s = 0.0f;
        for (std::size_t q = 0; q < k; ++q) s += opb[j * k + q];
        grad[j] = s;
      }
    }
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t i = 0; i < m; ++i) store_f32(dd.type, D, i + j * std::size_t(dd.ld), out[j * m + i]);
    if (bgrad)
      for (std::size_t j = 0; j < n; ++j) store_f32(p.bias_type, const_cast<void*>(d.bias), j, grad[j]);
  };
  if (mf_emu::enqueue_host_work(stream, work, fn) != cudaSuccess)
    return fail(CUBLAS_STATUS_EXECUTION_FAILED, fn, "the stream refused the work (destroyed, or an illegal capture)");
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
