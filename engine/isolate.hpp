// Running a call that may hang or crash in a child process, with a time limit.
//
// For calls into a library that can loop forever or corrupt memory on a
// malformed input file, and that melforge cannot fix: HDF5 1.10.8 (Debian 12's)
// hangs in H5HG_read on a damaged global heap, overlaps a memcpy there, and
// reads out of bounds in H5Aexists on a damaged object header (docs/decisions.md,
// "Damaged files and the HDF5 library"). The call runs in a fork()ed child that
// sends its result back as bytes, so the parent never makes the risky call
// itself: a child that crashes, is killed by a sanitizer report or runs past
// the limit becomes an mf::Error naming what was being done.
//
// Use it only for short calls (it costs a fork, about a millisecond) made
// while no other thread is inside the same library: a lock held by another
// thread at fork() time stays locked in the child.
#pragma once

#include <functional>
#include <string>

namespace mf {

// The time limit for isolated calls: `default_s`, or MELFORGE_ISOLATE_TIMEOUT
// (seconds, > 0) when that is set (tests and fuzzing use a short one).
double isolate_timeout_s(double default_s);

// Runs fn() in a child process and returns the bytes it returned. An mf::Error
// thrown by fn in the child is thrown again here with the same message; any
// other exception as std::runtime_error. Throws mf::Error "<what>: ..." when
// the child was killed by a signal, exited without an answer (a sanitizer
// report, exit()), or did not answer within timeout_s (it is then killed).
std::string run_isolated(const std::string& what, double timeout_s, const std::function<std::string()>& fn);

// Appending and reading back the few plain values an isolated call returns.
class ByteWriter {
 public:
  void u64(unsigned long long v);
  void f64(double v);
  void str(const std::string& s);
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};
class ByteReader {
 public:
  explicit ByteReader(const std::string& in) : in_(in) {}
  unsigned long long u64();
  double f64();
  std::string str();

 private:
  void need(std::size_t n) const;
  const std::string& in_;
  std::size_t pos_ = 0;
};

}  // namespace mf
