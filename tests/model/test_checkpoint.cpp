// Checkpoints: round trip, corrupt and truncated files, keep-last + best, and an
// injected crash between the write and the rename.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/error.hpp"
#include "model/checkpoint.hpp"
#include "tests/support/testing.hpp"

namespace fs = std::filesystem;
using namespace mf;
using namespace mf::model;

namespace {
fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / fmt::format("mf_ckpt_{}_{}", name, ::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

Checkpoint sample(std::int64_t step) {
  Checkpoint c;
  const auto w = testing::random_floats(1000, std::uint64_t(step));
  c.put<float>("blocks.0.conv.weight", w);
  c.arrays["blocks.0.conv.weight"].shape = {10, 4, 5, 5};
  std::vector<bf16> h;
  for (float x : w) h.push_back(bf16(x));
  c.put<bf16>("working.bf16", h);
  std::vector<f16> g;
  for (float x : w) g.push_back(f16(x));
  c.put<f16>("working.f16", g);
  c.put<std::int32_t>("perm", std::vector<std::int32_t>{3, 1, 2, 0});
  c.put<std::uint8_t>("empty", std::vector<std::uint8_t>{});
  c.ints["step"] = step;
  c.ints["epoch"] = -7;
  c.floats["loss_scale"] = 65536.0;
  c.floats["lr"] = 1.2345e-4;
  c.strings["config"] = "[optim]\nlr = 0.001\n";
  c.strings["empty"] = "";
  return c;
}

void check_same(const Checkpoint& a, const Checkpoint& b) {
  REQUIRE(a.arrays.size() == b.arrays.size());
  for (const auto& [name, x] : a.arrays) {
    const auto& y = b.array(name);
    CHECK(x.dtype == y.dtype);
    CHECK(x.shape == y.shape);
    CHECK(x.bytes == y.bytes);
  }
  CHECK(a.ints == b.ints);
  CHECK(a.floats == b.floats);
  CHECK(a.strings == b.strings);
}
}  // namespace

TEST_CASE("a checkpoint round-trips arrays of every dtype and the metadata, bit for bit") {
  const fs::path d = fresh_dir("rt");
  const Checkpoint c = sample(5);
  write_checkpoint(d / "a.h5", c);
  const Checkpoint r = read_checkpoint(d / "a.h5");
  check_same(c, r);
  CHECK(r.get_string("config") == "[optim]\nlr = 0.001\n");
  CHECK(r.get_string("empty").empty());
  CHECK_THROWS_WITH_AS(r.get_int("nope"), doctest::Contains("no integer 'nope'"), Error);
  CHECK_THROWS_WITH_AS(r.array("nope"), doctest::Contains("a.h5: no array 'nope'"), Error);
  Tensor t = Tensor::empty({4}, DType::f32);
  CHECK_THROWS_WITH_AS(r.read_into("perm", t), doctest::Contains("'perm' is i32[4], expected f32[4]"), Error);
  // No temporary file is left behind.
  int files = 0;
  for (const auto& e : fs::directory_iterator(d)) files += e.path().filename() != "a.h5";
  CHECK(files == 0);
  fs::remove_all(d);
}

TEST_CASE("corrupt, truncated and foreign files are errors naming the file") {
  const fs::path d = fresh_dir("bad");
  write_checkpoint(d / "a.h5", sample(1));
  const auto size = fs::file_size(d / "a.h5");
  // Flip a byte inside the array data (the data of the 4000-byte f32 array sits
  // somewhere after the superblock; find it by its first value's bytes).
  {
    std::fstream f(d / "a.h5", std::ios::in | std::ios::out | std::ios::binary);
    std::vector<char> buf(size);
    f.read(buf.data(), std::streamsize(size));
    const auto w = testing::random_floats(1000, 1);
    const char* needle = reinterpret_cast<const char*>(w.data());
    auto it = std::search(buf.begin(), buf.end(), needle, needle + 16);
    REQUIRE(it != buf.end());
    const auto off = (it - buf.begin()) + 100;
    f.seekp(off);
    const char flipped = char(buf[std::size_t(off)] ^ 0x40);
    f.write(&flipped, 1);
  }
  CHECK_THROWS_WITH_AS(read_checkpoint(d / "a.h5"), doctest::Contains("CRC-32 mismatch"), Error);
  write_checkpoint(d / "b.h5", sample(1));
  fs::resize_file(d / "b.h5", size / 2);
  CHECK_THROWS_WITH_AS(read_checkpoint(d / "b.h5"), doctest::Contains("b.h5"), Error);
  std::ofstream(d / "c.h5") << "not hdf5";
  CHECK_THROWS_WITH_AS(read_checkpoint(d / "c.h5"), doctest::Contains("not an HDF5 file"), Error);
  CHECK_THROWS_WITH_AS(read_checkpoint(d / "none.h5"), doctest::Contains("none.h5: no such file"), Error);
  fs::remove_all(d);
}

TEST_CASE("a failed rename reports the rename's own error and leaves no temporary file") {
  const fs::path d = fresh_dir("rename");
  fs::create_directories(d / "taken.h5" / "inside");  // a non-empty folder where the file should go
  const std::string eisdir = std::error_code(EISDIR, std::generic_category()).message();
  CHECK_THROWS_WITH_AS(write_checkpoint(d / "taken.h5", sample(1)),
                       doctest::Contains(eisdir.c_str()), Error);
  for (const auto& e : fs::directory_iterator(d)) CHECK(e.path().filename() == "taken.h5");
  fs::remove_all(d);
}

TEST_CASE("keep the last N plus the best; newest_good skips a corrupt newest one") {
  const fs::path d = fresh_dir("keep");
  CheckpointDir cd(d, 2);
  cd.save(sample(10), 10, false);
  cd.save(sample(20), 20, true);  // best
  cd.save(sample(30), 30, false);
  cd.save(sample(40), 40, false);
  const auto l = cd.list();
  REQUIRE(l.size() == 2);
  CHECK(l[0].filename() == "ckpt-0000000040.h5");
  CHECK(l[1].filename() == "ckpt-0000000030.h5");
  REQUIRE(fs::exists(cd.best_path()));
  CHECK(read_checkpoint(cd.best_path()).get_int("step") == 20);  // outlived ckpt-20's pruning
  // Truncate the newest: --resume auto falls back to the one before.
  fs::resize_file(l[0], fs::file_size(l[0]) / 3);
  const auto found = newest_good_checkpoint(d);
  REQUIRE(found.has_value());
  CHECK(found->path.filename() == "ckpt-0000000030.h5");
  CHECK(found->checkpoint.get_int("step") == 30);
  CHECK_FALSE(newest_good_checkpoint(fresh_dir("empty")).has_value());
  // A stray file whose step does not fit in 64 bits is not a checkpoint (and no crash).
  std::ofstream(d / "ckpt-99999999999999999999999.h5") << "x";
  CHECK(cd.list().size() == 2);
  CHECK(newest_good_checkpoint(d)->checkpoint.get_int("step") == 30);
  fs::remove_all(d);
}

TEST_CASE("a crash between write and rename leaves the previous checkpoint intact and loadable") {
  const fs::path d = fresh_dir("crash");
  CheckpointDir cd(d, 3);
  cd.save(sample(1), 1, true);
  for (int scenario = 0; scenario < 2; ++scenario) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::setenv("MELFORGE_TEST_CRASH_BEFORE_RENAME", "1", 1);
      try {
        if (scenario == 0)
          cd.save(sample(2), 2, false);         // a new step's file
        else
          write_checkpoint(cd.best_path(), sample(3));  // overwriting an existing name
      } catch (...) {
      }
      ::_exit(0);  // not reached: the hook kills the process
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
    // The temporary file is there, complete but never renamed.
    bool tmp_seen = false;
    for (const auto& e : fs::directory_iterator(d)) tmp_seen |= e.path().filename().string().rfind(".tmp-", 0) == 0;
    CHECK(tmp_seen);
    const auto found = newest_good_checkpoint(d);
    REQUIRE(found.has_value());
    CHECK(found->checkpoint.get_int("step") == 1);
    check_same(found->checkpoint, sample(1));
    check_same(read_checkpoint(cd.best_path()), sample(1));
  }
  // The next save clears the stale temporary files.
  cd.save(sample(4), 4, false);
  for (const auto& e : fs::directory_iterator(d)) CHECK(e.path().filename().string().rfind(".tmp-", 0) != 0);
  fs::remove_all(d);
}
