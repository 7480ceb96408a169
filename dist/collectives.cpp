#include "dist/collectives.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "dist/nccl_collectives.hpp"
#include "engine/error.hpp"

namespace mf::dist {

namespace {


// World's MPI collectives; a tensor on a GPU goes through host memory.
class MpiCollectives final : public Collectives {
 public:
  MpiCollectives(const World& w, std::string why) : w_(w), why_(std::move(why)) {}

  void allgather(const Tensor& mine, Tensor& all, cudaStream_t stream, std::string_view what) override {
    mpi_allgather(w_, mine, all, stream, what);
  }
  void allreduce_sum(Tensor& values, cudaStream_t stream, std::string_view what) override {
    mpi_allreduce_sum(w_, values, stream, what);
  }
  void allreduce_sum_start(Tensor& values, cudaStream_t stream, std::string_view what) override {
    started_.start(values, stream, what);
  }
  void allreduce_finish(cudaStream_t stream, std::string_view what) override { started_.finish(stream, what); }

  Transport transport() const override { return Transport::mpi; }
  std::string describe() const override {
    return why_.empty() ? "MPI" : fmt::format("MPI through host memory ({})", why_);
  }

 private:
  const World& w_;
  std::string why_;
  MpiStartedSums started_{w_};
};

// Whether two ranks of the job run on the same GPU (the same host and PCI
// bus id): NCCL refuses that.
bool ranks_share_a_gpu(const World& w, Device device) {
  char bus[32] = {};
  MF_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, int(sizeof bus), device.index));
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  // FNV-1a of "host/bus", 52 bits: exact in a double, so World::allgather carries it.
  std::uint64_t h = 1469598103934665603ull;
  for (const char c : std::string(host) + "/" + bus) h = (h ^ std::uint8_t(c)) * 1099511628211ull;
  const double key = double(h & ((std::uint64_t(1) << 52) - 1));
  std::vector<double> keys = w.allgather(std::span<const double>(&key, 1), "comparing the processes' GPUs");
  std::sort(keys.begin(), keys.end());
  return std::adjacent_find(keys.begin(), keys.end()) != keys.end();
}

}  // namespace

void check_exchange(const World& w, const Tensor& mine, const Tensor* all, std::string_view what) {
  MF_CHECK(mine.dtype() == DType::f32, "{}: the exchanged tensor must be f32, found {}", what, mine.str());
  MF_CHECK(!all || (all->dtype() == DType::f32 && all->numel() == mine.numel() * w.size() &&
                    all->device() == mine.device()),
           "{}: gathering {} of {} ranks into {}", what, mine.str(), w.size(), all ? all->str() : "");
}

void mpi_allgather(const World& w, const Tensor& mine, Tensor& all, cudaStream_t stream, std::string_view what) {
  check_exchange(w, mine, &all, what);
  const Tensor host = mine.is_cuda() ? mine.to(Device::cpu(), stream) : mine;  // complete when it returns
  const std::vector<float> got =
      w.allgather(std::span<const float>(host.data<float>(), std::size_t(host.numel())), what);
  if (!all.is_cuda()) {
    std::copy(got.begin(), got.end(), all.data<float>());
    return;
  }
  // From pageable memory: staged before copy_from returns, so `got` may go.
  all.copy_from(Tensor::from_floats(got, {std::int64_t(got.size())}), stream);
}

void mpi_allreduce_sum(const World& w, Tensor& values, cudaStream_t stream, std::string_view what) {
  check_exchange(w, values, nullptr, what);
  if (!values.is_cuda()) {
    w.allreduce_sum(std::span<float>(values.data<float>(), std::size_t(values.numel())), what);
    return;
  }
  Tensor host = values.to(Device::cpu(), stream);
  w.allreduce_sum(std::span<float>(host.data<float>(), std::size_t(host.numel())), what);
  values.copy_from(host, stream);  // from pageable memory: staged before it returns
}

void MpiStartedSums::start(Tensor& values, cudaStream_t stream, std::string_view what) {
  check_exchange(w_, values, nullptr, what);
  if (!values.is_cuda()) {
    w_.allreduce_sum_start(std::span<float>(values.data<float>(), std::size_t(values.numel())), what);
  } else {
    Tensor host = values.to(Device::cpu(), stream);  // complete when it returns
    w_.allreduce_sum_start(std::span<float>(host.data<float>(), std::size_t(host.numel())), what);
    staged_.emplace_back(host, values);
  }
  w_.progress_started(what);
}

void MpiStartedSums::finish(cudaStream_t stream, std::string_view what) {
  w_.wait_started(what);
  for (auto& [host, device] : staged_) device.copy_from(host, stream);  // from pageable memory: staged on return
  staged_.clear();
}

bool built_with_nccl() {
#ifdef MELFORGE_WITH_NCCL
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Collectives> make_collectives(const World& w, Device device, Transport requested) {
  if (requested == Transport::mpi) return std::make_unique<MpiCollectives>(w, device.is_cuda() ? "dist.transport = mpi" : "");
  std::string why;
  if (!device.is_cuda()) {
    why = fmt::format("the ranks train on {}", device.str());
  } else if (const std::string no = nccl_unavailable(); !no.empty()) {
    why = no;
  } else if (w.distributed() && ranks_share_a_gpu(w, device)) {
    why = "ranks share a GPU; NCCL needs one GPU per rank";
  }
  MF_CHECK(requested != Transport::nccl || why.empty(), "dist.transport = nccl: NCCL cannot carry this job: {}; use "
           "dist.transport = mpi or auto", why);
  if (!why.empty()) return std::make_unique<MpiCollectives>(w, device.is_cuda() ? why : "");
  return make_nccl_collectives(w, device);
}

}  // namespace mf::dist
