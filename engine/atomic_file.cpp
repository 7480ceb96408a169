#include "engine/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/error.hpp"

namespace mf {

namespace fs = std::filesystem;

namespace {
std::atomic<bool> g_crash_before_rename{false};

void fsync_path(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  MF_CHECK(fd >= 0, "opening {} to sync it: {}", p.string(), std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  MF_CHECK(rc == 0, "fsync of {}: {}", p.string(), std::strerror(err));
}
}  // namespace

void write_file_atomic(const fs::path& path, const std::function<void(const fs::path& tmp)>& write_tmp) {
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  const fs::path tmp = dir / fmt::format(".tmp-{}.{}", path.filename().string(), ::getpid());
  try {
    write_tmp(tmp);
    fsync_path(tmp, false);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  if (g_crash_before_rename.load()) ::kill(::getpid(), SIGKILL);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code rm;
    fs::remove(tmp, rm);  // the rename's error is the one reported
    MF_THROW("renaming {} to {}: {}", tmp.string(), path.string(), ec.message());
  }
  fsync_path(dir, true);  // the rename itself is durable once the folder is synced
}

void write_text_atomic(const fs::path& path, std::string_view text) {
  write_file_atomic(path, [&](const fs::path& tmp) {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    MF_CHECK(fd >= 0, "cannot create {}: {}", tmp.string(), std::strerror(errno));
    std::size_t done = 0;
    int err = 0;
    while (done < text.size()) {
      const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        err = w < 0 ? errno : EIO;
        break;
      }
      done += std::size_t(w);
    }
    if (::close(fd) != 0 && !err) err = errno;
    MF_CHECK(err == 0, "writing {} ({} of {} bytes written): {}", tmp.string(), done, text.size(),
             std::strerror(err));
  });
}

void set_crash_before_rename_for_testing(bool on) { g_crash_before_rename.store(on); }

}  // namespace mf
