// The NCCL transport of dist/collectives.hpp (dist/nccl_collectives.cpp):
// built with MELFORGE_WITH_NCCL only; without it make_nccl_collectives throws.
#pragma once

#include <memory>

#include "dist/collectives.hpp"

namespace mf::dist {

// One NCCL communicator over the job's ranks, each on its `device` (a GPU of
// its own): rank 0 makes NCCL's id and World broadcasts it.
std::unique_ptr<Collectives> make_nccl_collectives(const World& world, Device device);

}  // namespace mf::dist
