// kernels/cublaslt_lazy.cpp: cuBLASLt is not loaded when the process starts,
// and is loaded (and its functions reached) on the first call. Runs in the
// normal build only (the emulated build links the emulator's cuBLASLt). On a
// machine without a GPU the first call returns an error status, which is what
// a real cuBLASLt says there; the test checks the call went through.
#include <doctest/doctest.h>

#include <cublasLt.h>

#include <fstream>
#include <string>

namespace {
bool cublaslt_mapped() {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find("libcublasLt.so") != std::string::npos) return true;
  return false;
}
}  // namespace

TEST_CASE("cuBLASLt is loaded on first use, not at start, and its functions are reached") {
  REQUIRE_FALSE(cublaslt_mapped());
  cublasLtHandle_t h = nullptr;
  const cublasStatus_t st = cublasLtCreate(&h);
  CHECK(cublaslt_mapped());
  const std::string status = cublasGetStatusString(st);
  MESSAGE("cublasLtCreate: ", status);
  CHECK(status.rfind("CUBLAS_STATUS_", 0) == 0);
  if (st == CUBLAS_STATUS_SUCCESS) {
    CHECK(h != nullptr);
    CHECK(cublasLtDestroy(h) == CUBLAS_STATUS_SUCCESS);
  }
  cublasLtMatmulDesc_t desc = nullptr;  // needs no device
  REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
  const cublasLtPointerMode_t mode = CUBLASLT_POINTER_MODE_HOST;
  CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof mode) ==
        CUBLAS_STATUS_SUCCESS);
  CHECK(cublasLtMatmulDescDestroy(desc) == CUBLAS_STATUS_SUCCESS);
  CHECK(std::string(cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)) == "CUBLAS_STATUS_NOT_SUPPORTED");
}
