// The NCCL transport of dist/collectives.hpp (dist/nccl_collectives.cpp):
// built with MELFORGE_WITH_NCCL only (nccl.h at build time); libnccl itself
// is loaded at run time, on first use.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dist/collectives.hpp"

namespace mf::dist {

// One NCCL communicator over the job's ranks, each on its `device` (a GPU of
// its own): rank 0 makes NCCL's id and World broadcasts it.
std::unique_ptr<Collectives> make_nccl_collectives(const World& world, Device device);
// The MPI transport's exchanges (dist/collectives.cpp), which the NCCL one
// also uses for tensors in host memory (batch norm's terms): f32 checked,
// GPU tensors staged through host memory.
void check_exchange(const World& w, const Tensor& mine, const Tensor* all, std::string_view what);
void mpi_allgather(const World& w, const Tensor& mine, Tensor& all, cudaStream_t stream, std::string_view what);
void mpi_allreduce_sum(const World& w, Tensor& values, cudaStream_t stream, std::string_view what);
// The MPI transport's started sums (Collectives::allreduce_sum_start): a
// GPU tensor's values are copied to host memory when started and back when
// finished.
class MpiStartedSums {
 public:
  explicit MpiStartedSums(const World& w) : w_(w) {}
  void start(Tensor& values, cudaStream_t stream, std::string_view what);
  void finish(cudaStream_t stream, std::string_view what);

 private:
  const World& w_;
  std::vector<std::pair<Tensor, Tensor>> staged_;  // (host copy, the GPU tensor it goes back to)
};
// Why NCCL cannot be used here ("" when it can): not built, or libnccl not
// loadable (loads it on the first call).
std::string nccl_unavailable();

}  // namespace mf::dist
