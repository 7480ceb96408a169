#include "fuzz/fuzz_support.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <typeinfo>

#include "engine/error.hpp"
#include "engine/log.hpp"
#include "io/h5_error.hpp"

namespace mf::fuzz {

namespace {
std::string temp_dir() {
  if (const char* d = std::getenv("MELFORGE_FUZZ_TMP"); d && *d) return d;
  if (::access("/dev/shm", W_OK) == 0) return "/dev/shm";
  return "/tmp";
}
}  // namespace

namespace {
std::string g_written;  // the last file written, removed at exit
void remove_written() {
  if (!g_written.empty()) ::unlink(g_written.c_str());
}
}  // namespace

std::string write_input(const std::uint8_t* data, std::size_t size, const char* suffix) {
  static const std::string base = temp_dir() + "/melforge-fuzz-" + std::to_string(::getpid());
  const std::string path = base + suffix;
  if (g_written.empty()) std::atexit(remove_written);
  if (!g_written.empty() && g_written != path) ::unlink(g_written.c_str());
  g_written = path;
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) {
    std::fprintf(stderr, "fuzz: cannot create %s: %s\n", path.c_str(), std::strerror(errno));
    std::abort();
  }
  std::size_t done = 0;
  while (done < size) {
    const ssize_t w = ::write(fd, data + done, size - done);
    if (w <= 0) {
      std::fprintf(stderr, "fuzz: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
      std::abort();
    }
    done += std::size_t(w);
  }
  ::close(fd);
  return path;
}

void check_no_open_hdf5_objects(const char* target) {
  const ssize_t n = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
  if (n > 0) {
    std::fprintf(stderr, "fuzz %s: %zd HDF5 object(s) still open after the reader returned (a leaked handle)\n",
                 target, n);
    std::abort();
  }
}

void fail_uncaught(const char* target) {
  try {
    throw;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz %s: an exception other than mf::Error escaped the reader: %s: %s\n", target,
                 typeid(e).name(), e.what());
  } catch (...) {
    std::fprintf(stderr, "fuzz %s: an exception of unknown type escaped the reader\n", target);
  }
  std::abort();
}

void fail_check(const char* target, const char* what, const char* file, int line) {
  std::fprintf(stderr, "fuzz %s: invariant violated at %s:%d: %s\n", target, file, line, what);
  std::abort();
}

void quiet() {
  static bool done = false;
  if (done) return;
  done = true;
  if (!std::getenv("MELFORGE_LOG")) set_log_level(LogLevel::error);
  io::silence_hdf5_errors();
}

}  // namespace mf::fuzz
