// How the processes of a data-parallel job exchange the training step's
// tensors (model::TrainConfig's gather and allreduce): the gradients, and
// batch norm's running-statistics terms.
//
// Two transports, chosen per job by make_collectives:
//   mpi   World's MPI collectives. Tensors in GPU memory are staged through
//         host memory (copied out, exchanged, copied back), so GPU ranks
//         train without NCCL, and several ranks may share one GPU.
//   nccl  NCCL's collectives on the step's stream, in device memory: one
//         GPU per rank (NCCL refuses two ranks on one GPU). Built where the
//         CUDA toolkit's NCCL is found (MELFORGE_NCCL, cmake/nccl.cmake).
// An all-gather moves bytes and adds nothing, so the ordered reduction's
// bits are the same over either transport; an all-reduce adds in its
// library's order (MPI's, NCCL's), so `fast` differs between them.
//
// Every call is a collective: every rank calls it, in the same order. It is
// complete in `stream`'s order when it returns (later work queued there sees
// the result), and a wait for the other ranks is bounded by World's timeout.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "dist/world.hpp"
#include "engine/device.hpp"
#include "engine/tensor.hpp"

namespace mf::dist {

enum class Transport { automatic, mpi, nccl };

class Collectives {
 public:
  virtual ~Collectives() = default;
  // Every rank's `mine` (f32, n values) into `all` (f32, world size x n
  // values, on mine's device), rank after rank.
  virtual void allgather(const Tensor& mine, Tensor& all, cudaStream_t stream, std::string_view what) = 0;
  // The element-wise sum over the ranks of `values` (f32), in place.
  virtual void allreduce_sum(Tensor& values, cudaStream_t stream, std::string_view what) = 0;
  // The same sum, started after the work queued on `stream` so far and left
  // to run beside what follows (dist.reduce = fast's buckets, overlapped with
  // the backward): MPI's non-blocking all-reduce (through host memory for a
  // GPU tensor), NCCL's on a stream of its own. `values` must not be written
  // until allreduce_finish; every rank starts the same sums in the same order.
  virtual void allreduce_sum_start(Tensor& values, cudaStream_t stream, std::string_view what) = 0;
  // Every started sum complete, in `stream`'s order (work queued there after
  // this sees the sums).
  virtual void allreduce_finish(cudaStream_t stream, std::string_view what) = 0;
  virtual Transport transport() const = 0;
  // For the start line: "NCCL 2.27.3", "MPI through host memory (...)".
  virtual std::string describe() const = 0;
};

// Whether this melforge was built with NCCL (MELFORGE_WITH_NCCL).
bool built_with_nccl();

// The job's collectives for tensors on `device`. `automatic` takes NCCL when
// it was built, the device is a GPU and no two ranks share one GPU, else MPI
// (describe() says why); `nccl` where it cannot run is an error saying why;
// `mpi` is always available.
std::unique_ptr<Collectives> make_collectives(const World& world, Device device, Transport requested);

}  // namespace mf::dist
