// CPU parallelism for the CPU backend: a static split of [0, n) over all
// cores (OpenMP). Each index is processed by exactly one thread in a fixed
// order, so results do not depend on the thread count as long as `fn` writes
// only what its indices own.
#pragma once

#include <cstdint>
#include <functional>

namespace mf {

int cpu_threads();
void set_cpu_threads(int n);  // 0 = all cores

// Calls fn(begin, end) on disjoint chunks covering [0, n), in parallel.
// Chunks hold at least `grain` indices (so tiny loops stay on one thread).
void parallel_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& fn,
                  std::int64_t grain = 1);

// The lowest i in [0, n) with bad(i) true, or n when there is none: the same
// answer whatever the thread count (each chunk stops at its first).
std::int64_t parallel_find_first(std::int64_t n, const std::function<bool(std::int64_t)>& bad,
                                 std::int64_t grain = 1 << 16);

// Calls fn(i) for every i in [0, n): fn(0) on the calling thread, the others on
// std::threads of their own (for I/O workers, outside OpenMP). An index whose
// thread the system refuses (std::system_error) runs on the caller instead, so
// every index runs exactly once. Every thread is joined however the calls end
// (a joinable std::thread must never be destroyed: std::terminate), then the
// first exception thrown by fn is rethrown.
void run_on_threads(int n, const std::function<void(int)>& fn);

}  // namespace mf
