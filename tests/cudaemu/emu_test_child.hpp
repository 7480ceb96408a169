// For the emulator's own tests: running code that must make the emulator
// abort (a divergent barrier, a misaligned ldmatrix, ...) in a child process.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>

namespace mf_emu_test {

// Runs fn in a child process; returns (died by a signal, its stderr).
inline std::pair<bool, std::string> in_child(const std::function<void()>& fn) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::fflush(stdout);  // else the child's doctest crash report repeats the parent's buffered output
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    if (std::FILE* null = std::fopen("/dev/null", "w")) dup2(fileno(null), 1);  // the child's doctest report
    fn();
    std::_Exit(0);
  }
  close(fds[1]);
  std::string err;
  char buf[512];
  for (ssize_t r; (r = read(fds[0], buf, sizeof buf)) > 0;) err.append(buf, std::size_t(r));
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  return {WIFSIGNALED(st), err};
}

}  // namespace mf_emu_test
