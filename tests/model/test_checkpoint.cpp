// Checkpoints: round trip, corrupt and truncated files, keep-last + best, and an
// injected crash between the write and the rename.
#include <doctest/doctest.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "engine/atomic_file.hpp"
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
  CHECK_THROWS_WITH_AS(r.get_int("nope"), doctest::Contains("/ints/nope is missing"), Error);
  CHECK_THROWS_WITH_AS(r.array("nope"), doctest::Contains("a.h5: /arrays/nope is missing"), Error);
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
      mf::set_crash_before_rename_for_testing(true);
      try {
        if (scenario == 0)
          cd.save(sample(2), 2, false);         // a new step's file
        else
          write_checkpoint(cd.best_path(), sample(3));  // overwriting an existing name
      } catch (...) {
      }
      ::_exit(0);  // not reached: the seam kills the process
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

// ---- malformed checkpoints ----------------------------------------------------
// A good checkpoint, then one entry replaced with HDF5's C API (as a damaged or
// hand-made file would have it). Every read of it must be an mf::Error naming
// the file and the entry, never an overflow of a fixed-size buffer or a
// std::bad_alloc.
namespace {

void replace_entry(const fs::path& path, const std::function<void(hid_t file)>& edit) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  edit(f);
  H5Fclose(f);
}

// A dataset `name` (a path) of `type` with `dims` (none: scalar), holding `data` when given.
void put_dataset(hid_t file, const char* name, hid_t type, std::vector<hsize_t> dims, const void* data) {
  if (H5Lexists(file, name, H5P_DEFAULT) > 0) H5Ldelete(file, name, H5P_DEFAULT);
  const hid_t space = dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  const hid_t d = H5Dcreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(d >= 0);
  if (data) REQUIRE(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
  H5Dclose(d);
  H5Sclose(space);
}

// An attribute `name` of the object at `obj_path`, of `type` with `dims`.
void put_attr(hid_t file, const char* obj_path, const char* name, hid_t type, std::vector<hsize_t> dims,
              const void* data) {
  const hid_t obj = H5Oopen(file, obj_path, H5P_DEFAULT);
  REQUIRE(obj >= 0);
  if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
  const hid_t space = dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  const hid_t a = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(a >= 0);
  REQUIRE(H5Awrite(a, type, data) >= 0);
  H5Aclose(a);
  H5Sclose(space);
  H5Oclose(obj);
}

hid_t fixed_string(std::size_t n) {
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, n);
  return t;
}

// The message of read_checkpoint's mf::Error (anything else fails the test).
std::string read_error(const fs::path& p) {
  try {
    read_checkpoint(p);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("a checkpoint entry of the wrong shape or type is an error naming the file, the entry, expected and found") {
  const fs::path d = fresh_dir("shapes");
  struct Case {
    const char* what;
    std::function<void(hid_t)> edit;
    std::vector<std::string> parts;
  };
  const std::int64_t six[6] = {1, 2, 3, 4, 5, 6};
  const double four[4] = {1, 2, 3, 4};
  const std::int32_t three[3] = {1, 1, 1};
  const std::uint32_t two[2] = {7, 8};
  const char strings[3][4] = {"abc", "def", "ghi"};
  const char dtypes[2][4] = {"f32", "u8 "};
  const std::vector<Case> cases = {
      // A 2-D /ints/adamw_step was read into one int64: a stack-buffer-overflow.
      {"2-D int", [&](hid_t f) { put_dataset(f, "/ints/adamw_step", H5T_NATIVE_INT64, {2, 3}, six); },
       {"dataset /ints/adamw_step: expected one integer (a scalar), found shape [2, 3]"}},
      {"float array", [&](hid_t f) { put_dataset(f, "/floats/lr", H5T_NATIVE_DOUBLE, {4}, four); },
       {"dataset /floats/lr: expected one number (a scalar), found shape [4]"}},
      {"string int", [&](hid_t f) { put_dataset(f, "/ints/step", fixed_string(3), {}, "abc"); },
       {"dataset /ints/step: expected an integer, found 3-byte string"}},
      {"root attribute", [&](hid_t f) { put_attr(f, "/", "melforge_checkpoint", H5T_NATIVE_INT32, {3}, three); },
       {"attribute melforge_checkpoint of /: expected one integer (a scalar), found shape [3]"}},
      {"crc32 array", [&](hid_t f) { put_attr(f, "/arrays/perm", "crc32", H5T_NATIVE_UINT32, {2}, two); },
       {"attribute crc32 of /arrays/perm: expected one integer (a scalar), found shape [2]"}},
      // A multi-element /strings/config or dtype attribute overflowed a one-string buffer.
      {"string list", [&](hid_t f) { put_dataset(f, "/strings/config", fixed_string(4), {3}, strings); },
       {"dataset /strings/config: expected one string (a scalar), found shape [3]"}},
      {"dtype list", [&](hid_t f) { put_attr(f, "/arrays/perm", "dtype", fixed_string(4), {2}, dtypes); },
       {"attribute dtype of /arrays/perm: expected one string (a scalar), found shape [2]"}},
      {"dtype vs data", [&](hid_t f) { put_attr(f, "/arrays/perm", "dtype", fixed_string(3), {}, "f32"); },
       {"dataset /arrays/perm: expected 32-bit floats (its dtype attribute says f32), found 32-bit integer"}},
      {"unknown dtype", [&](hid_t f) { put_attr(f, "/arrays/perm", "dtype", fixed_string(3), {}, "f64"); },
       {"attribute dtype of /arrays/perm: unknown dtype 'f64'"}},
      // Declared [2^40] bytes, never written: once a std::bad_alloc that named nothing.
      {"huge array", [&](hid_t f) { put_dataset(f, "/arrays/perm", H5T_STD_U8LE, {hsize_t(1) << 40}, nullptr);
                                    put_attr(f, "/arrays/perm", "dtype", fixed_string(2), {}, "u8");
                                    const std::uint32_t crc = 0;
                                    put_attr(f, "/arrays/perm", "crc32", H5T_NATIVE_UINT32, {}, &crc); },
       {"dataset /arrays/perm: shape [1099511627776] of 8-bit unsigned integer declares 1099511627776 bytes",
        "stores 0 bytes"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const fs::path p = d / "c.h5";
    write_checkpoint(p, sample(3));
    replace_entry(p, c.edit);
    const std::string msg = read_error(p);
    CAPTURE(msg);
    CHECK(msg.find("checkpoint " + p.string() + ": ") != std::string::npos);
    for (const auto& part : c.parts) CHECK(msg.find(part) != std::string::npos);
  }
  fs::remove_all(d);
}

TEST_CASE("get_int_in names the checkpoint, the entry, the range and the value") {
  Checkpoint c = sample(1);
  c.source = "/runs/x/best.h5";
  CHECK(c.get_int_in("step", 0, 10) == 1);
  CHECK_THROWS_WITH_AS(c.get_int_in("epoch", 0, 10),
                       doctest::Contains("checkpoint /runs/x/best.h5: /ints/epoch: expected an integer in [0, 10], found -7"),
                       Error);
}
