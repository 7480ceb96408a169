// The CUDA runtime API of melforge's CUDA emulator: the calls melforge makes,
// defined over host memory with the semantics (and the errors) of the real
// runtime where melforge relies on them. Work runs synchronously at the call,
// or is recorded while a stream is being captured and replayed by
// cudaGraphLaunch. Checks beyond the real runtime's: copies and memsets must
// stay inside one live allocation of the right kind (host vs device), memory
// is poisoned (0xFF: NaN for f32/f16/bf16) when allocated and freed, and a
// graph's free of memory it did not allocate can run only once.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "tests/cudaemu/emu_exec.hpp"
#include "tests/cudaemu/emu_launch.hpp"

namespace {

using Clock = std::chrono::steady_clock;

std::recursive_mutex g_mu;  // one lock for all state and for running kernels

void note(const std::string& msg) { std::fprintf(stderr, "melforge CUDA emulator: %s\n", msg.c_str()); }

enum class MemKind { device, pinned };
struct Alloc {
  std::size_t size = 0;
  MemKind kind = MemKind::device;
  bool graph_owned = false;  // allocated while capturing: lives as long as the graph
};
std::map<std::uintptr_t, Alloc> g_allocs;
std::size_t g_device_used = 0, g_device_high = 0;
std::uint64_t g_release_threshold = 0;

constexpr std::size_t kTotalMemory = std::size_t(80) << 30;

thread_local cudaError_t t_last_error = cudaSuccess;

cudaError_t fail(cudaError_t e, const std::string& why) {
  note(why + " -> " + cudaGetErrorName(e));
  t_last_error = e;
  return e;
}

const Alloc* find_alloc(const void* p, std::uintptr_t* base = nullptr) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = g_allocs.upper_bound(a);
  if (it == g_allocs.begin()) return nullptr;
  --it;
  if (a >= it->first + std::max<std::size_t>(it->second.size, 1)) return nullptr;
  if (base) *base = it->first;
  return &it->second;
}

bool inside_device(const void* p, std::size_t n) {
  std::uintptr_t base = 0;
  const Alloc* al = find_alloc(p, &base);
  return al && al->kind == MemKind::device && reinterpret_cast<std::uintptr_t>(p) + n <= base + al->size;
}
bool is_device(const void* p) {
  const Alloc* al = find_alloc(p);
  return al && al->kind == MemKind::device;
}

void* raw_alloc(std::size_t n) {
  const std::size_t bytes = (std::max<std::size_t>(n, 1) + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, bytes);
  if (p) std::memset(p, 0xFF, bytes);
  return p;
}

void* device_alloc(std::size_t n, bool graph_owned) {
  void* p = raw_alloc(n);
  if (!p) return nullptr;
  g_allocs[reinterpret_cast<std::uintptr_t>(p)] = Alloc{n, MemKind::device, graph_owned};
  g_device_used += n;
  g_device_high = std::max(g_device_high, g_device_used);
  return p;
}

bool device_free(void* p) {
  auto it = g_allocs.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == g_allocs.end() || it->second.kind != MemKind::device) return false;
  std::memset(p, 0xFF, it->second.size);
  g_device_used -= it->second.size;
  g_allocs.erase(it);
  std::free(p);
  return true;
}

// ---- streams, events, graphs -------------------------------------------------

struct Node {
  std::function<void()> run;
  void* alloc = nullptr;  // alloc node: graph-owned block
  void* free = nullptr;   // free node
};

}  // namespace

struct CUgraph_st {
  std::vector<Node> nodes;
};
struct CUgraphExec_st {
  std::vector<Node> nodes;
  std::set<void*> live;        // graph-owned blocks allocated by the last launch and not yet freed
  std::set<void*> freed_ext;   // memory from outside the graph, freed by an earlier launch
};
struct CUstream_st {
  bool capturing = false;
  bool invalidated = false;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  CUgraph_st* graph = nullptr;
  CUstream_st* origin = nullptr;  // forked into another stream's capture
  bool joined = true;
};
struct CUevent_st {
  unsigned flags = 0;
  bool recorded = false;
  bool captured = false;  // last recorded in a capturing stream
  CUstream_st* captured_in = nullptr;
  Clock::time_point t{};
};
struct CUmemPoolHandle_st {
  int dummy = 0;
};

namespace {

std::set<CUstream_st*> g_streams;
std::set<CUevent_st*> g_events;
std::set<CUgraphExec_st*> g_execs;
CUmemPoolHandle_st g_pool;
thread_local int t_strict_captures = 0;  // captures begun by this thread in global / thread-local mode
int g_global_captures = 0;

CUstream_st* capture_of(cudaStream_t s) {
  if (!s || s == cudaStreamLegacy || s == cudaStreamPerThread) return nullptr;
  CUstream_st* st = s;
  if (!st->capturing) return nullptr;
  return st->origin ? st->origin : st;
}

bool valid_stream(cudaStream_t s) { return !s || s == cudaStreamLegacy || s == cudaStreamPerThread || g_streams.count(s); }

// A call the real runtime forbids during a (non-relaxed) capture by this thread.
cudaError_t unsafe_during_capture(const char* what) {
  if (t_strict_captures == 0 && g_global_captures == 0) return cudaSuccess;
  for (CUstream_st* s : g_streams)
    if (s->capturing) s->invalidated = true;
  return fail(cudaErrorStreamCaptureUnsupported, std::string(what) + " during a stream capture");
}

// Run `fn` on `s` now, or record it into the capture `s` belongs to.
cudaError_t enqueue(cudaStream_t s, std::function<void()> fn, const char* what) {
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle, std::string(what) + " on a destroyed stream");
  CUstream_st* cap = capture_of(s);
  if (cap) {
    cap->graph->nodes.push_back(Node{std::move(fn)});
    return cudaSuccess;
  }
  if (!s || s == cudaStreamLegacy) {
    for (CUstream_st* o : g_streams)
      if (o->capturing && o->mode != cudaStreamCaptureModeRelaxed) {
        o->invalidated = true;
        return fail(cudaErrorStreamCaptureImplicit, std::string(what) + " on the legacy default stream during a capture");
      }
  }
  fn();
  return cudaSuccess;
}

}  // namespace

// ---- per-compute-capability limits ------------------------------------------
// From the CUDA C++ Programming Guide, "Compute Capabilities", table
// "Technical Specifications per Compute Capability" (resident blocks and
// threads per SM, shared memory per SM, the opt-in maximum per block), and the
// runtime's cudaDevAttrReservedSharedMemoryPerBlock (1 KiB from cc 8.0 on).
// MELFORGE_EMU_CC picks the row; an unknown cc gets the cc 9.0 row.
namespace {
int emulated_cc() {
  const char* s = std::getenv("MELFORGE_EMU_CC");
  const int cc = s ? std::atoi(s) : 90;
  return cc >= 50 ? cc : 90;
}
struct SmLimits {
  int cc;
  int blocks_per_sm, threads_per_sm;
  int smem_per_sm, smem_optin, smem_reserved;  // bytes
};
constexpr int KiB = 1024;
constexpr SmLimits kLimits[] = {
    {70, 32, 2048, 96 * KiB, 96 * KiB, 0},        {75, 16, 1024, 64 * KiB, 64 * KiB, 0},
    {80, 32, 2048, 164 * KiB, 163 * KiB, 1 * KiB}, {86, 16, 1536, 100 * KiB, 99 * KiB, 1 * KiB},
    {87, 16, 2048, 164 * KiB, 163 * KiB, 1 * KiB}, {89, 24, 1536, 100 * KiB, 99 * KiB, 1 * KiB},
    {90, 32, 2048, 228 * KiB, 227 * KiB, 1 * KiB}, {100, 32, 2048, 228 * KiB, 227 * KiB, 1 * KiB},
    {120, 32, 1536, 100 * KiB, 99 * KiB, 1 * KiB},
};
const SmLimits& sm_limits() {
  const int cc = emulated_cc();
  for (const SmLimits& l : kLimits)
    if (l.cc == cc) return l;
  return kLimits[6];
}
constexpr std::size_t kDefaultSmemPerBlock = 48 * 1024;  // dynamic shared memory without an opt-in

std::map<const void*, int> g_max_dyn_smem;  // cudaFuncAttributeMaxDynamicSharedMemorySize per kernel
std::size_t allowed_dyn_smem(const void* func) {
  auto it = func ? g_max_dyn_smem.find(func) : g_max_dyn_smem.end();
  return it == g_max_dyn_smem.end() ? kDefaultSmemPerBlock : std::max(kDefaultSmemPerBlock, std::size_t(it->second));
}
}  // namespace

namespace mf_emu {
thread_local void* t_dynamic_smem = nullptr;
thread_local std::size_t t_dynamic_smem_bytes = 0;
void* dynamic_smem() { return t_dynamic_smem; }

Located locate(const void* p) {
  std::lock_guard lk(g_mu);
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const auto dyn = reinterpret_cast<std::uintptr_t>(t_dynamic_smem);
  Located r;
  if (t_dynamic_smem && a >= dyn && a < dyn + (t_dynamic_smem_bytes + 1023) / 1024 * 1024) {
    r.space = Space::dynamic_shared;
    r.base = dyn;
    r.size = t_dynamic_smem_bytes;
    return r;
  }
  auto it = g_allocs.upper_bound(a);
  if (it == g_allocs.begin()) return r;
  --it;
  const std::size_t padded = (std::max<std::size_t>(it->second.size, 1) + 255) / 256 * 256;  // raw_alloc's rounding
  if (a >= it->first + padded) return r;
  r.space = a < it->first + it->second.size ? Space::allocation : Space::past_end;
  r.base = it->first;
  r.size = it->second.size;
  r.device = it->second.kind == MemKind::device;
  return r;
}
}  // namespace mf_emu

void mf_emu::submit_launch(const LaunchConfig& cfg, std::function<void()> body, const char* name, const void* func) {
  std::lock_guard lk(g_mu);
  const dim3 g = cfg.grid, b = cfg.block;
  const unsigned long long threads = 1ull * b.x * b.y * b.z;
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0 || threads > 1024 || b.x > 1024 ||
      b.y > 1024 || b.z > 64 || g.y > 65535 || g.z > 65535 || g.x > 2147483647u) {
    fail(cudaErrorInvalidConfiguration, std::string("launch of ") + name + " with grid (" + std::to_string(g.x) + "," +
                                            std::to_string(g.y) + "," + std::to_string(g.z) + ") block (" +
                                            std::to_string(b.x) + "," + std::to_string(b.y) + "," +
                                            std::to_string(b.z) + ")");
    return;
  }
  // More than 48 KiB of dynamic shared memory needs the kernel's opt-in
  // (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n)
  // with n >= the launch's amount). Static shared memory is not counted.
  if (cfg.smem > allowed_dyn_smem(func)) {
    const bool known = func && g_max_dyn_smem.count(func);
    fail(cudaErrorInvalidValue,
         std::string("launch of ") + name + " with " + std::to_string(cfg.smem) + " bytes of dynamic shared memory (" +
             (known ? "its opt-in cudaFuncAttributeMaxDynamicSharedMemorySize is " + std::to_string(g_max_dyn_smem[func])
                    : std::string(func ? "48 KiB without an opt-in"
                                       : "48 KiB: the emulator could not take the kernel's address to find its opt-in; "
                                         "name the kernel with all its template arguments")) +
             ")");
    return;
  }
  const std::size_t smem = cfg.smem;
  const std::string kname = name;
  auto run = [g, b, smem, kname, body = std::move(body)]() {
    std::lock_guard lk2(g_mu);
    // 1024-byte aligned (the largest alignment kernels ask of shared memory),
    // NaN-poisoned: shared memory starts with whatever the last block left.
    const std::size_t bytes = (std::max<std::size_t>(smem, 1) + 1023) / 1024 * 1024;
    std::unique_ptr<void, decltype(&std::free)> dyn(std::aligned_alloc(1024, bytes), &std::free);
    if (!dyn) {
      note("cannot allocate " + std::to_string(bytes) + " bytes of dynamic shared memory");
      std::abort();
    }
    std::memset(dyn.get(), 0xFF, bytes);
    void* saved = t_dynamic_smem;
    const std::size_t saved_bytes = t_dynamic_smem_bytes;
    t_dynamic_smem = dyn.get();
    t_dynamic_smem_bytes = smem;
    run_grid(Idx3{g.x, g.y, g.z}, Idx3{b.x, b.y, b.z}, body, kname.c_str());
    t_dynamic_smem = saved;
    t_dynamic_smem_bytes = saved_bytes;
  };
  enqueue(cfg.stream, std::move(run), name);
}

cudaError_t mf_emu::enqueue_host_work(cudaStream_t stream, std::function<void()> fn, const char* what) {
  std::lock_guard lk(g_mu);
  return enqueue(stream, std::move(fn), what);
}

// ---- the runtime API ----------------------------------------------------------

namespace {
int device_count() {
  const char* s = std::getenv("MELFORGE_EMU_DEVICES");
  return s ? std::atoi(s) : 1;
}
cudaError_t check_device(int d) {
  return d >= 0 && d < device_count() ? cudaSuccess : fail(cudaErrorInvalidDevice, "device " + std::to_string(d));
}
}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  if (device_count() <= 0) {
    *count = 0;
    t_last_error = cudaErrorNoDevice;
    return cudaErrorNoDevice;
  }
  *count = device_count();
  return cudaSuccess;
}

// The emulator stands in for both the runtime and the driver: each reports the
// CUDA version of the headers the emulator was compiled against.
cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (cudaError_t e = check_device(device)) return e;
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "melforge CUDA emulator (sm_%d on the CPU)", emulated_cc());
  p->totalGlobalMem = kTotalMemory;
  p->sharedMemPerBlock = 48 * 1024;
  p->sharedMemPerBlockOptin = std::size_t(sm_limits().smem_optin);
  p->sharedMemPerMultiprocessor = std::size_t(sm_limits().smem_per_sm);
  p->reservedSharedMemPerBlock = std::size_t(sm_limits().smem_reserved);
  p->maxBlocksPerMultiProcessor = sm_limits().blocks_per_sm;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->major = emulated_cc() / 10;
  p->minor = emulated_cc() % 10;
  p->multiProcessorCount = 132;
  p->l2CacheSize = 50 << 20;
  p->memoryBusWidth = 5120;
  p->maxThreadsPerMultiProcessor = sm_limits().threads_per_sm;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr attr, int device) {
  if (cudaError_t e = check_device(device)) return e;
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *v = emulated_cc() / 10; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *v = emulated_cc() % 10; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *v = 132; return cudaSuccess;
    case cudaDevAttrMemoryClockRate: *v = 2619000; return cudaSuccess;
    case cudaDevAttrGlobalMemoryBusWidth: *v = 5120; return cudaSuccess;
    case cudaDevAttrClockRate: *v = 1980000; return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = sm_limits().smem_optin; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = sm_limits().smem_per_sm; return cudaSuccess;
    case cudaDevAttrReservedSharedMemoryPerBlock: *v = sm_limits().smem_reserved; return cudaSuccess;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *v = sm_limits().blocks_per_sm; return cudaSuccess;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *v = sm_limits().threads_per_sm; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = 48 * 1024; return cudaSuccess;
    case cudaDevAttrL2CacheSize: *v = 50 << 20; return cudaSuccess;
    case cudaDevAttrWarpSize: *v = 32; return cudaSuccess;
    default: return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute " + std::to_string(int(attr)) +
                                                    " is not emulated");
  }
}

cudaError_t cudaSetDevice(int device) { return check_device(device); }
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return device_count() > 0 ? cudaSuccess : fail(cudaErrorNoDevice, "cudaGetDevice");
}
cudaError_t cudaDeviceGetPCIBusId(char* bus, int len, int device) {
  if (cudaError_t e = check_device(device)) return e;
  std::snprintf(bus, std::size_t(len), "00000000:00:00.0");
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return t_last_error; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnjoined: return "cudaErrorStreamCaptureUnjoined";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorCapturedEvent: return "cudaErrorCapturedEvent";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    default: return "cudaErrorUnknown";
  }
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected (emulator: MELFORGE_EMU_DEVICES=0)";
    default: return cudaGetErrorName(e);
  }
}

// -- memory
cudaError_t cudaMalloc(void** p, std::size_t n) {
  std::lock_guard lk(g_mu);
  if (cudaError_t e = unsafe_during_capture("cudaMalloc")) return e;
  *p = device_alloc(n, false);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation, "cudaMalloc");
}
cudaError_t cudaFree(void* p) {
  std::lock_guard lk(g_mu);
  if (!p) return cudaSuccess;
  if (cudaError_t e = unsafe_during_capture("cudaFree")) return e;
  return device_free(p) ? cudaSuccess : fail(cudaErrorInvalidValue, "cudaFree of a pointer cudaMalloc did not return");
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (cudaError_t e = check_device(device)) return e;
  *pool = &g_pool;
  return cudaSuccess;
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  std::lock_guard lk(g_mu);
  if (pool != &g_pool) return fail(cudaErrorInvalidValue, "cudaMemPoolSetAttribute: unknown pool");
  switch (attr) {
    case cudaMemPoolAttrReleaseThreshold: g_release_threshold = *static_cast<std::uint64_t*>(value); return cudaSuccess;
    case cudaMemPoolAttrUsedMemHigh:
    case cudaMemPoolAttrReservedMemHigh:
      if (*static_cast<std::uint64_t*>(value) != 0)
        return fail(cudaErrorInvalidValue, "the high-water attributes can only be reset to 0");
      g_device_high = g_device_used;
      return cudaSuccess;
    default: return fail(cudaErrorInvalidValue, "cudaMemPoolSetAttribute: attribute not emulated");
  }
}
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  std::lock_guard lk(g_mu);
  if (pool != &g_pool) return fail(cudaErrorInvalidValue, "cudaMemPoolGetAttribute: unknown pool");
  auto* out = static_cast<std::uint64_t*>(value);
  switch (attr) {
    case cudaMemPoolAttrReleaseThreshold: *out = g_release_threshold; return cudaSuccess;
    case cudaMemPoolAttrReservedMemCurrent:
    case cudaMemPoolAttrUsedMemCurrent: *out = g_device_used; return cudaSuccess;
    case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemHigh: *out = g_device_high; return cudaSuccess;
    default: return fail(cudaErrorInvalidValue, "cudaMemPoolGetAttribute: attribute not emulated");
  }
}

cudaError_t cudaMallocAsync(void** p, std::size_t n, cudaStream_t s) {
  std::lock_guard lk(g_mu);
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle, "cudaMallocAsync on a destroyed stream");
  CUstream_st* cap = capture_of(s);
  *p = device_alloc(n, cap != nullptr);
  if (!*p) return fail(cudaErrorMemoryAllocation, "cudaMallocAsync");
  if (cap) {
    Node nd;
    nd.alloc = *p;
    cap->graph->nodes.push_back(std::move(nd));
  }
  return cudaSuccess;
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
  std::lock_guard lk(g_mu);
  if (!p) return cudaSuccess;
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle, "cudaFreeAsync on a destroyed stream");
  if (!is_device(p)) return fail(cudaErrorInvalidValue, "cudaFreeAsync of a pointer that is not live device memory");
  if (CUstream_st* cap = capture_of(s)) {
    Node nd;
    nd.free = p;
    cap->graph->nodes.push_back(std::move(nd));
    return cudaSuccess;
  }
  const Alloc* al = find_alloc(p);
  if (al->graph_owned) {  // legal: ends the allocation a graph launch made
    for (CUgraphExec_st* ex : g_execs)
      if (ex->live.erase(p)) {
        std::memset(p, 0xFF, al->size);
        return cudaSuccess;
      }
    return fail(cudaErrorInvalidValue, "cudaFreeAsync of graph-allocated memory that no launch has live");
  }
  device_free(p);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(std::size_t* free_b, std::size_t* total_b) {
  std::lock_guard lk(g_mu);
  *total_b = kTotalMemory;
  *free_b = kTotalMemory - std::min(kTotalMemory, g_device_used);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, std::size_t n, unsigned int flags) {
  std::lock_guard lk(g_mu);
  if (cudaError_t e = unsafe_during_capture("cudaHostAlloc")) return e;
  *p = raw_alloc(n);
  if (!*p) return fail(cudaErrorMemoryAllocation, "cudaHostAlloc");
  g_allocs[reinterpret_cast<std::uintptr_t>(*p)] = Alloc{n, MemKind::pinned, false};
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  std::lock_guard lk(g_mu);
  if (!p) return cudaSuccess;
  auto it = g_allocs.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == g_allocs.end() || it->second.kind != MemKind::pinned)
    return fail(cudaErrorInvalidValue, "cudaFreeHost of a pointer cudaHostAlloc did not return");
  g_allocs.erase(it);
  std::free(p);
  return cudaSuccess;
}

namespace {
cudaError_t check_copy(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind, const char* what) {
  if (n == 0) return cudaSuccess;
  const bool dd = is_device(dst), sd = is_device(src);
  bool want_dd = dd, want_sd = sd;
  switch (kind) {
    case cudaMemcpyHostToDevice: want_dd = true, want_sd = false; break;
    case cudaMemcpyDeviceToHost: want_dd = false, want_sd = true; break;
    case cudaMemcpyDeviceToDevice: want_dd = want_sd = true; break;
    case cudaMemcpyHostToHost: want_dd = want_sd = false; break;
    case cudaMemcpyDefault: break;
    default: return fail(cudaErrorInvalidMemcpyDirection, what);
  }
  if (dd != want_dd || sd != want_sd)
    return fail(cudaErrorInvalidValue, std::string(what) + ": the direction does not match the pointers (destination " +
                                           (dd ? "device" : "host") + ", source " + (sd ? "device" : "host") + ")");
  if (dd && !inside_device(dst, n)) return fail(cudaErrorInvalidValue, std::string(what) + ": destination overruns its allocation");
  if (sd && !inside_device(src, n)) return fail(cudaErrorInvalidValue, std::string(what) + ": source overruns its allocation");
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind, cudaStream_t s) {
  std::lock_guard lk(g_mu);
  if (cudaError_t e = check_copy(dst, src, n, kind, "cudaMemcpyAsync")) return e;
  return enqueue(s, [=]() { std::memmove(dst, src, n); }, "cudaMemcpyAsync");
}
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind) {
  std::lock_guard lk(g_mu);
  if (cudaError_t e = unsafe_during_capture("cudaMemcpy")) return e;
  if (cudaError_t e = check_copy(dst, src, n, kind, "cudaMemcpy")) return e;
  std::memmove(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int v, std::size_t n, cudaStream_t s) {
  std::lock_guard lk(g_mu);
  if (n && !inside_device(p, n)) return fail(cudaErrorInvalidValue, "cudaMemsetAsync outside one device allocation");
  return enqueue(s, [=]() { std::memset(p, v, n); }, "cudaMemsetAsync");
}
cudaError_t cudaMemset(void* p, int v, std::size_t n) {
  std::lock_guard lk(g_mu);
  if (cudaError_t e = unsafe_during_capture("cudaMemset")) return e;
  if (n && !inside_device(p, n)) return fail(cudaErrorInvalidValue, "cudaMemset outside one device allocation");
  std::memset(p, v, n);
  return cudaSuccess;
}

// -- streams
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  std::lock_guard lk(g_mu);
  *s = new CUstream_st;
  g_streams.insert(*s);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int flags, int) {
  return cudaStreamCreateWithFlags(s, flags);
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  std::lock_guard lk(g_mu);
  if (!g_streams.erase(s)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy of an unknown stream");
  if (s->capturing) note("a stream was destroyed while capturing");
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  std::lock_guard lk(g_mu);
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize of a destroyed stream");
  if (capture_of(s)) {
    capture_of(s)->invalidated = true;
    return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamSynchronize of a capturing stream");
  }
  if (cudaError_t e = unsafe_during_capture("cudaStreamSynchronize")) return e;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
  std::lock_guard lk(g_mu);
  return unsafe_during_capture("cudaDeviceSynchronize");
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* st) {
  std::lock_guard lk(g_mu);
  CUstream_st* cap = capture_of(s);
  *st = !cap ? cudaStreamCaptureStatusNone
             : (cap->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive);
  return cudaSuccess;
}

// -- events
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  std::lock_guard lk(g_mu);
  *e = new CUevent_st;
  (*e)->flags = flags;
  g_events.insert(*e);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  std::lock_guard lk(g_mu);
  if (!g_events.erase(e)) return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy of an unknown event");
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  std::lock_guard lk(g_mu);
  if (!g_events.count(e)) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord of an unknown event");
  if (CUstream_st* cap = capture_of(s)) {
    e->captured = true;
    e->captured_in = s;
    cap->graph->nodes.push_back(Node{[e]() {
      e->recorded = true;
      e->t = Clock::now();
    }});
    return cudaSuccess;
  }
  e->captured = false;
  return enqueue(s, [e]() {
    e->recorded = true;
    e->t = Clock::now();
  }, "cudaEventRecord");
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  std::lock_guard lk(g_mu);
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent on a destroyed stream");
  if (!g_events.count(e)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent of an unknown event");
  if (e->captured && e->captured_in) {
    CUstream_st* origin = e->captured_in->origin ? e->captured_in->origin : e->captured_in;
    if (!origin->capturing) return fail(cudaErrorCapturedEvent, "cudaStreamWaitEvent on an event of an ended capture");
    if (s && s != cudaStreamLegacy && s != cudaStreamPerThread && !s->capturing) {  // fork into the capture
      s->capturing = true;
      s->origin = origin;
      s->graph = origin->graph;
      s->joined = false;
    } else if (s == origin && e->captured_in != origin) {
      e->captured_in->joined = true;  // join
    }
  }
  return cudaSuccess;  // work runs in issue order: every earlier record has happened
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  std::lock_guard lk(g_mu);
  if (!g_events.count(e)) return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize of an unknown event");
  if (e->captured) return fail(cudaErrorCapturedEvent, "cudaEventSynchronize of an event recorded in a capture");
  if (cudaError_t err = unsafe_during_capture("cudaEventSynchronize")) return err;
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  std::lock_guard lk(g_mu);
  if (!g_events.count(e)) return fail(cudaErrorInvalidResourceHandle, "cudaEventQuery of an unknown event");
  if (e->captured) return fail(cudaErrorCapturedEvent, "cudaEventQuery of an event recorded in a capture");
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  std::lock_guard lk(g_mu);
  if (!g_events.count(a) || !g_events.count(b)) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime of an unknown event");
  if ((a->flags | b->flags) & cudaEventDisableTiming)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime of an event created with cudaEventDisableTiming");
  if (!a->recorded || !b->recorded) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime of an event never recorded");
  *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
  return cudaSuccess;
}

// -- capture and graphs
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
  std::lock_guard lk(g_mu);
  if (!s || s == cudaStreamLegacy || s == cudaStreamPerThread || !g_streams.count(s))
    return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamBeginCapture on the legacy stream or an unknown stream");
  if (s->capturing) return fail(cudaErrorIllegalState, "cudaStreamBeginCapture on a stream already capturing");
  s->capturing = true;
  s->invalidated = false;
  s->mode = mode;
  s->origin = nullptr;
  s->graph = new CUgraph_st;
  if (mode == cudaStreamCaptureModeGlobal) ++g_global_captures;
  if (mode != cudaStreamCaptureModeRelaxed) ++t_strict_captures;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
  std::lock_guard lk(g_mu);
  *g = nullptr;
  if (!s || !g_streams.count(s) || !s->capturing || s->origin)
    return fail(cudaErrorIllegalState, "cudaStreamEndCapture on a stream that is not capturing");
  if (s->mode == cudaStreamCaptureModeGlobal) --g_global_captures;
  if (s->mode != cudaStreamCaptureModeRelaxed) --t_strict_captures;
  s->capturing = false;
  bool unjoined = false;
  for (CUstream_st* o : g_streams)
    if (o->origin == s) {
      unjoined |= !o->joined;
      o->capturing = false;
      o->origin = nullptr;
      o->graph = nullptr;
    }
  CUgraph_st* graph = s->graph;
  s->graph = nullptr;
  if (s->invalidated || unjoined) {
    delete graph;
    return fail(unjoined ? cudaErrorStreamCaptureUnjoined : cudaErrorStreamCaptureInvalidated, "cudaStreamEndCapture");
  }
  *g = graph;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* ex, cudaGraph_t g, unsigned long long) {
  std::lock_guard lk(g_mu);
  if (!g) return fail(cudaErrorInvalidValue, "cudaGraphInstantiate of a null graph");
  *ex = new CUgraphExec_st;
  (*ex)->nodes = g->nodes;
  g_execs.insert(*ex);
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t ex, cudaStream_t s) {
  std::lock_guard lk(g_mu);
  if (!ex) return fail(cudaErrorInvalidValue, "cudaGraphLaunch of a null graph");
  if (!ex->live.empty())
    return fail(cudaErrorInvalidValue, "cudaGraphLaunch while memory the graph allocated in its last launch is not freed");
  return enqueue(s, [ex]() {
    for (const Node& nd : ex->nodes) {
      if (nd.alloc) {
        ex->live.insert(nd.alloc);
        std::memset(nd.alloc, 0xFF, find_alloc(nd.alloc)->size);
      } else if (nd.free) {
        if (ex->live.erase(nd.free)) {
          std::memset(nd.free, 0xFF, find_alloc(nd.free)->size);
        } else if (ex->freed_ext.count(nd.free)) {
          note("a graph frees memory it did not allocate a second time (double free on relaunch)");
          std::abort();
        } else {
          ex->freed_ext.insert(nd.free);
          if (!device_free(nd.free)) {
            note("a graph frees memory that is not live device memory");
            std::abort();
          }
        }
      } else {
        nd.run();
      }
    }
  }, "cudaGraphLaunch");
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t ex) {
  std::lock_guard lk(g_mu);
  g_execs.erase(ex);
  delete ex;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  std::lock_guard lk(g_mu);
  delete g;  // graph-owned blocks stay allocated (emulator: leaked, bounded by captures)
  return cudaSuccess;
}

cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
cudaError_t cudaProfilerStop(void) { return cudaSuccess; }

// cudaFuncSetAttribute (CUDA runtime API, "Execution Control"): the maximum
// dynamic shared memory is recorded per kernel and checked at each launch of
// it; it may not exceed cudaDevAttrMaxSharedMemoryPerBlockOptin (the runtime
// counts the kernel's static shared memory too, which the emulator does not
// know). The carveout is a hint (accepted, ignored); other attributes are not
// emulated.
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  std::lock_guard lk(g_mu);
  if (!func) return fail(cudaErrorInvalidDeviceFunction, "cudaFuncSetAttribute of a null function");
  switch (attr) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize:
      if (value < 0 || value > sm_limits().smem_optin)
        return fail(cudaErrorInvalidValue, "cudaFuncAttributeMaxDynamicSharedMemorySize " + std::to_string(value) +
                                               " (the device allows 0.." + std::to_string(sm_limits().smem_optin) + ")");
      g_max_dyn_smem[func] = value;
      return cudaSuccess;
    case cudaFuncAttributePreferredSharedMemoryCarveout:
      if (value < -1 || value > 100)
        return fail(cudaErrorInvalidValue, "cudaFuncAttributePreferredSharedMemoryCarveout " + std::to_string(value));
      return cudaSuccess;
    default:
      return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute " + std::to_string(int(attr)) + " is not emulated");
  }
}

// cudaOccupancyMaxActiveBlocksPerMultiprocessor (CUDA runtime API,
// "Occupancy"). The emulator's model: the number of blocks of `blockSize`
// threads resident on one SM is the smallest of
//   * the device's resident blocks per SM (cudaDevAttrMaxBlocksPerMultiprocessor),
//   * resident warps per SM / warps per block (threads per SM / 32 over
//     ceil(blockSize / 32)),
//   * shared memory per SM / (dynSmem + the per-block reservation of
//     cudaDevAttrReservedSharedMemoryPerBlock), no allocation granularity;
// and 0 when the kernel may not launch with that configuration (blockSize >
// 1024, or dynSmem over the kernel's dynamic shared memory limit: 48 KiB or
// its opt-in). Registers are ignored (the emulator does not know how many a
// kernel uses), as is static shared memory: on a GPU the result can be lower.
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* num_blocks, const void* func, int block_size,
                                                                  std::size_t dyn_smem, unsigned int flags) {
  std::lock_guard lk(g_mu);
  if (!num_blocks) return fail(cudaErrorInvalidValue, "cudaOccupancyMaxActiveBlocksPerMultiprocessor: null numBlocks");
  if (!func) return fail(cudaErrorInvalidDeviceFunction, "cudaOccupancyMaxActiveBlocksPerMultiprocessor of a null function");
  if (block_size <= 0) return fail(cudaErrorInvalidValue, "cudaOccupancyMaxActiveBlocksPerMultiprocessor: block size " + std::to_string(block_size));
  if (flags != cudaOccupancyDefault && flags != cudaOccupancyDisableCachingOverride)
    return fail(cudaErrorInvalidValue, "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags: flags " + std::to_string(flags));
  const SmLimits& l = sm_limits();
  if (block_size > 1024 || dyn_smem > allowed_dyn_smem(func)) {
    *num_blocks = 0;
    return cudaSuccess;
  }
  const int by_blocks = l.blocks_per_sm;
  const int by_warps = (l.threads_per_sm / 32) / ((block_size + 31) / 32);
  const int by_smem = int(std::size_t(l.smem_per_sm) / (dyn_smem + std::size_t(l.smem_reserved)));
  *num_blocks = std::min({by_blocks, by_warps, by_smem});
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* num_blocks, const void* func, int block_size,
                                                          std::size_t dyn_smem) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(num_blocks, func, block_size, dyn_smem,
                                                                cudaOccupancyDefault);
}

}  // extern "C"
