// dist::Collectives in one process (the job's transports are exercised under
// mpirun by test_train_cli_dist and test_train_cli_dist_gpu): the MPI
// transport's gather and sum of host tensors, the transport chosen on a CPU,
// refusing NCCL there with the reason, and NCCL loading at run time where
// this melforge was built with it.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "dist/collectives.hpp"
#include "dist/nccl_collectives.hpp"

using namespace mf;

TEST_CASE("dist::Collectives: one process on the CPU gathers and sums its own values over MPI") {
  const dist::World& w = dist::World::get();
  REQUIRE(w.size() == 1);
  auto c = dist::make_collectives(w, Device::cpu(), dist::Transport::automatic);
  CHECK(c->transport() == dist::Transport::mpi);
  const Tensor mine = Tensor::from_floats(std::vector<float>{1.f, -2.f, 3.5f}, {3});
  Tensor all = Tensor::empty({3}, DType::f32);
  c->allgather(mine, all, nullptr, "test");
  CHECK(all.to_floats() == mine.to_floats());
  Tensor sum = Tensor::from_floats(std::vector<float>{4.f, 5.f}, {2});
  c->allreduce_sum(sum, nullptr, "test");
  CHECK(sum.to_floats() == std::vector<float>{4.f, 5.f});
  Tensor wrong = Tensor::empty({4}, DType::f32);
  CHECK_THROWS_WITH_AS(c->allgather(mine, wrong, nullptr, "gathering the gradients"),
                       doctest::Contains("gathering the gradients"), std::exception);
}

TEST_CASE("dist::Collectives: NCCL on a CPU is refused, naming why") {
  CHECK_THROWS_WITH_AS(dist::make_collectives(dist::World::get(), Device::cpu(), dist::Transport::nccl),
                       doctest::Contains("dist.transport = nccl: NCCL cannot carry this job: the ranks train on cpu"),
                       std::exception);
}

TEST_CASE("dist: NCCL, where built, is loaded at run time; elsewhere the reason is named") {
  const std::string why = dist::nccl_unavailable();
  if (dist::built_with_nccl())
    CHECK_MESSAGE(why.empty(), why);
  else
    CHECK(why.find("built without NCCL") != std::string::npos);
}
