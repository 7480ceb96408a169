#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include "engine/device.hpp"
#include "engine/error.hpp"

using namespace mf;

TEST_CASE("a failing CUDA call names the call, the library and the location") {
  // Device 9999 exists nowhere; without a driver the call fails too.
  try {
    MF_CUDA_CHECK(cudaSetDevice(9999));
    FAIL("cudaSetDevice(9999) should fail");
  } catch (const CudaError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("CUDA call failed: cudaSetDevice(9999) returned") != std::string::npos);
    CHECK(e.where().find("tests/engine/test_errors.cpp:") == 0);
    CHECK(e.code() != 0);
  }
  (void)cudaGetLastError();
}

TEST_CASE("MF_CHECK formats its message and records where it was raised") {
  try {
    MF_CHECK(1 + 1 == 3, "expected {} but found {}", 3, 2);
    FAIL("MF_CHECK should throw");
  } catch (const Error& e) {
    CHECK(e.message() == "expected 3 but found 2");
    CHECK(std::string(e.what()).find("[tests/engine/test_errors.cpp:") != std::string::npos);
  }
}

TEST_CASE("no GPU is explained in a user's words, not as a CUDA error") {
  // No driver at all: the runtime says cudaErrorInsufficientDriver, which reads as "upgrade".
  CHECK(no_gpu_reason(cudaErrorInsufficientDriver, 0, 13000) == "no NVIDIA driver found");
  CHECK(no_gpu_reason(cudaErrorNoDevice, 0, 13000) == "no NVIDIA driver found");
  CHECK(no_gpu_reason(cudaErrorInsufficientDriver, 12040, 13000) ==
        "the NVIDIA driver supports CUDA up to 12.4, older than the CUDA 13.0 runtime melforge was built with: "
        "update the driver");
  CHECK(no_gpu_reason(cudaErrorNoDevice, 13000, 13000) == "no NVIDIA GPU found");
  CHECK(no_gpu_reason(cudaSuccess, 13000, 13000) == "no NVIDIA GPU found");
  CHECK(no_gpu_reason(cudaErrorDevicesUnavailable, 13000, 13000).find("cudaErrorDevicesUnavailable") == 0);
}

TEST_CASE("device queries never throw without a GPU, and bad device names are explained") {
  const GpuInfo& g = gpu_info();
#ifdef MELFORGE_NO_CUDA  // the CPU-only build: never a GPU, and why_none says how to get one
  CHECK(!built_with_cuda());
  CHECK(g.count == 0);
  CHECK(g.why_none.starts_with("built without CUDA: the CPU backend only (for the GPU, rebuild melforge"));
  CHECK_THROWS_WITH_AS(parse_device("cuda:0"), doctest::Contains("built without CUDA"), Error);
#else
  CHECK(built_with_cuda());
#endif
  if (g.count == 0) {
    CHECK(!g.why_none.empty());
    CHECK(parse_device("auto") == Device::cpu());
    CHECK_THROWS_WITH_AS(parse_device("cuda"), doctest::Contains("no GPU is usable"), Error);
  } else {
    CHECK(parse_device("auto") == Device::cuda(0));
  }
  CHECK(parse_device("cpu") == Device::cpu());
  CHECK_THROWS_WITH_AS(parse_device("tpu"), doctest::Contains("expected cpu, cuda, cuda:N or auto"), Error);
  CHECK_THROWS_WITH_AS(parse_device("cuda:x"), doctest::Contains("expected cpu, cuda, cuda:N or auto"), Error);
  CHECK(Device::cuda(1).str() == "cuda:1");
}
