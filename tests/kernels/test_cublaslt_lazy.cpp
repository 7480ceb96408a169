// kernels/cublaslt_lazy.cpp: cuBLASLt is not loaded when the process starts,
// and is loaded (and its functions reached) on the first call. Runs in the
// normal build only (the emulated build links the emulator's cuBLASLt). The
// calls made need no GPU; a handle is created only where one is usable.
#include <doctest/doctest.h>

#include <cublasLt.h>

#include <fstream>
#include <string>

#include "engine/device.hpp"

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
  cublasLtMatmulDesc_t desc = nullptr;  // needs no device
  REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
  CHECK(cublaslt_mapped());
  const cublasLtPointerMode_t mode = CUBLASLT_POINTER_MODE_HOST;
  CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof mode) ==
        CUBLAS_STATUS_SUCCESS);
  CHECK(cublasLtMatmulDescDestroy(desc) == CUBLAS_STATUS_SUCCESS);
  CHECK(std::string(cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)) == "CUBLAS_STATUS_NOT_SUPPORTED");
  // A handle needs a GPU (without one cuBLASLt 13 answers NOT_INITIALIZED and
  // leaks 192 bytes of its own, which LeakSanitizer would report).
  if (!mf::gpu_available()) return;
  cublasLtHandle_t h = nullptr;
  const cublasStatus_t st = cublasLtCreate(&h);
  MESSAGE("cublasLtCreate: ", std::string(cublasGetStatusString(st)));
  REQUIRE(st == CUBLAS_STATUS_SUCCESS);
  CHECK(cublasLtDestroy(h) == CUBLAS_STATUS_SUCCESS);
}
