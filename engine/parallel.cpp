#include "engine/parallel.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace mf {

int cpu_threads() { return omp_get_max_threads(); }

void set_cpu_threads(int n) { omp_set_num_threads(n > 0 ? n : omp_get_num_procs()); }

void parallel_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& fn,
                  std::int64_t grain) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(grain, 1);
  const std::int64_t max_chunks = (n + grain - 1) / grain;
  const int threads = int(std::min<std::int64_t>(cpu_threads(), max_chunks));
  if (threads <= 1 || omp_in_parallel()) {
    fn(0, n);
    return;
  }
  std::exception_ptr error;
  std::mutex m;
#pragma omp parallel num_threads(threads)
  {
    const std::int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const std::int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    try {
      if (begin < end) fn(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(m);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

void run_on_threads(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  std::exception_ptr error;
  std::mutex m;
  auto call = [&](int i) noexcept {
    try {
      fn(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(m);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  std::vector<int> refused;
  pool.reserve(std::size_t(n - 1));  // no reallocation (and no throw) below once started
  refused.reserve(std::size_t(n - 1));
  for (int i = 1; i < n; ++i) {
    try {
      pool.emplace_back(call, i);
    } catch (const std::system_error&) {
      refused.push_back(i);
    }
  }
  call(0);
  for (int i : refused) call(i);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

std::int64_t parallel_find_first(std::int64_t n, const std::function<bool(std::int64_t)>& bad, std::int64_t grain) {
  std::atomic<std::int64_t> first{n};
  parallel_for(n, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      if (!bad(i)) continue;
      std::int64_t seen = first.load();
      while (i < seen && !first.compare_exchange_weak(seen, i)) {
      }
      return;
    }
  }, grain);
  return first.load();
}

}  // namespace mf
