// cuBLASLt, and cuBLAS's status strings, loaded on first use (dlopen) instead
// of at process start. Only the GPU dense layers call cuBLASLt, yet linking it
// made every start of a melforge binary load libcublasLt and run its static
// initialisers (which probe for the CUDA driver): 60-90 ms measured on a
// machine without a GPU, most of a small CPU command's time (docs/decisions.md).
// The non-emulated build links this file instead of libcublasLt/libcublas
// (CMakeLists.txt: melforge_cublas); the emulated build links the emulator's
// cuBLASLt (tests/cudaemu). Each function below has the header's signature and
// forwards to the library's own, resolved once; a library that cannot be
// loaded is an mf::Error naming it and dlerror()'s reason.
#include <cublasLt.h>
#include <cublas_api.h>
#include <dlfcn.h>

#include <string>

#include "engine/error.hpp"

namespace {

// The library's handle, opened once (thread-safe static initialisation).
void* open_library(const std::string& soname) {
  void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = dlerror();
    MF_THROW("cannot load {} (the GPU dense layers need it): {}", soname, why ? why : "unknown reason");
  }
  return h;
}

void* cublaslt_library() {
  static void* h = open_library("libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
  return h;
}

template <class Fn>
Fn resolve(void* library, const char* name) {
  void* f = dlsym(library, name);
  MF_CHECK(f != nullptr, "{} not found in cuBLASLt {}: {}", name, CUBLAS_VER_MAJOR, dlerror());
  return reinterpret_cast<Fn>(f);
}

#define MF_LT(name) static const auto real = resolve<decltype(&name)>(cublaslt_library(), #name)

}  // namespace

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  MF_LT(cublasLtCreate);
  return real(handle);
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t handle) {
  MF_LT(cublasLtDestroy);
  return real(handle);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                           const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                                           cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                                           cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                           cudaStream_t stream) {
  MF_LT(cublasLtMatmul);
  return real(handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace, workspace_bytes,
              stream);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                           cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                           cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                           cublasLtMatmulPreference_t preference, int requested,
                                                           cublasLtMatmulHeuristicResult_t results[], int* returned) {
  MF_LT(cublasLtMatmulAlgoGetHeuristic);
  return real(handle, desc, Adesc, Bdesc, Cdesc, Ddesc, preference, requested, results, returned);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  MF_LT(cublasLtMatmulDescCreate);
  return real(desc, compute, scale);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  MF_LT(cublasLtMatmulDescDestroy);
  return real(desc);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                           size_t bytes) {
  MF_LT(cublasLtMatmulDescSetAttribute);
  return real(desc, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  MF_LT(cublasLtMatmulPreferenceCreate);
  return real(pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  MF_LT(cublasLtMatmulPreferenceDestroy);
  return real(pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                 cublasLtMatmulPreferenceAttributes_t attr,
                                                                 const void* buf, size_t bytes) {
  MF_LT(cublasLtMatmulPreferenceSetAttribute);
  return real(pref, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
  MF_LT(cublasLtMatrixLayoutCreate);
  return real(layout, type, rows, cols, ld);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  MF_LT(cublasLtMatrixLayoutDestroy);
  return real(layout);
}

// MF_CUBLAS_CHECK's message (engine/error.hpp). Called on an error path only;
// the names of cuBLAS's status codes, so messages need no second library.
const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
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
    default: return "an unknown cuBLAS status";
  }
}
