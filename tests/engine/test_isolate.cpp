// engine/isolate.hpp: a call run in a child process with a time limit.
#include <doctest/doctest.h>

#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>

#include "engine/error.hpp"
#include "tests/support/testing.hpp"
#include "engine/isolate.hpp"

using mf::testing::error_of;

TEST_CASE("run_isolated returns the child's bytes, values round-trip") {
  const std::string out = mf::run_isolated("test", 10, [] {
    mf::ByteWriter w;
    w.str(std::string("a\0b", 3));
    w.f64(-0.25);
    w.u64(1ull << 60);
    return w.take();
  });
  mf::ByteReader r(out);
  CHECK(r.str() == std::string("a\0b", 3));
  CHECK(r.f64() == -0.25);
  CHECK(r.u64() == (1ull << 60));
  CHECK(error_of([&] { (void)r.u64(); }).find("truncated") != std::string::npos);
}

TEST_CASE("run_isolated: an mf::Error in the child is thrown again with its message") {
  CHECK(error_of([] { mf::run_isolated("test", 10, []() -> std::string { MF_THROW("x.h5: bad {}", 7); }); }) ==
        "x.h5: bad 7");
}

TEST_CASE("run_isolated: a crash and a hang become errors naming what was done") {
  const std::string crash = error_of([] {
    mf::run_isolated("f.h5: reading the attributes of /segments", 10, []() -> std::string {
      std::raise(SIGSEGV);
      return "";
    });
  });
  CHECK(crash.find("f.h5: reading the attributes of /segments") == 0);
  CHECK(crash.find("crashed (Segmentation fault)") != std::string::npos);

  const std::string died = error_of([] { mf::run_isolated("g.h5", 10, []() -> std::string { ::_exit(1); }); });
  CHECK(died.find("g.h5: the isolated call ended without an answer (exit status 1") == 0);

  const std::string hang = error_of([] {
    mf::run_isolated("h.h5: reading", 0.3, []() -> std::string {
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    });
  });
  CHECK(hang.find("h.h5: reading: did not finish within 0.3 s") == 0);
}

TEST_CASE("isolate_timeout_s: the default, or MELFORGE_ISOLATE_TIMEOUT") {
  ::unsetenv("MELFORGE_ISOLATE_TIMEOUT");
  CHECK(mf::isolate_timeout_s(30) == 30);
  ::setenv("MELFORGE_ISOLATE_TIMEOUT", "2.5", 1);
  CHECK(mf::isolate_timeout_s(30) == 2.5);
  ::setenv("MELFORGE_ISOLATE_TIMEOUT", "0", 1);
  CHECK(error_of([] { mf::isolate_timeout_s(30); }).find("expected seconds > 0, found '0'") != std::string::npos);
  ::unsetenv("MELFORGE_ISOLATE_TIMEOUT");
}
