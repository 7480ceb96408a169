// The CUDA emulator's ldmatrix and cp.async (emu_async.hpp), the dynamic
// shared memory opt-in and the occupancy calls (emu_runtime.cpp). Built only
// in the emulated build (tests.cmake).
//
// The expected ldmatrix fragments are computed on the host the other way
// round from the emulator: the emulator gathers, for each lane, the two
// elements it receives; here each element (r, c) of each 8x8 matrix is
// scattered to the lane and half the PTX ISA's ldmatrix figure assigns it
// ("Warp Level Matrix Load Instruction: ldmatrix": a row is spread over four
// consecutive threads, two elements each, lower column in the lower half;
// .trans delivers the transposed matrix the same way).
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/mma.cuh"
#include "tests/cudaemu/emu_async.hpp"
#include "tests/cudaemu/emu_test_child.hpp"

namespace {

// ---- ldmatrix -------------------------------------------------------------

// 32 rows of 24 b16 elements (48 bytes: 16-byte aligned rows, not adjacent);
// storage row s, column c holds value(s, c).
constexpr int kRows = 32, kStride = 24;
std::uint16_t value(int s, int c) { return std::uint16_t(0x1000 + s * 64 + c * 3 + 1); }
// Row r of matrix i lives in storage row (5 * (8i + r) + 3) % 32: scattered, so
// a mix-up of which lane's address feeds which row shows.
int storage_row(int i, int r) { return (5 * (8 * i + r) + 3) % kRows; }

template <int Count, bool Trans>
__global__ void ldmatrix_kernel(std::uint32_t* out) {
  __shared__ __align__(16) std::uint16_t tile[kRows * kStride];
  const int lane = int(threadIdx.x);
  for (int s = 0; s < kRows; ++s)
    if (s % 32 == lane)
      for (int c = 0; c < kStride; ++c) tile[s * kStride + c] = value(s, c);
  __syncthreads();
  // Lanes 8i..8i+7 give rows 0..7 of matrix i; unused lanes give a junk
  // (unaligned) address, which the ISA says is ignored for sm_80+.
  const void* addr = lane < 8 * Count ? static_cast<const void*>(&tile[storage_row(lane / 8, lane % 8) * kStride])
                                      : reinterpret_cast<const void*>(std::uintptr_t(1));
  std::uint32_t r[4] = {0, 0, 0, 0};
  mf_emu::ldmatrix(Count, Trans, addr, r, __FILE__, __LINE__);
  for (int i = 0; i < 4; ++i) out[lane * 4 + i] = r[i];
}

template <int Count, bool Trans>
void check_ldmatrix() {
  std::uint32_t* d = nullptr;
  REQUIRE(cudaMalloc(&d, 32 * 4 * sizeof(std::uint32_t)) == cudaSuccess);
  ldmatrix_kernel<Count, Trans><<<1, 32>>>(d);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  std::vector<std::uint32_t> got(32 * 4);
  REQUIRE(cudaMemcpy(got.data(), d, got.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  cudaFree(d);

  std::vector<std::uint32_t> want(32 * 4, 0);
  for (int i = 0; i < Count; ++i) {
    // The matrix as delivered: M (rows from memory) or its transpose.
    auto delivered = [&](int r, int c) {
      const int mr = Trans ? c : r, mc = Trans ? r : c;
      return value(storage_row(i, mr), mc);
    };
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 8; ++c) {
        const int lane = 4 * r + c / 2;  // four threads per row, two elements each
        const int shift = (c % 2) * 16;  // lower column in the lower half
        want[std::size_t(lane * 4 + i)] |= std::uint32_t(delivered(r, c)) << shift;
      }
  }
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      INFO("x" << Count << (Trans ? ".trans" : "") << " lane " << lane << " register " << i);
      CHECK(got[std::size_t(lane * 4 + i)] == want[std::size_t(lane * 4 + i)]);
    }
}

__global__ void ldmatrix_misaligned(std::uint32_t* out) {
  __shared__ __align__(16) std::uint16_t tile[8 * 16];
  const int lane = int(threadIdx.x);
  const int off = lane == 3 ? 8 : 0;  // lane 3's row starts 8 elements (16 bytes) + 4 bytes in
  const void* addr = reinterpret_cast<const unsigned char*>(&tile[(lane % 8) * 16 + off]) + (lane == 3 ? 4 : 0);
  std::uint32_t r[1];
  mf_emu::ldmatrix(1, false, addr, r, __FILE__, __LINE__);
  out[lane] = r[0];
}

// The same fault through the kernels' wrapper (kernels/mma.cuh, whose PTX the
// emulated build replaces with include/kernels/mma_ptx.cuh): the report must
// name this file's line, where the kernel calls the wrapper.
__global__ void ldmatrix_misaligned_via_wrapper(std::uint32_t* out) {
  __shared__ __align__(16) std::uint16_t tile[8 * 16];
  const int lane = int(threadIdx.x);
  const void* addr = reinterpret_cast<const unsigned char*>(&tile[(lane % 8) * 16]) + (lane == 3 ? 4 : 0);
  std::uint32_t r[2];
  mf::kernels::mma::ldmatrix_x2<false>(r, addr);
  out[lane] = r[0];
}

__global__ void ldmatrix_half_warp(std::uint32_t* out) {
  __shared__ __align__(16) std::uint16_t tile[8 * 8];
  const int lane = int(threadIdx.x);
  std::uint32_t r[1] = {0};
  if (lane < 16) mf_emu::ldmatrix(1, false, &tile[(lane % 8) * 8], r, __FILE__, __LINE__);  // lanes 16..31 skip it
  out[lane] = r[0];
}

__global__ void ldmatrix_small_block(std::uint32_t* out) {  // launched with 16 threads: a warp of 16 lanes
  __shared__ __align__(16) std::uint16_t tile[8 * 8];
  const int lane = int(threadIdx.x);
  std::uint32_t r[1] = {0};
  mf_emu::ldmatrix(1, false, &tile[(lane % 8) * 8], r, __FILE__, __LINE__);
  out[lane] = r[0];
}

// ---- cp.async -------------------------------------------------------------

// Thread t copies cp bytes (4, 8 or 16) from src + t*cp with src-size
// (t % (cp/4 + 1)) * 4, so every src-size 0..cp occurs; out gets the shared
// bytes after the wait and a barrier.
template <int Cp>
__global__ void cp_async_copy(const unsigned char* src, unsigned char* out) {
  __shared__ __align__(16) unsigned char s[32 * 16];
  const int t = int(threadIdx.x);
  const int src_size = (t % (Cp / 4 + 1)) * 4;
  mf_emu::cp_async(&s[t * Cp], src + t * Cp, Cp, src_size, __FILE__, __LINE__);
  mf_emu::cp_async_commit_group(__FILE__, __LINE__);
  mf_emu::cp_async_wait_group(0, __FILE__, __LINE__);
  __syncthreads();
  for (int k = 0; k < Cp; ++k) out[t * Cp + k] = s[((t + 1) % 32) * Cp + k];  // a neighbour's copy: needs the barrier
}

template <int Cp>
void check_cp_async_copy() {
  std::vector<unsigned char> h(32 * 16);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = static_cast<unsigned char>(i * 7 + 1);
  unsigned char *src = nullptr, *out = nullptr;
  REQUIRE(cudaMalloc(&src, 32 * Cp) == cudaSuccess);
  REQUIRE(cudaMalloc(&out, 32 * Cp) == cudaSuccess);
  REQUIRE(cudaMemcpy(src, h.data(), 32 * Cp, cudaMemcpyHostToDevice) == cudaSuccess);
  cp_async_copy<Cp><<<1, 32>>>(src, out);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  std::vector<unsigned char> got(32 * Cp);
  REQUIRE(cudaMemcpy(got.data(), out, got.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  for (int t = 0; t < 32; ++t) {
    const int from = (t + 1) % 32, src_size = (from % (Cp / 4 + 1)) * 4;
    for (int k = 0; k < Cp; ++k) {
      INFO("cp-size " << Cp << " thread " << from << " byte " << k << " src-size " << src_size);
      CHECK(int(got[std::size_t(t * Cp + k)]) == (k < src_size ? int(h[std::size_t(from * Cp + k)]) : 0));
    }
  }
  cudaFree(src);
  cudaFree(out);
}

// out[0] = destination before the wait (poison), out[1] after the wait.
__global__ void cp_async_read_early(const float* src, float* out) {
  __shared__ __align__(16) float s[4];
  mf_emu::cp_async(s, src, 16, 16, __FILE__, __LINE__);
  mf_emu::cp_async_commit_group(__FILE__, __LINE__);
  out[0] = s[1];
  mf_emu::cp_async_wait_group(0, __FILE__, __LINE__);
  out[1] = s[1];
}

// Three groups (one 4-byte copy each, into s[0], s[1], s[2]); wait_group 2, 1,
// 0 in turn, recording all three after each; then a copy that is never
// committed: wait_group 0 does not wait for it.
__global__ void cp_async_groups(const float* src, float* out) {
  __shared__ __align__(16) float s[4];
  for (int g = 0; g < 3; ++g) {
    mf_emu::cp_async(&s[g], &src[g], 4, 4, __FILE__, __LINE__);
    mf_emu::cp_async_commit_group(__FILE__, __LINE__);
  }
  mf_emu::cp_async_commit_group(__FILE__, __LINE__);  // an empty group: trivially complete, but counts
  for (int n = 3; n >= 0; --n) {
    mf_emu::cp_async_wait_group(n, __FILE__, __LINE__);
    for (int k = 0; k < 3; ++k) out[(3 - n) * 3 + k] = s[k];
  }
  mf_emu::cp_async(&s[3], &src[3], 4, 4, __FILE__, __LINE__);  // not committed
  mf_emu::cp_async_wait_group(0, __FILE__, __LINE__);
  out[12] = s[3];
}

// Thread 0 copies and exits without waiting; thread 1 reads the destination
// after a barrier (which thread 0 never reaches): the copy has not landed.
__global__ void cp_async_exit_pending(const float* src, float* out) {
  __shared__ __align__(16) float s[4];
  if (threadIdx.x == 0) {
    mf_emu::cp_async(s, src, 16, 16, __FILE__, __LINE__);
    mf_emu::cp_async_commit_group(__FILE__, __LINE__);
    return;
  }
  __syncthreads();
  out[0] = s[0];
}

__global__ void cp_async_misaligned_dst(const float* src) {
  __shared__ __align__(16) float s[8];
  mf_emu::cp_async(&s[2], src, 16, 16, __FILE__, __LINE__);  // 8 bytes into a 16-byte aligned array
  mf_emu::cp_async_commit_group(__FILE__, __LINE__);
  mf_emu::cp_async_wait_group(0, __FILE__, __LINE__);
}

__global__ void cp_async_src(const unsigned char* src, int src_size) {
  __shared__ __align__(16) unsigned char s[16];
  mf_emu::cp_async(s, src, 16, src_size, __FILE__, __LINE__);
  mf_emu::cp_async_commit_group(__FILE__, __LINE__);
  mf_emu::cp_async_wait_group(0, __FILE__, __LINE__);
}

__global__ void cp_async_into_dynamic(const float* src, int offset_bytes) {
  extern __shared__ unsigned char dyn[];
  mf_emu::cp_async(dyn + offset_bytes, src, 16, 16, __FILE__, __LINE__);
  mf_emu::cp_async_wait_group(0, __FILE__, __LINE__);
}

// ---- dynamic shared memory opt-in ------------------------------------------

// Every thread writes its slice of the whole dynamic buffer, then thread 0
// checks the last byte another thread wrote.
__global__ void big_smem(int bytes, int* out) {
  extern __shared__ unsigned char dyn[];
  for (int i = int(threadIdx.x); i < bytes; i += int(blockDim.x)) dyn[i] = static_cast<unsigned char>(i % 251);
  __syncthreads();
  if (threadIdx.x == 0) out[0] = dyn[bytes - 1];
}

template <class T>
__global__ void big_smem_t(int bytes, T* out) {
  extern __shared__ unsigned char dyn[];
  if (threadIdx.x == 0) {
    dyn[bytes - 1] = 5;
    out[0] = T(dyn[bytes - 1]);
  }
}

template <class T>
__global__ void deduced_kernel(T* out, T v) {  // launched without naming T: no address
  out[threadIdx.x] = v;
}

using mf_emu_test::in_child;

bool has(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

}  // namespace

TEST_CASE("emulated ldmatrix: x1, x2, x4, with and without .trans, match the ISA's fragment layout") {
  check_ldmatrix<1, false>();
  check_ldmatrix<2, false>();
  check_ldmatrix<4, false>();
  check_ldmatrix<1, true>();
  check_ldmatrix<2, true>();
  check_ldmatrix<4, true>();
}

TEST_CASE("emulated ldmatrix: misaligned rows (also via kernels/mma.cuh) and a partial warp abort with a report") {
  const auto [died1, err1] = in_child([] {
    std::uint32_t* d = nullptr;
    cudaMalloc(&d, 32 * 4);
    ldmatrix_misaligned<<<1, 32>>>(d);
  });
  CHECK(died1);
  CHECK(has(err1, "not 16-byte aligned"));
  CHECK(has(err1, "thread (3,0,0)"));
  CHECK(has(err1, "test_emu_async.cu:"));
  const auto [died_w, err_w] = in_child([] {
    std::uint32_t* d = nullptr;
    cudaMalloc(&d, 32 * 4);
    ldmatrix_misaligned_via_wrapper<<<1, 32>>>(d);
  });
  CHECK(died_w);
  CHECK(has(err_w, "not 16-byte aligned"));
  CHECK(has(err_w, "test_emu_async.cu:"));  // the caller's line, not the wrapper's
  CHECK(!has(err_w, "mma_ptx.cuh"));
  const auto [died2, err2] = in_child([] {
    std::uint32_t* d = nullptr;
    cudaMalloc(&d, 32 * 4);
    ldmatrix_half_warp<<<1, 32>>>(d);
  });
  CHECK(died2);
  CHECK((has(err2, "exited") || has(err2, "deadlock")));
  const auto [died3, err3] = in_child([] {
    std::uint32_t* d = nullptr;
    cudaMalloc(&d, 32 * 4);
    ldmatrix_small_block<<<1, 16>>>(d);
  });
  CHECK(died3);
  CHECK(has(err3, "do not exist"));
}

TEST_CASE("emulated cp.async: copies src-size bytes and zero-fills the rest, for cp-size 4, 8 and 16") {
  check_cp_async_copy<4>();
  check_cp_async_copy<8>();
  check_cp_async_copy<16>();
}

TEST_CASE("emulated cp.async: the destination reads as NaN until the wait; wait_group n leaves the newest n groups") {
  const float h[4] = {1.5f, 2.5f, 3.5f, 4.5f};
  float *src = nullptr, *out = nullptr;
  REQUIRE(cudaMalloc(&src, sizeof h) == cudaSuccess);
  REQUIRE(cudaMalloc(&out, 13 * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemcpy(src, h, sizeof h, cudaMemcpyHostToDevice) == cudaSuccess);

  cp_async_read_early<<<1, 1>>>(src, out);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  float r[13];
  REQUIRE(cudaMemcpy(r, out, 2 * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(std::isnan(r[0]));
  CHECK(r[1] == 2.5f);

  cp_async_groups<<<1, 1>>>(src, out);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  REQUIRE(cudaMemcpy(r, out, sizeof r, cudaMemcpyDeviceToHost) == cudaSuccess);
  // Committed: g0, g1, g2, then an empty group E. wait 3: at most the newest
  // three (g1, g2, E) pending, so only g0 is complete.
  CHECK(r[0] == 1.5f);
  CHECK(std::isnan(r[1]));
  CHECK(std::isnan(r[2]));
  // wait 2: g0, g1 complete; g2 and the empty group pending.
  CHECK(r[3] == 1.5f);
  CHECK(r[4] == 2.5f);
  CHECK(std::isnan(r[5]));
  // wait 1: only the empty group may be pending.
  CHECK(r[6] == 1.5f);
  CHECK(r[7] == 2.5f);
  CHECK(r[8] == 3.5f);
  // wait 0: all.
  CHECK(r[9] == 1.5f);
  CHECK(r[10] == 2.5f);
  CHECK(r[11] == 3.5f);
  // A copy never committed is not waited for.
  CHECK(std::isnan(r[12]));

  cp_async_exit_pending<<<1, 2>>>(src, out);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  REQUIRE(cudaMemcpy(r, out, sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(std::isnan(r[0]));
  cudaFree(src);
  cudaFree(out);
}

TEST_CASE("emulated cp.async: misaligned, out-of-range and past-the-shared-memory copies abort with a report") {
  const auto [died1, err1] = in_child([] {
    float* src = nullptr;
    cudaMalloc(&src, 64);
    cp_async_misaligned_dst<<<1, 1>>>(src);
  });
  CHECK(died1);
  CHECK(has(err1, "destination"));
  CHECK(has(err1, "not aligned to cp-size 16"));
  CHECK(has(err1, "test_emu_async.cu:"));

  // 20-byte source: 16 bytes at offset 16 overrun it; 4 do not; 0 read nothing.
  const auto [died2, err2] = in_child([] {
    unsigned char* src = nullptr;
    cudaMalloc(&src, 20);
    cp_async_src<<<1, 1>>>(src + 16, 16);
  });
  CHECK(died2);
  CHECK(has(err2, "overrun an allocation of 20 bytes"));
  const auto [died3, err3] = in_child([] {
    unsigned char* src = nullptr;
    cudaMalloc(&src, 20);
    cp_async_src<<<1, 1>>>(src + 16, 4);
    cp_async_src<<<1, 1>>>(src + 32, 0);
  });
  CHECK(!died3);
  const auto [died4, err4] = in_child([] {
    unsigned char* src = nullptr;
    cudaMalloc(&src, 20);
    cp_async_src<<<1, 1>>>(src + 32, 16);  // past the end, in the allocator's padding
  });
  CHECK(died4);
  CHECK(has(err4, "past the end of an allocation"));

  // Dynamic shared memory: 64 bytes asked for; a copy to offset 48 fits, to 64 does not.
  const auto [died5, err5] = in_child([] {
    float* src = nullptr;
    cudaMalloc(&src, 64);
    cp_async_into_dynamic<<<1, 1, 64>>>(src, 48);
    cp_async_into_dynamic<<<1, 1, 64>>>(src, 64);
  });
  CHECK(died5);
  CHECK(has(err5, "past the end of the dynamic shared memory (64 bytes"));
}

TEST_CASE("emulated runtime: more than 48 KiB of dynamic shared memory needs the kernel's opt-in") {
  int* out = nullptr;
  REQUIRE(cudaMalloc(&out, 32 * sizeof(int)) == cudaSuccess);
  const int bytes = 100 * 1024;
  (void)cudaGetLastError();
  big_smem<<<1, 128, bytes>>>(bytes, out);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(cudaFuncSetAttribute(big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) == cudaSuccess);
  REQUIRE(cudaMemset(out, 0, sizeof(int)) == cudaSuccess);
  big_smem<<<1, 128, bytes>>>(bytes, out);
  CHECK(cudaGetLastError() == cudaSuccess);
  int h = -1;
  REQUIRE(cudaMemcpy(&h, out, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(h == (bytes - 1) % 251);
  big_smem<<<1, 128, bytes + 16>>>(bytes, out);  // more than the opt-in
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  big_smem<<<1, 128, 48 * 1024>>>(48 * 1024, out);  // within the default: always fine
  CHECK(cudaGetLastError() == cudaSuccess);

  // The device's opt-in ceiling (cc 9.0: 227 KiB).
  CHECK(cudaFuncSetAttribute(big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024) == cudaSuccess);
  CHECK(cudaFuncSetAttribute(big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024 + 1) ==
        cudaErrorInvalidValue);
  (void)cudaGetLastError();

  // Per template instance: the opt-in of big_smem_t<int> does not cover big_smem_t<float>.
  int* oi = out;
  float* of = nullptr;
  REQUIRE(cudaMalloc(&of, sizeof(float)) == cudaSuccess);
  CHECK(cudaFuncSetAttribute(big_smem_t<int>, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024) == cudaSuccess);
  big_smem_t<int><<<1, 32, 64 * 1024>>>(64 * 1024, oi);
  CHECK(cudaGetLastError() == cudaSuccess);
  REQUIRE(cudaMemcpy(&h, oi, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(h == 5);
  big_smem_t<float><<<1, 32, 64 * 1024>>>(64 * 1024, of);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);

  // A launch whose template arguments are deduced still runs (no address:
  // the 48 KiB default applies).
  deduced_kernel<<<1, 32>>>(oi, 7);
  CHECK(cudaGetLastError() == cudaSuccess);
  REQUIRE(cudaMemcpy(&h, oi + 31, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(h == 7);
  deduced_kernel<<<1, 32, 64 * 1024>>>(oi, 7);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  cudaFree(of);
  cudaFree(out);
}

TEST_CASE("emulated runtime: per-SM attributes and the occupancy model (cc 9.0 and 8.0)") {
  int v = 0;
  CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0) == cudaSuccess);
  CHECK(v == 228 * 1024);
  CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0) == cudaSuccess);
  CHECK(v == 227 * 1024);
  CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxBlocksPerMultiprocessor, 0) == cudaSuccess);
  CHECK(v == 32);
  CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxThreadsPerMultiProcessor, 0) == cudaSuccess);
  CHECK(v == 2048);
  CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrReservedSharedMemoryPerBlock, 0) == cudaSuccess);
  CHECK(v == 1024);

  int n = -1;
  // Threads: 2048 / 256 = 8 blocks.
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, deduced_kernel<int>, 256, 0) == cudaSuccess);
  CHECK(n == 8);
  // Blocks per SM: 32 blocks of 32 threads (not 64).
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, deduced_kernel<int>, 32, 0) == cudaSuccess);
  CHECK(n == 32);
  // Warps round up: 65 threads are 3 warps, 64 / 3 = 21 blocks.
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, deduced_kernel<int>, 65, 0) == cudaSuccess);
  CHECK(n == 21);
  // Shared memory: 228 KiB / (40 KiB + 1 KiB) = 5.
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, deduced_kernel<int>, 128, 40 * 1024) == cudaSuccess);
  CHECK(n == 5);
  // Over 48 KiB without an opt-in: cannot launch, 0; with big_smem's opt-in
  // (227 KiB, set above): 228 / (100 + 1) = 2.
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, deduced_kernel<int>, 128, 100 * 1024) == cudaSuccess);
  CHECK(n == 0);
  CHECK(cudaFuncSetAttribute(big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024) == cudaSuccess);
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, big_smem, 128, 100 * 1024) == cudaSuccess);
  CHECK(n == 2);
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, big_smem, 2048, 0) == cudaSuccess);
  CHECK(n == 0);

  // cc 8.0 (MELFORGE_EMU_CC): 164 KiB per SM, 163 KiB opt-in.
  setenv("MELFORGE_EMU_CC", "80", 1);
  CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0) == cudaSuccess);
  CHECK(v == 164 * 1024);
  CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0) == cudaSuccess);
  CHECK(v == 163 * 1024);
  CHECK(cudaFuncSetAttribute(big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024) ==
        cudaErrorInvalidValue);
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, big_smem, 128, 80 * 1024) == cudaSuccess);
  CHECK(n == 2);  // 164 / 81
  cudaDeviceProp p{};
  CHECK(cudaGetDeviceProperties(&p, 0) == cudaSuccess);
  CHECK(p.sharedMemPerMultiprocessor == 164u * 1024u);
  CHECK(p.sharedMemPerBlockOptin == 163u * 1024u);
  unsetenv("MELFORGE_EMU_CC");
  (void)cudaGetLastError();
}
