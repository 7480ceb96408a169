// The world of a data-parallel job: the processes (ranks) a launcher started,
// and the collectives the trainer uses between them.
//
// A launcher (mpirun/mpiexec, or srun with PMI/PMIx) starts N copies of
// melforge and leaves its rank in the environment; World::get() then joins
// them through MPI (docs/decisions.md, "Data-parallel training"). Started any
// other way, the world is this one process and every collective returns at
// once, so the trainer has one code path. A build without MPI
// (MELFORGE_MPI=OFF, or no MPI library found) started by a launcher refuses to
// run, rather than training N independent copies.
//
// Collectives are called by every rank in the same order; each takes `what`
// (what the job was doing) for its error messages. An MPI error is an
// mf::Error naming the rank and `what`; main() then ends the whole job
// (end_job_after_error), so a failed rank never leaves the others waiting.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <string_view>
#include <vector>

namespace mf::dist {

class World {
 public:
  // This process's world, set up on the first call (MPI_Init when a launcher
  // started it). Not thread-safe: call it first from the main thread.
  static World& get();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // among the ranks on this node (picks the GPU)
  int local_size() const { return local_size_; }
  bool is_root() const { return rank_ == 0; }
  bool distributed() const { return size_ > 1; }
  // "Open MPI v4.1.4, ..." or "none (one process)".
  std::string engine() const;

  void barrier(std::string_view what) const;
  // Rank 0's `text` on every rank (the others' arguments are ignored).
  std::string broadcast(const std::string& text, std::string_view what) const;
  // Every rank's `mine` (the same length on each) concatenated in rank order.
  std::vector<float> allgather(std::span<const float> mine, std::string_view what) const;
  std::vector<double> allgather(std::span<const double> mine, std::string_view what) const;
  // The element-wise sum over ranks of `values`, in place on every rank: the
  // MPI library's all-reduce (its order of additions is its own: the same
  // bits for the same world size and library, not those of one process).
  void allreduce_sum(std::span<float> values, std::string_view what) const;
  // The same sum started without waiting (MPI_Iallreduce, in place): `values`
  // must stay alive and untouched until wait_started() returns. Several may be
  // in flight; every rank starts the same ones in the same order.
  void allreduce_sum_start(std::span<float> values, std::string_view what) const;
  // Lets the library move the started sums along (MPI progresses inside its
  // calls), without waiting.
  void progress_started(std::string_view what) const;
  // Until every started sum is complete (bounded by the timeout, as any collective).
  void wait_started(std::string_view what) const;
  // Whether `flag` is true on any rank.
  bool any(bool flag, std::string_view what) const;
  // The sum of every rank's `v`, added in rank order: the same bits on every rank.
  double ordered_sum(double v, std::string_view what) const;

  // The longest a collective may wait for the other ranks (dist.timeout;
  // MELFORGE_DIST_TIMEOUT, in seconds, when set, wins; default 300 s). A rank
  // that waits longer prints "rank R: no answer from the other processes for
  // N s while WHAT" and exits with status 1, which ends the job: a process
  // that hangs (or a node that stops answering) never leaves the job waiting.
  void set_timeout(double seconds);
  double timeout() const { return timeout_s_.load(); }

  // Marks this rank as waiting for the others (for `what`) until destroyed:
  // the watchdog ends the job when that lasts longer than the timeout. Every
  // collective here holds one; so does a wait for another library's
  // collective (NCCL's, on a stream).
  class Waiting {
   public:
    Waiting(const World& w, std::string_view what);
    ~Waiting();
    Waiting(const Waiting&) = delete;
    Waiting& operator=(const Waiting&) = delete;

   private:
    const World& w_;
  };

  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

 private:
  World();
  void watch();  // the watchdog thread's loop

  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  bool mpi_ = false;  // MPI initialised by this process
  std::atomic<double> timeout_s_{300};
  mutable std::atomic<std::int64_t> waiting_since_ms_{0};  // 0: not in a collective
  mutable std::mutex what_mutex_;
  mutable std::string waiting_for_;
  mutable std::vector<void*> started_;  // the started sums' requests (MPI_Request, boxed: no mpi.h here)
  std::atomic<bool> stop_watch_{false};
  std::thread watchdog_;
};

// Whether this melforge was built with MPI (MELFORGE_WITH_MPI).
bool built_with_mpi();
// Whether a launcher started this process as one of several (its environment
// says so), without initialising anything.
bool launched_as_job();
// After an error on this rank: when MPI is running with other ranks, ends the
// whole job (MPI_Abort), so that none waits for this one. Returns otherwise.
void end_job_after_error(int exit_code);

}  // namespace mf::dist
