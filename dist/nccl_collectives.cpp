#include "dist/nccl_collectives.hpp"

#include <fmt/format.h>

#include "engine/error.hpp"
#include "engine/stream.hpp"

#ifdef MELFORGE_WITH_NCCL
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#endif

namespace mf::dist {

#ifdef MELFORGE_WITH_NCCL

namespace {

// NCCL, loaded when a job first asks for it (dlopen), not linked: a melforge
// that never trains on several GPUs neither needs libnccl installed nor pays
// for loading it (as cuBLASLt, kernels/cublaslt_lazy.cpp). Each member has
// nccl.h's signature and is resolved once.
struct NcclApi {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclGetVersion) get_version = nullptr;
  std::string why_not;  // empty when loaded
};

const NcclApi& nccl() {
  static const NcclApi api = [] {
    NcclApi a;
    const std::string soname = "libnccl.so." + std::to_string(NCCL_MAJOR);
    void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
#ifdef MELFORGE_NCCL_BUILD_DIR
    if (h == nullptr) h = dlopen((std::string(MELFORGE_NCCL_BUILD_DIR) + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
    if (h == nullptr) {
      const char* why = dlerror();
      a.why_not = fmt::format("cannot load {}: {}", soname, why ? why : "unknown reason");
      return a;
    }
    const auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (fn == nullptr && a.why_not.empty()) a.why_not = fmt::format("{} lacks {}", soname, name);
    };
    get(a.get_unique_id, "ncclGetUniqueId");
    get(a.comm_init_rank, "ncclCommInitRank");
    get(a.comm_destroy, "ncclCommDestroy");
    get(a.comm_abort, "ncclCommAbort");
    get(a.comm_get_async_error, "ncclCommGetAsyncError");
    get(a.all_gather, "ncclAllGather");
    get(a.all_reduce, "ncclAllReduce");
    get(a.get_error_string, "ncclGetErrorString");
    get(a.get_version, "ncclGetVersion");
    return a;
  }();
  return api;
}

#define MF_NCCL_CHECK(call, rank, what)                                                                  \
  do {                                                                                                   \
    const ncclResult_t mf_nccl_ = (call);                                                                \
    if (mf_nccl_ != ncclSuccess)                                                                         \
      MF_THROW("rank {}: {}: NCCL error: {} ({})", rank, what, nccl().get_error_string(mf_nccl_), #call); \
  } while (0)

class NcclCollectives final : public Collectives {
 public:
  NcclCollectives(const World& w, Device device) : w_(w) {
    ncclUniqueId id{};
    if (w.is_root()) MF_NCCL_CHECK(nccl().get_unique_id(&id), w.rank(), "making NCCL's id");
    const std::string shared =
        w.broadcast(std::string(reinterpret_cast<const char*>(&id), sizeof id), "sharing NCCL's id");
    MF_CHECK(shared.size() == sizeof id, "rank {}: NCCL's id arrived with {} bytes, expected {}", w.rank(),
             shared.size(), sizeof id);
    std::memcpy(&id, shared.data(), sizeof id);
    set_current(device);
    comm_stream_ = Stream(device, "nccl");
    ready_ = Event(device);
    const World::Waiting waiting(w, "starting NCCL");
    MF_NCCL_CHECK(nccl().comm_init_rank(&comm_, w.size(), id, w.rank()), w.rank(), "starting NCCL");
  }
  ~NcclCollectives() override {
    if (comm_) nccl().comm_destroy(comm_);
  }
  NcclCollectives(const NcclCollectives&) = delete;
  NcclCollectives& operator=(const NcclCollectives&) = delete;

  void allgather(const Tensor& mine, Tensor& all, cudaStream_t stream, std::string_view what) override {
    if (!mine.is_cuda()) return mpi_allgather(w_, mine, all, stream, what);  // host values (batch norm's terms)
    check_exchange(w_, mine, &all, what);
    MF_NCCL_CHECK(nccl().all_gather(mine.raw(), all.raw(), std::size_t(mine.numel()), ncclFloat, comm_, stream),
                  w_.rank(), what);
    wait(stream, what);
  }

  void allreduce_sum(Tensor& values, cudaStream_t stream, std::string_view what) override {
    if (!values.is_cuda()) return mpi_allreduce_sum(w_, values, stream, what);
    check_exchange(w_, values, nullptr, what);
    MF_NCCL_CHECK(nccl().all_reduce(values.raw(), values.raw(), std::size_t(values.numel()), ncclFloat, ncclSum, comm_,
                                stream),
                  w_.rank(), what);
    wait(stream, what);
  }

  // On comm_stream_ after the work on `stream` so far, so the backward goes
  // on while NCCL sums.
  void allreduce_sum_start(Tensor& values, cudaStream_t stream, std::string_view what) override {
    if (!values.is_cuda()) return host_started_.start(values, stream, what);
    check_exchange(w_, values, nullptr, what);
    ready_.record(stream);
    ready_.wait_on(comm_stream_);
    MF_NCCL_CHECK(nccl().all_reduce(values.raw(), values.raw(), std::size_t(values.numel()), ncclFloat, ncclSum, comm_,
                                    comm_stream_),
                  w_.rank(), what);
    started_ = true;
  }

  void allreduce_finish(cudaStream_t stream, std::string_view what) override {
    host_started_.finish(stream, what);
    if (!started_) return;
    started_ = false;
    wait(comm_stream_, what);  // bounded, watching NCCL's errors; then `stream` needs no further wait
  }

  Transport transport() const override { return Transport::nccl; }
  std::string describe() const override {
    int v = 0;
    nccl().get_version(&v);
    return fmt::format("NCCL {}.{}.{}", v / 10000, v / 100 % 100, v % 100);
  }

 private:
  // Until the collective queued on `stream` is done, watching NCCL's own
  // error state: a peer that died makes NCCL report it (the communicator is
  // then aborted and this rank stops), one that hangs leaves the wait to
  // World's watchdog, which ends the job after dist.timeout.
  void wait(cudaStream_t stream, std::string_view what) {
    const World::Waiting waiting(w_, what);
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) MF_CUDA_CHECK(q);
      ncclResult_t async = ncclSuccess;
      MF_NCCL_CHECK(nccl().comm_get_async_error(comm_, &async), w_.rank(), what);
      if (async != ncclSuccess && async != ncclInProgress) {
        nccl().comm_abort(comm_);
        comm_ = nullptr;
        MF_THROW("rank {}: {}: NCCL failed: {}", w_.rank(), what, nccl().get_error_string(async));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  const World& w_;
  ncclComm_t comm_ = nullptr;
  Stream comm_stream_;          // the started sums run here
  Event ready_;                 // the step's stream reached a bucket's last gradient
  bool started_ = false;        // a sum runs on comm_stream_
  MpiStartedSums host_started_{w_};
};

}  // namespace

std::unique_ptr<Collectives> make_nccl_collectives(const World& world, Device device) {
  MF_CHECK(nccl().why_not.empty(), "rank {}: NCCL: {}", world.rank(), nccl().why_not);
  return std::make_unique<NcclCollectives>(world, device);
}

std::string nccl_unavailable() { return nccl().why_not; }

#else

std::string nccl_unavailable() { return "this melforge was built without NCCL (MELFORGE_NCCL)"; }

std::unique_ptr<Collectives> make_nccl_collectives(const World& world, Device device) {
  MF_THROW("rank {}: NCCL for {} was asked for, but this melforge was built without it (MELFORGE_NCCL)", world.rank(),
           device.str());
}

#endif

}  // namespace mf::dist
