#include "dist/world.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>

#include "engine/error.hpp"

#ifdef MELFORGE_WITH_MPI
#include <mpi.h>
#endif

namespace mf::dist {

namespace {

// The size a launcher announced: Open MPI's mpirun, MPICH's Hydra (and Intel
// MPI), or PMIx (srun --mpi=pmix; the size is then MPI's to tell).
int announced_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return std::getenv("PMIX_RANK") ? 2 : 1;  // some launcher started us: ask MPI
}

#ifdef MELFORGE_WITH_MPI
void check(int rc, int rank, std::string_view what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  MF_THROW("rank {}: {}: MPI error: {}", rank, what, std::string(text, std::size_t(len)));
}
#endif

}  // namespace

bool built_with_mpi() {
#ifdef MELFORGE_WITH_MPI
  return true;
#else
  return false;
#endif
}

bool launched_as_job() { return announced_size() > 1; }

World& World::get() {
  static World world;
  return world;
}

World::World() {
  if (!launched_as_job()) return;
#ifdef MELFORGE_WITH_MPI
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), 0, "starting MPI");
  mpi_ = true;
  // Errors come back as codes (then mf::Error), not as MPI's own abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm node = MPI_COMM_NULL;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node), rank_,
        "finding the ranks on this node");
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_size(node, &local_size_);
  MPI_Comm_free(&node);
  if (const char* t = std::getenv("MELFORGE_DIST_TIMEOUT"); t && std::atof(t) > 0) timeout_s_ = std::atof(t);
  if (size_ > 1) watchdog_ = std::thread([this] { watch(); });
#else
  MF_THROW("a launcher started this melforge as one of {} processes, but it was built without MPI "
           "(MELFORGE_MPI=OFF, or no MPI library was found): install libopenmpi-dev (tools/deps.sh) and rebuild, "
           "or run one process", announced_size());
#endif
}

namespace {
std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void World::set_timeout(double seconds) {
  if (!std::getenv("MELFORGE_DIST_TIMEOUT") && seconds > 0) timeout_s_ = seconds;
}

World::Waiting::Waiting(const World& w, std::string_view what) : w_(w) {
  {
    std::lock_guard lock(w_.what_mutex_);
    w_.waiting_for_ = what;
  }
  w_.waiting_since_ms_ = now_ms();
}

World::Waiting::~Waiting() { w_.waiting_since_ms_ = 0; }

void World::watch() {
  while (!stop_watch_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const std::int64_t since = waiting_since_ms_.load();
    if (since == 0 || double(now_ms() - since) < 1000.0 * timeout_s_.load()) continue;
    std::string what;
    {
      std::lock_guard lock(what_mutex_);
      what = waiting_for_;
    }
    // The main thread is blocked inside MPI: this thread cannot call it
    // (MPI_THREAD_FUNNELED). Exiting ends the job: the launcher sees a
    // process fail and stops the others.
    std::fprintf(stderr,
                 "melforge: error: rank %d: no answer from the other processes for %.0f s while %s (dist.timeout; a "
                 "process hangs or a node stopped answering): ending the job\n",
                 rank_, timeout_s_.load(), what.c_str());
    std::fflush(stderr);
    ::_exit(1);
  }
}

World::~World() {
  stop_watch_ = true;
  if (watchdog_.joinable()) watchdog_.join();
#ifdef MELFORGE_WITH_MPI
  for (void* r : started_) delete static_cast<MPI_Request*>(r);  // never waited for: the job is ending
  int finalized = 0;
  if (mpi_ && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Finalize();
#endif
}

std::string World::engine() const {
#ifdef MELFORGE_WITH_MPI
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string v(version, std::size_t(len));
  if (const auto nl = v.find_first_of("\r\n"); nl != std::string::npos) v.resize(nl);
  return mpi_ ? v : "none (one process; " + v + " available)";
#else
  return "none (one process; built without MPI)";
#endif
}

void World::barrier(std::string_view what) const {
#ifdef MELFORGE_WITH_MPI
  if (distributed()) {
    const Waiting waiting(*this, what);
    check(MPI_Barrier(MPI_COMM_WORLD), rank_, what);
  }
#else
  (void)what;
#endif
}

std::string World::broadcast(const std::string& text, std::string_view what) const {
#ifdef MELFORGE_WITH_MPI
  if (!distributed()) return text;
  const Waiting waiting(*this, what);
  unsigned long long n = text.size();
  check(MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD), rank_, what);
  std::string out = is_root() ? text : std::string(n, '\0');
  check(MPI_Bcast(out.data(), int(n), MPI_CHAR, 0, MPI_COMM_WORLD), rank_, what);
  return out;
#else
  (void)what;
  return text;
#endif
}

#ifdef MELFORGE_WITH_MPI
template <class T>
static std::vector<T> allgather_as(const World& w, std::span<const T> mine, MPI_Datatype type, std::string_view what) {
  std::vector<T> out(mine.size() * std::size_t(w.size()));
  MF_CHECK(mine.size() <= std::size_t(std::numeric_limits<int>::max()), "rank {}: {}: {} values are too many for "
           "one MPI call", w.rank(), what, mine.size());
  check(MPI_Allgather(mine.data(), int(mine.size()), type, out.data(), int(mine.size()), type, MPI_COMM_WORLD),
        w.rank(), what);
  return out;
}
#endif

std::vector<float> World::allgather(std::span<const float> mine, std::string_view what) const {
#ifdef MELFORGE_WITH_MPI
  if (distributed()) {
    const Waiting waiting(*this, what);
    return allgather_as(*this, mine, MPI_FLOAT, what);
  }
#endif
  (void)what;
  return {mine.begin(), mine.end()};
}

std::vector<double> World::allgather(std::span<const double> mine, std::string_view what) const {
#ifdef MELFORGE_WITH_MPI
  if (distributed()) {
    const Waiting waiting(*this, what);
    return allgather_as(*this, mine, MPI_DOUBLE, what);
  }
#endif
  (void)what;
  return {mine.begin(), mine.end()};
}

void World::allreduce_sum(std::span<float> values, std::string_view what) const {
#ifdef MELFORGE_WITH_MPI
  if (!distributed()) return;
  MF_CHECK(values.size() <= std::size_t(std::numeric_limits<int>::max()), "rank {}: {}: {} values are too many for "
           "one MPI call", rank_, what, values.size());
  const Waiting waiting(*this, what);
  check(MPI_Allreduce(MPI_IN_PLACE, values.data(), int(values.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), rank_,
        what);
#else
  (void)values;
  (void)what;
#endif
}

void World::allreduce_sum_start(std::span<float> values, std::string_view what) const {
#ifdef MELFORGE_WITH_MPI
  if (!distributed()) return;
  MF_CHECK(values.size() <= std::size_t(std::numeric_limits<int>::max()), "rank {}: {}: {} values are too many for "
           "one MPI call", rank_, what, values.size());
  auto request = std::make_unique<MPI_Request>(MPI_REQUEST_NULL);
  check(MPI_Iallreduce(MPI_IN_PLACE, values.data(), int(values.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                       request.get()),
        rank_, what);
  started_.push_back(request.release());
#else
  (void)values;
  (void)what;
#endif
}

void World::progress_started(std::string_view what) const {
#ifdef MELFORGE_WITH_MPI
  for (void* r : started_) {
    int done = 0;
    check(MPI_Test(static_cast<MPI_Request*>(r), &done, MPI_STATUS_IGNORE), rank_, what);
  }
#else
  (void)what;
#endif
}

void World::wait_started(std::string_view what) const {
#ifdef MELFORGE_WITH_MPI
  if (started_.empty()) return;
  const Waiting waiting(*this, what);
  std::vector<std::unique_ptr<MPI_Request>> requests;  // freed however this ends
  for (void* r : started_) requests.emplace_back(static_cast<MPI_Request*>(r));
  started_.clear();
  for (auto& r : requests) check(MPI_Wait(r.get(), MPI_STATUS_IGNORE), rank_, what);
#else
  (void)what;
#endif
}

bool World::any(bool flag, std::string_view what) const {
#ifdef MELFORGE_WITH_MPI
  if (!distributed()) return flag;
  const Waiting waiting(*this, what);
  int in = flag ? 1 : 0, out = 0;
  check(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), rank_, what);
  return out != 0;
#else
  (void)what;
  return flag;
#endif
}

double World::ordered_sum(double v, std::string_view what) const {
  const std::vector<double> all = allgather(std::span<const double>(&v, 1), what);
  double s = 0;
  for (const double x : all) s += x;
  return s;
}

void end_job_after_error(int exit_code) {
#ifdef MELFORGE_WITH_MPI
  int initialized = 0, finalized = 0, size = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, exit_code);
#else
  (void)exit_code;
#endif
}

}  // namespace mf::dist
