// The block executor of melforge's CUDA emulator: a launch's blocks run one
// after another; a block's threads are ucontext fibers on the launching OS
// thread, resumed round-robin (order set by MELFORGE_EMU_SCHEDULE), each
// running until it reaches a __syncthreads, a warp collective or its end.
#include "tests/cudaemu/emu_core.hpp"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "tests/cudaemu/emu_exec.hpp"

namespace mf_emu {

namespace {

constexpr std::size_t kStackBytes = std::size_t(256) << 10;
constexpr std::size_t kMaxExchangeBytes = 256;

enum class Wait { none, block, warp, done };

struct Fiber {
  ucontext_t ctx{};
  void* jb[5] = {};
  bool started = false;
  char* stack = nullptr;  // mmap'd, with a guard page below
  Idx3 tid;
  int linear = 0;
  Wait wait = Wait::none;
  unsigned wait_gen = 0;
};

struct WarpState {
  unsigned live_mask = 0;  // lanes that exist and have not exited
  unsigned arrived_mask = 0;
  unsigned gen = 0;
  unsigned mask = 0;
  std::size_t bytes = 0;
  const char* file = nullptr;
  int line = 0;
  unsigned char data[32 * kMaxExchangeBytes];
  unsigned char result[32 * kMaxExchangeBytes];
};

struct BlockState {
  Idx3 block_idx, block_dim, grid_dim;
  int nthreads = 0, live = 0;
  int bar_arrived = 0;
  unsigned bar_gen = 0;
  const char* bar_file = nullptr;
  int bar_line = 0;
  std::vector<WarpState> warps;
  const std::function<void()>* body = nullptr;
  const char* kernel = "";
  std::string fault;
};

struct Executor {
  std::vector<Fiber> fibers;
  void* sched_jb[5] = {};
  BlockState block;
  Fiber* current = nullptr;
  std::mt19937 rng{12345};
  Schedule policy = Schedule::forward;

  Executor() {
    const char* s = std::getenv("MELFORGE_EMU_SCHEDULE");
    const std::string v = s ? s : "forward";
    if (v == "reverse") policy = Schedule::reverse;
    else if (v == "shuffle") policy = Schedule::shuffle;
    else if (v != "forward") {
      std::fprintf(stderr, "melforge CUDA emulator: MELFORGE_EMU_SCHEDULE must be forward, reverse or shuffle, found '%s'\n",
                   v.c_str());
      std::abort();
    }
  }
  ~Executor() {
    for (Fiber& f : fibers)
      if (f.stack) munmap(f.stack - getpagesize(), kStackBytes + std::size_t(getpagesize()));
  }
};

Executor& exec() {
  static Executor e;  // launches are serialized by the runtime's launch lock
  return e;
}

thread_local Fiber* t_fiber = nullptr;
thread_local BlockState* t_block = nullptr;

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "melforge CUDA emulator: %s\n", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

Fiber& me(const char* what) {
  if (!t_fiber) die(std::string(what) + " called outside a kernel");
  return *t_fiber;
}

std::string where(const char* file, int line) { return std::string(file ? file : "?") + ":" + std::to_string(line); }

std::string who(const Fiber& f) {
  const BlockState& b = *t_block;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s block (%u,%u,%u) thread (%u,%u,%u)", b.kernel, b.block_idx.x, b.block_idx.y,
                b.block_idx.z, f.tid.x, f.tid.y, f.tid.z);
  return buf;
}

// Switching: a fiber's first start goes through makecontext/swapcontext;
// every later switch is a __builtin_setjmp/__builtin_longjmp pair (no signal
// mask syscall), and a fiber that finishes a CUDA thread parks in its loop to
// run the next thread given to it, so a block costs no context set-up.
[[gnu::noinline]] void yield(Fiber& f) {
  if (__builtin_setjmp(f.jb) == 0) __builtin_longjmp(exec().sched_jb, 1);
}

void finish_thread(Executor& e, Fiber& f) {
  // Exit: the thread no longer counts for barriers or its warp.
  BlockState& b = e.block;
  f.wait = Wait::done;
  --b.live;
  if (b.bar_arrived > 0 && b.bar_arrived == b.live) {
    b.bar_arrived = 0;
    ++b.bar_gen;
  }
  WarpState& w = b.warps[std::size_t(f.linear / 32)];
  const unsigned bit = 1u << (f.linear % 32);
  w.live_mask &= ~bit;
  if (w.arrived_mask != 0 && (w.mask & bit) != 0 && (w.arrived_mask & bit) == 0)
    if (e.block.fault.empty())
      e.block.fault = who(f) + " exited while its warp waits for it in a collective at " + where(w.file, w.line);
  if (w.arrived_mask != 0 && w.arrived_mask == (w.mask & w.live_mask) && (w.mask & ~w.live_mask) == 0) {
    std::memcpy(w.result, w.data, 32 * w.bytes);
    w.arrived_mask = 0;
    ++w.gen;
  }
}

void fiber_main() {
  for (;;) {
    Executor& e = exec();
    Fiber& f = *e.current;
    try {
      (*e.block.body)();
    } catch (const std::exception& ex) {
      if (e.block.fault.empty()) e.block.fault = who(f) + ": " + ex.what();
    }
    finish_thread(e, f);
    yield(f);  // resumed later for another CUDA thread
  }
}

[[gnu::noinline]] void resume(Executor& e, Fiber& f) {
  if (__builtin_setjmp(e.sched_jb) != 0) return;  // the fiber yielded
  if (f.started) __builtin_longjmp(f.jb, 1);
  f.started = true;
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack;
  f.ctx.uc_stack.ss_size = kStackBytes;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, fiber_main, 0);
  ucontext_t here;
  swapcontext(&here, &f.ctx);  // never resumed: the fiber comes back by longjmp
}

}  // namespace

const Idx3& thread_idx() { return me("threadIdx").tid; }
const Idx3& block_idx() { return me("blockIdx"), t_block->block_idx; }
const Idx3& block_dim() { return me("blockDim"), t_block->block_dim; }
const Idx3& grid_dim() { return me("gridDim"), t_block->grid_dim; }
int lane_id() { return me("lane id").linear % 32; }
int linear_thread_id() { return me("thread index").linear; }

void syncthreads(const char* file, int line) {
  Fiber& f = me("__syncthreads");
  BlockState& b = *t_block;
  if (b.bar_arrived == 0) {
    b.bar_file = file;
    b.bar_line = line;
  } else if (b.bar_line != line || std::strcmp(b.bar_file, file) != 0) {
    die(who(f) + " reached __syncthreads at " + where(file, line) + " while other threads wait at " +
        where(b.bar_file, b.bar_line) + " (divergent barrier)");
  }
  f.wait = Wait::block;
  f.wait_gen = b.bar_gen;
  if (++b.bar_arrived == b.live) {
    b.bar_arrived = 0;
    ++b.bar_gen;
  }
  yield(f);
}

void warp_exchange(unsigned mask, const void* mine, std::size_t bytes, void* all, const char* file, int line) {
  Fiber& f = me("warp collective");
  BlockState& b = *t_block;
  WarpState& w = b.warps[std::size_t(f.linear / 32)];
  const int lane = f.linear % 32;
  const unsigned bit = 1u << lane;
  if (bytes > kMaxExchangeBytes) die("warp exchange of more than 256 bytes per lane");
  if ((mask & bit) == 0)
    die(who(f) + " calls a warp collective at " + where(file, line) + " with a mask that excludes its own lane");
  if ((mask & ~w.live_mask) != 0)
    die(who(f) + ": warp collective at " + where(file, line) + " names lanes that do not exist or have exited (mask " +
        std::to_string(mask) + ", live " + std::to_string(w.live_mask) + ")");
  if (w.arrived_mask == 0) {
    w.mask = mask;
    w.bytes = bytes;
    w.file = file;
    w.line = line;
    std::memset(w.data, 0, 32 * bytes);  // lanes outside the mask read zeros
  } else if (w.mask != mask || w.bytes != bytes || w.line != line || std::strcmp(w.file, file) != 0) {
    die(who(f) + " reached a warp collective at " + where(file, line) + " while lanes of its warp wait at " +
        where(w.file, w.line) + " (divergent or mismatched collective)");
  }
  std::memcpy(w.data + std::size_t(lane) * bytes, mine, bytes);
  w.arrived_mask |= bit;
  f.wait = Wait::warp;
  f.wait_gen = w.gen;
  if (w.arrived_mask == w.mask) {
    std::memcpy(w.result, w.data, 32 * bytes);
    w.arrived_mask = 0;
    ++w.gen;
  }
  yield(f);
  std::memcpy(all, w.result, 32 * bytes);
}

void set_schedule(Schedule s) { exec().policy = s; }

void kernel_fault(const char* what, const char* file, int line) {
  if (t_fiber) die(who(*t_fiber) + ": " + what + " at " + where(file, line));
  die(std::string(what) + " at " + where(file, line));
}

void run_grid(const Idx3& grid, const Idx3& block, const std::function<void()>& body, const char* kernel) {
  Executor& e = exec();
  const int nthreads = int(block.x * block.y * block.z);
  const long page = getpagesize();
  while (int(e.fibers.size()) < nthreads) {
    Fiber f;
    void* mem = mmap(nullptr, kStackBytes + std::size_t(page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (mem == MAP_FAILED) die("cannot map a fiber stack");
    mprotect(mem, std::size_t(page), PROT_NONE);  // guard page: a stack overflow faults
    f.stack = static_cast<char*>(mem) + page;
    e.fibers.push_back(f);
  }
  std::vector<int> order(static_cast<std::size_t>(nthreads));
  for (int i = 0; i < nthreads; ++i) order[std::size_t(i)] = i;
  if (e.policy == Schedule::reverse) std::reverse(order.begin(), order.end());

  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        BlockState& b = e.block;
        b.block_idx = {bx, by, bz};
        b.block_dim = block;
        b.grid_dim = grid;
        b.nthreads = b.live = nthreads;
        b.bar_arrived = 0;
        b.body = &body;
        b.kernel = kernel;
        b.fault.clear();
        b.warps.resize(std::size_t((nthreads + 31) / 32));  // buffers are reset per exchange
        for (int wi = 0; wi < int(b.warps.size()); ++wi) {
          const int lanes = std::min(32, nthreads - wi * 32);
          WarpState& w = b.warps[std::size_t(wi)];
          w.live_mask = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u);
          w.arrived_mask = w.mask = 0;
          w.gen = 0;
        }
        for (int i = 0; i < nthreads; ++i) {
          Fiber& f = e.fibers[std::size_t(i)];
          f.linear = i;
          f.tid = {unsigned(i) % block.x, (unsigned(i) / block.x) % block.y, unsigned(i) / (block.x * block.y)};
          f.wait = Wait::none;
        }
        t_block = &b;
        async_block_begin(nthreads);
        int done = 0;
        while (done < nthreads) {
          if (e.policy == Schedule::shuffle) std::shuffle(order.begin(), order.end(), e.rng);
          bool progress = false;
          done = 0;
          for (int i : order) {
            Fiber& f = e.fibers[std::size_t(i)];
            if (f.wait == Wait::done) {
              ++done;
              continue;
            }
            if (f.wait == Wait::block && f.wait_gen == b.bar_gen) continue;
            if (f.wait == Wait::warp && f.wait_gen == b.warps[std::size_t(i / 32)].gen) continue;
            f.wait = Wait::none;
            e.current = &f;
            t_fiber = &f;
            resume(e, f);
            t_fiber = nullptr;
            progress = true;
            if (!b.fault.empty()) die(b.fault);
            if (f.wait == Wait::done) ++done;
          }
          if (!progress && done < nthreads) {
            std::string msg = std::string("deadlock in ") + kernel + " block (" + std::to_string(bx) + "," +
                              std::to_string(by) + "," + std::to_string(bz) + "):";
            for (int i = 0; i < nthreads && i < 64 * 32; ++i) {
              const Fiber& f = e.fibers[std::size_t(i)];
              if (f.wait == Wait::block)
                msg += " thread " + std::to_string(i) + " waits at __syncthreads " + where(b.bar_file, b.bar_line) + ";";
              else if (f.wait == Wait::warp) {
                const WarpState& w = b.warps[std::size_t(i / 32)];
                msg += " thread " + std::to_string(i) + " waits in a warp collective at " + where(w.file, w.line) + ";";
              }
              if (msg.size() > 2000) break;
            }
            die(msg);
          }
        }
        async_block_end();  // cp.async copies no thread waited for land now, unobserved
        t_block = nullptr;
      }
}

}  // namespace mf_emu
