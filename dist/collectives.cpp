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

void check_f32(const Tensor& t, std::string_view what, std::string_view name) {
  MF_CHECK(t.dtype() == DType::f32, "{}: the exchanged {} must be f32, found {}", what, name, dtype_name(t.dtype()));
}

// World's MPI collectives; a tensor on a GPU goes through host memory.
class MpiCollectives final : public Collectives {
 public:
  MpiCollectives(const World& w, std::string why) : w_(w), why_(std::move(why)) {}

  void allgather(const Tensor& mine, Tensor& all, cudaStream_t stream, std::string_view what) override {
    check_f32(mine, what, "tensor");
    check_f32(all, what, "result");
    MF_CHECK(all.numel() == mine.numel() * w_.size() && all.device() == mine.device(),
             "{}: gathering {} values of {} ranks into {}", what, mine.numel(), w_.size(), all.str());
    const Tensor host = mine.is_cuda() ? mine.to(Device::cpu(), stream) : mine;  // complete when it returns
    const std::vector<float> got =
        w_.allgather(std::span<const float>(host.data<float>(), std::size_t(host.numel())), what);
    if (!all.is_cuda()) {
      std::copy(got.begin(), got.end(), all.data<float>());
      return;
    }
    // From pageable memory: staged before copy_from returns, so `got` may go.
    all.copy_from(Tensor::from_floats(got, {std::int64_t(got.size())}), stream);
  }

  void allreduce_sum(Tensor& values, cudaStream_t stream, std::string_view what) override {
    check_f32(values, what, "tensor");
    if (!values.is_cuda()) {
      w_.allreduce_sum(std::span<float>(values.data<float>(), std::size_t(values.numel())), what);
      return;
    }
    Tensor host = values.to(Device::cpu(), stream);
    w_.allreduce_sum(std::span<float>(host.data<float>(), std::size_t(host.numel())), what);
    values.copy_from(host, stream);  // host memory outlives the copy: copy_from to a GPU from pageable is staged
  }

  Transport transport() const override { return Transport::mpi; }
  std::string describe() const override {
    return why_.empty() ? "MPI" : fmt::format("MPI through host memory ({})", why_);
  }

 private:
  const World& w_;
  std::string why_;
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

bool built_with_nccl() {
#ifdef MELFORGE_WITH_NCCL
  return true;
#else
  return false;
#endif
}

std::string_view transport_name(Transport t) {
  switch (t) {
    case Transport::mpi: return "mpi";
    case Transport::nccl: return "nccl";
    default: return "auto";
  }
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
