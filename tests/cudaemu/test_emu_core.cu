// The CUDA emulator's own checks: kernels with barriers and shuffles compute
// what CUDA would; a divergent barrier, a warp collective with a missing lane
// and a deadlock abort with a report; a race shows up as a result that depends
// on the thread order; the runtime refuses what a capture forbids and copies
// in the wrong direction. Built only in the emulated build (tests.cmake).
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tests/cudaemu/emu_core.hpp"
#include "tests/cudaemu/emu_test_child.hpp"

namespace {

__global__ void block_sum(const float* x, float* out) {
  __shared__ float s[128];
  s[threadIdx.x] = x[blockIdx.x * 128 + threadIdx.x];
  __syncthreads();
  for (int k = 64; k >= 32; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x < 32) {
    float v = s[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
  }
}

__global__ void divergent_barrier(int* out) {
  if (threadIdx.x % 2 == 0) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

__global__ void partial_warp_shuffle(int* out) {
  int v = int(threadIdx.x);
  if (threadIdx.x < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);  // lanes 16..31 never arrive
  out[threadIdx.x] = v;
}

// Missing __syncthreads between the write and the read of a neighbour's slot.
__global__ void racy_rotate(int* out) {
  __shared__ int s[64];
  s[threadIdx.x] = int(threadIdx.x) + 1000 * int(blockIdx.x) + 1;
  out[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}

__global__ void fixed_rotate(int* out) {
  __shared__ int s[64];
  s[threadIdx.x] = int(threadIdx.x) + 1000 * int(blockIdx.x) + 1;
  __syncthreads();
  out[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}

__global__ void add_one(int* p, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) p[i] += 1;
}

using mf_emu_test::in_child;

std::vector<int> run_rotate(bool racy, mf_emu::Schedule sch) {
  mf_emu::set_schedule(sch);
  int* d = nullptr;
  REQUIRE(cudaMalloc(&d, 64 * sizeof(int)) == cudaSuccess);
  if (racy) racy_rotate<<<1, 64>>>(d);
  else fixed_rotate<<<1, 64>>>(d);
  std::vector<int> h(64);
  REQUIRE(cudaMemcpy(h.data(), d, 64 * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
  cudaFree(d);
  mf_emu::set_schedule(mf_emu::Schedule::forward);
  return h;
}

}  // namespace

TEST_CASE("emulated kernels: barriers and shuffles compute a block sum") {
  const int blocks = 3;
  std::vector<float> h(std::size_t(blocks) * 128);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = float(i % 17) - 3.f;
  float *x = nullptr, *out = nullptr;
  REQUIRE(cudaMalloc(&x, h.size() * 4) == cudaSuccess);
  REQUIRE(cudaMalloc(&out, blocks * 4) == cudaSuccess);
  REQUIRE(cudaMemcpy(x, h.data(), h.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  block_sum<<<blocks, 128>>>(x, out);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  std::vector<float> r(blocks);
  REQUIRE(cudaMemcpy(r.data(), out, blocks * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  for (int b = 0; b < blocks; ++b) {
    float want = 0;
    for (int i = 0; i < 128; ++i) want += h[std::size_t(b * 128 + i)];
    CHECK(r[std::size_t(b)] == want);
  }
  cudaFree(x);
  cudaFree(out);
}

TEST_CASE("emulated kernels: a divergent barrier and a partial-warp shuffle abort with a report") {
  const auto [died1, err1] = in_child([] {
    int* d = nullptr;
    cudaMalloc(&d, 64 * 4);
    divergent_barrier<<<1, 64>>>(d);
  });
  CHECK(died1);
  CHECK(err1.find("divergent barrier") != std::string::npos);
  const auto [died2, err2] = in_child([] {
    int* d = nullptr;
    cudaMalloc(&d, 32 * 4);
    partial_warp_shuffle<<<1, 32>>>(d);
  });
  CHECK(died2);
  // Forward order: a lane exits while others wait; reverse: the shuffle names
  // lanes that have already exited. Either way the report says so.
  CHECK((err2.find("exited") != std::string::npos || err2.find("deadlock") != std::string::npos));
}

TEST_CASE("emulated kernels: a missing __syncthreads shows up as a result that depends on the thread order") {
  const auto fwd = run_rotate(true, mf_emu::Schedule::forward);
  const auto rev = run_rotate(true, mf_emu::Schedule::reverse);
  CHECK(fwd != rev);
  const auto ffwd = run_rotate(false, mf_emu::Schedule::forward);
  const auto frev = run_rotate(false, mf_emu::Schedule::reverse);
  CHECK(ffwd == frev);
  for (int i = 0; i < 64; ++i) CHECK(ffwd[std::size_t(i)] == (i + 1) % 64 + 1);
}

TEST_CASE("emulated runtime: launch limits, copy directions, capture rules and graph replay") {
  int* d = nullptr;
  REQUIRE(cudaMalloc(&d, 100 * sizeof(int)) == cudaSuccess);
  REQUIRE(cudaMemset(d, 0, 100 * sizeof(int)) == cudaSuccess);
  add_one<<<1, 2048>>>(d, 100);  // more than 1024 threads per block
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  CHECK(cudaGetLastError() == cudaSuccess);
  std::vector<int> h(100, 7);
  CHECK(cudaMemcpy(d, h.data(), 100 * sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess);  // wrong direction
  CHECK(cudaMemcpy(d, h.data(), 101 * sizeof(int), cudaMemcpyHostToDevice) != cudaSuccess);  // overruns
  (void)cudaGetLastError();

  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  add_one<<<1, 128, 0, s>>>(d, 100);
  add_one<<<1, 128, 0, s>>>(d, 100);
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  cudaGraphExec_t ex = nullptr;
  REQUIRE(cudaGraphInstantiate(&ex, g, 0) == cudaSuccess);
  REQUIRE(cudaMemcpy(h.data(), d, 100 * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(h[0] == 0);  // captured work does not run at capture
  REQUIRE(cudaGraphLaunch(ex, s) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(ex, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaMemcpy(h.data(), d, 100 * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(h[0] == 4);
  CHECK(h[99] == 4);

  // A synchronous copy or a sync of the capturing stream is refused and
  // invalidates the capture, as on a GPU.
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CHECK(cudaMemcpy(h.data(), d, 4, cudaMemcpyDeviceToHost) == cudaErrorStreamCaptureUnsupported);
  cudaGraph_t g2 = nullptr;
  CHECK(cudaStreamEndCapture(s, &g2) == cudaErrorStreamCaptureInvalidated);
  CHECK(g2 == nullptr);
  (void)cudaGetLastError();

  // Memory a graph allocates must be freed before the graph runs again.
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  void* tmp = nullptr;
  REQUIRE(cudaMallocAsync(&tmp, 64, s) == cudaSuccess);
  cudaGraph_t g3 = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &g3) == cudaSuccess);
  cudaGraphExec_t ex3 = nullptr;
  REQUIRE(cudaGraphInstantiate(&ex3, g3, 0) == cudaSuccess);
  CHECK(cudaGraphLaunch(ex3, s) == cudaSuccess);
  CHECK(cudaGraphLaunch(ex3, s) != cudaSuccess);  // the first launch's block is still live
  (void)cudaGetLastError();
  CHECK(cudaFreeAsync(tmp, s) == cudaSuccess);
  CHECK(cudaGraphLaunch(ex3, s) == cudaSuccess);

  cudaGraphExecDestroy(ex);
  cudaGraphDestroy(g);
  cudaGraphExecDestroy(ex3);
  cudaGraphDestroy(g3);
  cudaStreamDestroy(s);
  cudaFree(d);
}
