#include "engine/isolate.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "engine/error.hpp"

// Set by the sanitizer runtimes (and by libFuzzer, which dumps the current
// input from it); weak so that plain builds link without them.
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

namespace mf {

double isolate_timeout_s(double default_s) {
  if (const char* e = std::getenv("MELFORGE_ISOLATE_TIMEOUT"); e && *e) {
    char* end = nullptr;
    const double v = std::strtod(e, &end);
    MF_CHECK(end && *end == '\0' && v > 0, "MELFORGE_ISOLATE_TIMEOUT: expected seconds > 0, found '{}'", e);
    return v;
  }
  return default_s;
}

namespace {

[[noreturn]] void child_main(int fd, const std::function<std::string()>& fn) {
  // A crash in the child is reported by the parent: no core dump, no libFuzzer
  // crash artifact for the parent's input, the default action for the signals.
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(nullptr);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGINT, SIGTERM, SIGALRM}) std::signal(sig, SIG_DFL);
  std::string msg;
  try {
    msg = "R" + fn();
  } catch (const Error& e) {
    ByteWriter w;
    w.str(e.message());
    w.str(e.where());
    msg = "E" + w.take();
  } catch (const std::exception& e) {
    msg = std::string("X") + e.what();
  } catch (...) {
    msg = "Xunknown exception";
  }
  std::size_t done = 0;
  while (done < msg.size()) {
    const ssize_t w = ::write(fd, msg.data() + done, msg.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) ::_exit(3);
    done += std::size_t(w);
  }
  ::_exit(0);  // no atexit handlers: the parent owns the libraries' state
}

}  // namespace

std::string run_isolated(const std::string& what, double timeout_s, const std::function<std::string()>& fn) {
  int fds[2];
  MF_CHECK(::pipe(fds) == 0, "{}: cannot create a pipe for the isolated call: {}", what, std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    MF_THROW("{}: cannot fork for the isolated call: {}", what, std::strerror(err));
  }
  if (pid == 0) {
    ::close(fds[0]);
    child_main(fds[1], fn);
  }
  ::close(fds[1]);

  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration<double>(timeout_s);
  std::string msg;
  bool timed_out = false;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int r = ::poll(&p, 1, int(std::min<long long>(left, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the child is done (or died)
    msg.append(buf, std::size_t(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    MF_THROW("{}: did not finish within {} s and was stopped (the file is probably damaged in a way that makes "
             "the HDF5 library loop)", what, timeout_s);
  if (WIFSIGNALED(status))
    MF_THROW("{}: the HDF5 library crashed ({}) on this file (it is probably damaged)", what,
             strsignal(WTERMSIG(status)));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || msg.empty())
    MF_THROW("{}: the isolated call ended without an answer (exit status {}; a memory error in the HDF5 library "
             "on a damaged file?)", what, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  const char tag = msg[0];
  msg.erase(0, 1);
  if (tag == 'R') return msg;
  if (tag == 'E') {
    ByteReader r(msg);
    std::string message = r.str();
    std::string where = r.str();
    throw Error(std::move(message), std::move(where));
  }
  throw std::runtime_error(msg);
}

void ByteWriter::u64(unsigned long long v) {
  for (int i = 0; i < 8; ++i) out_.push_back(char((v >> (8 * i)) & 0xff));
}
void ByteWriter::f64(double v) {
  unsigned long long u;
  std::memcpy(&u, &v, 8);
  u64(u);
}
void ByteWriter::str(const std::string& s) {
  u64(s.size());
  out_ += s;
}

void ByteReader::need(std::size_t n) const {
  MF_CHECK(n <= in_.size() - pos_, "isolated call: answer truncated (needed {} more bytes at {}, have {})", n, pos_,
           in_.size() - pos_);
}
unsigned long long ByteReader::u64() {
  need(8);
  unsigned long long v = 0;
  for (int i = 0; i < 8; ++i) v |= (unsigned long long)(unsigned char)in_[pos_ + std::size_t(i)] << (8 * i);
  pos_ += 8;
  return v;
}
double ByteReader::f64() {
  const unsigned long long u = u64();
  double v;
  std::memcpy(&v, &u, 8);
  return v;
}
std::string ByteReader::str() {
  const unsigned long long n = u64();
  need(std::size_t(n));
  std::string s = in_.substr(pos_, std::size_t(n));
  pos_ += std::size_t(n);
  return s;
}

}  // namespace mf
