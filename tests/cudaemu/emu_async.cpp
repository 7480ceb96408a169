// ldmatrix and cp.async for melforge's CUDA emulator (emu_async.hpp).
//
// Written from NVIDIA's PTX ISA (https://docs.nvidia.com/cuda/parallel-thread-execution/),
// not from melforge's kernels; section titles below are the ISA's (their
// numbers move between ISA versions). Each rule is restated in our words.
//
// ldmatrix: "Warp Level Matrix Load Instruction: ldmatrix" (in the chapter on
// warp-level matrix multiply-accumulate instructions).
//   * .sync/.aligned: every thread of the warp executes the same ldmatrix (same
//     qualifiers) before any goes on; the result is undefined if a thread has
//     exited or the qualifiers differ. Emulated: a warp_exchange over all 32
//     lanes (a missing or exited lane aborts with a report), and every lane
//     checks that all lanes asked for the same .num and .trans.
//   * .num .x1/.x2/.x4 loads 1/2/4 matrices of 8x8 b16 elements. The row
//     addresses come from threads 0-7 (.x1), 0-15 (.x2) or 0-31 (.x4): thread
//     8i+r holds the address of row r of matrix i. For sm_80 and later the
//     other threads' addresses are not used (only sm_75 and below want them all
//     valid); the emulator neither reads nor checks them.
//   * a row is 16 contiguous bytes (four consecutive threads receive it, 4
//     bytes each) and its address must be naturally aligned to that, i.e. to 16
//     bytes. Emulated: fault otherwise; also a fault if the row lies in device
//     (global) memory, since the state space is .shared, or if it runs past the
//     end of the dynamic shared memory the launch asked for.
//   * destination: one 32-bit register per matrix (r[i] for matrix i). Thread
//     t gets, of each matrix, the fragment in row t/4 ("groupID"), elements
//     2*(t%4) and 2*(t%4)+1; the lower-indexed element sits in the lower half
//     (registers are listed low to high, as in the mma fragment tables).
//   * .trans: the matrix is read in column-major order, so the fragment of
//     thread t is column t/4, rows 2*(t%4) and 2*(t%4)+1 of the matrix as it
//     lies in memory.
//
// cp.async: "Data Movement and Conversion Instructions: cp.async",
// "... cp.async.commit_group" and "... cp.async.wait_group / cp.async.wait_all".
//   * cp.async starts a non-blocking copy of cp-size bytes (4, 8 or 16; .cg only
//     16) from src in the .global state space to dst in the .shared state
//     space. With the optional src-size < cp-size, only src-size bytes are read
//     and the rest of dst is filled with zeros; src-size > cp-size is undefined
//     (the emulator faults). Operands must be aligned to cp-size (the ISA's
//     natural-alignment rule for memory operands). Emulated: checked at issue;
//     a src inside a device allocation must stay inside it for src-size bytes
//     (none are read when src-size is 0, so then only alignment is checked).
//   * nothing orders the copy with later loads of the issuing thread, nor two
//     copies with each other, until the thread waits for the copy's group.
//     Emulated: at issue dst is overwritten with 0xFF bytes (NaN for f32, f16
//     and bf16) and the copy is recorded; it happens (reading src then) only
//     when a wait retires its group, so a read that comes too early sees NaN.
//     Other threads see the data once the issuing thread has waited and they
//     have passed a barrier after that wait, as the ISA requires.
//   * commit_group closes all copies the thread issued and has not committed
//     into a new group of its own; with none, the group is empty (complete).
//   * wait_group N returns once at most the N most recently committed groups of
//     the thread are pending and all older ones are complete; N = 0 waits for
//     every committed group. Uncommitted copies are not waited for. wait_all =
//     commit_group + wait_group 0.
//   * a thread that exits with copies pending: the ISA defines no wait at exit
//     and no way for another thread to wait for them, so no thread can
//     legitimately read their destination. Emulated: they stay pending (their
//     destination keeps reading NaN) until every thread of the block has
//     exited, and complete then (so the data lands, as it would on hardware,
//     but at the latest moment; a reader shows as NaN). No fault: prefetches
//     issued past the last tile and never waited for are legal.
#include "tests/cudaemu/emu_async.hpp"

#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "tests/cudaemu/emu_core.hpp"
#include "tests/cudaemu/emu_exec.hpp"

namespace mf_emu {

namespace {

[[noreturn]] void fault(const std::string& what, const char* file, int line) { kernel_fault(what.c_str(), file, line); }

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

// Shared-memory operand of ldmatrix / cp.async: not device memory, and inside
// the dynamic shared memory when it starts there.
void check_shared(const char* op, const void* p, std::size_t n, const char* file, int line) {
  const Located at = locate(p);
  if (at.space == Space::allocation || at.space == Space::past_end)
    fault(std::string(op) + ": address " + hex(p) + " is in " + (at.device ? "device" : "pinned host") +
              " memory, not in shared memory",
          file, line);
  if (at.space == Space::dynamic_shared && reinterpret_cast<std::uintptr_t>(p) + n > at.base + at.size)
    fault(std::string(op) + ": " + std::to_string(n) + " bytes at offset " +
              std::to_string(reinterpret_cast<std::uintptr_t>(p) - at.base) +
              " run past the end of the dynamic shared memory (" + std::to_string(at.size) + " bytes at launch)",
          file, line);
}

struct Copy {
  void* dst;
  const void* src;
  int cp_size, src_size;
};

struct ThreadCopies {
  std::vector<Copy> open;                   // issued, not committed
  std::deque<std::vector<Copy>> committed;  // oldest first
};

std::vector<ThreadCopies> g_threads;  // of the running block (blocks run one at a time)

void perform(const Copy& c) {
  std::memcpy(c.dst, c.src, std::size_t(c.src_size));
  std::memset(static_cast<unsigned char*>(c.dst) + c.src_size, 0, std::size_t(c.cp_size - c.src_size));
}

ThreadCopies& mine() { return g_threads[std::size_t(linear_thread_id())]; }

}  // namespace

void async_block_begin(int nthreads) {
  g_threads.resize(std::size_t(nthreads));
  for (ThreadCopies& t : g_threads) {
    t.open.clear();
    t.committed.clear();
  }
}

void async_block_end() {
  for (ThreadCopies& t : g_threads) {
    for (const auto& g : t.committed)
      for (const Copy& c : g) perform(c);
    for (const Copy& c : t.open) perform(c);
    t.committed.clear();
    t.open.clear();
  }
}

void ldmatrix(int count, bool trans, const void* row_addr, std::uint32_t* out, const char* file, int line) {
  if (count != 1 && count != 2 && count != 4) fault("ldmatrix: .num must be .x1, .x2 or .x4, found x" + std::to_string(count), file, line);
  const int lane = lane_id();
  if (lane < 8 * count) {  // this lane's address is used: row lane%8 of matrix lane/8
    if (reinterpret_cast<std::uintptr_t>(row_addr) % 16 != 0)
      fault("ldmatrix: the address " + hex(row_addr) + " of row " + std::to_string(lane % 8) + " of matrix " +
                std::to_string(lane / 8) + " (lane " + std::to_string(lane) + ") is not 16-byte aligned",
            file, line);
    check_shared("ldmatrix", row_addr, 16, file, line);
  }
  struct Req {
    const void* addr;
    std::int32_t count, trans;
  };
  const Req me{row_addr, count, trans ? 1 : 0};
  Req all[32];
  warp_exchange(0xffffffffu, &me, sizeof me, all, file, line);
  for (int l = 0; l < 32; ++l)
    if (all[l].count != count || all[l].trans != me.trans)
      fault("ldmatrix: lanes of the warp disagree on .num/.trans (lane " + std::to_string(l) + ": x" +
                std::to_string(all[l].count) + (all[l].trans ? ".trans" : "") + ", this lane: x" +
                std::to_string(count) + (trans ? ".trans" : "") + ")",
            file, line);
  const int g = lane / 4, t = lane % 4;
  for (int i = 0; i < count; ++i) {
    std::uint16_t lo = 0, hi = 0;
    if (!trans) {  // row g, elements 2t and 2t+1
      const auto* row = static_cast<const unsigned char*>(all[8 * i + g].addr);
      std::memcpy(&lo, row + 2 * (2 * t), 2);
      std::memcpy(&hi, row + 2 * (2 * t + 1), 2);
    } else {  // column g, rows 2t and 2t+1
      const auto* r0 = static_cast<const unsigned char*>(all[8 * i + 2 * t].addr);
      const auto* r1 = static_cast<const unsigned char*>(all[8 * i + 2 * t + 1].addr);
      std::memcpy(&lo, r0 + 2 * g, 2);
      std::memcpy(&hi, r1 + 2 * g, 2);
    }
    out[i] = std::uint32_t(lo) | (std::uint32_t(hi) << 16);
  }
}

void cp_async(void* dst_shared, const void* src_global, int cp_size, int src_size, const char* file, int line) {
  if (cp_size != 4 && cp_size != 8 && cp_size != 16)
    fault("cp.async: cp-size must be 4, 8 or 16, found " + std::to_string(cp_size), file, line);
  if (src_size < 0 || src_size > cp_size)
    fault("cp.async: src-size " + std::to_string(src_size) + " is outside 0.." + std::to_string(cp_size), file, line);
  if (reinterpret_cast<std::uintptr_t>(dst_shared) % std::uintptr_t(cp_size) != 0)
    fault("cp.async: destination " + hex(dst_shared) + " is not aligned to cp-size " + std::to_string(cp_size), file, line);
  if (reinterpret_cast<std::uintptr_t>(src_global) % std::uintptr_t(cp_size) != 0)
    fault("cp.async: source " + hex(src_global) + " is not aligned to cp-size " + std::to_string(cp_size), file, line);
  check_shared("cp.async destination", dst_shared, std::size_t(cp_size), file, line);
  const Located src = locate(src_global);
  if (src.space == Space::dynamic_shared)
    fault("cp.async: source " + hex(src_global) + " is in shared memory, not global memory", file, line);
  if (src_size > 0) {
    if (src.space == Space::past_end)
      fault("cp.async: source " + hex(src_global) + " lies past the end of an allocation of " +
                std::to_string(src.size) + " bytes",
            file, line);
    if (src.space == Space::allocation &&
        reinterpret_cast<std::uintptr_t>(src_global) + std::uintptr_t(src_size) > src.base + src.size)
      fault("cp.async: " + std::to_string(src_size) + " source bytes at offset " +
                std::to_string(reinterpret_cast<std::uintptr_t>(src_global) - src.base) + " overrun an allocation of " +
                std::to_string(src.size) + " bytes",
            file, line);
  }
  std::memset(dst_shared, 0xFF, std::size_t(cp_size));  // not there yet: reads as NaN until a wait
  mine().open.push_back(Copy{dst_shared, src_global, cp_size, src_size});
}

void cp_async_commit_group(const char*, int) {
  ThreadCopies& t = mine();
  t.committed.push_back(std::move(t.open));
  t.open.clear();
}

void cp_async_wait_group(int n, const char* file, int line) {
  if (n < 0) fault("cp.async.wait_group: N must be >= 0, found " + std::to_string(n), file, line);
  ThreadCopies& t = mine();
  while (t.committed.size() > std::size_t(n)) {
    for (const Copy& c : t.committed.front()) perform(c);
    t.committed.pop_front();
  }
}

}  // namespace mf_emu
