// io::BatchReader on the CPU backend: the order (a seeded, reproducible,
// resumable permutation), batch contents, padding, resident vs streaming,
// worker errors and shutdown.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "engine/error.hpp"
#include "io/h5_writer.hpp"
#include "io/reader.hpp"
#include "tests/io/io_testing.hpp"

using namespace mf;

namespace {

// Value e of segment s: exact in f16, and it tells which segment a row holds.
float pattern(std::int64_t s, std::int64_t e) { return float(s % 256) + 0.25f * float(e % 4); }

constexpr std::int64_t kF = 10, kL = 3, kS = 4, kM = 6, kT = 10, kN = kF * kL * kS;

std::string write_pattern_file(const testing::TempDir& dir, const std::string& name, io::WriteStorage st,
                               std::int64_t nan_at = -1) {
  io::WriteSpec ws;
  ws.shape = {kF, kL, kS, kM, kT};
  ws.dtype = DType::f16;
  ws.storage = st;
  for (std::int64_t f = 0; f < kF; ++f) ws.labels.push_back(f % 3);
  ws.class_names = {"normal", "a", "b"};
  std::vector<float> v(static_cast<std::size_t>(kN * kM * kT));
  for (std::int64_t s = 0; s < kN; ++s)
    for (std::int64_t e = 0; e < kM * kT; ++e) v[std::size_t(s * kM * kT + e)] = pattern(s, e);
  if (nan_at >= 0) v[std::size_t(nan_at * kM * kT + 7)] = NAN;
  const std::string path = dir / name;
  io::H5Writer w(path, ws);
  w.write_segments(0, kN, v.data());
  w.close();
  return path;
}

const testing::TempDir& tmp() {
  static testing::TempDir d("io_reader");
  return d;
}
std::shared_ptr<const io::Dataset> pattern_ds(io::WriteStorage st = io::WriteStorage::contiguous) {
  const char* names[] = {"contiguous.h5", "chunked.h5", "gzip.h5"};
  const std::string path = tmp() / names[int(st)];
  if (!std::filesystem::exists(path)) write_pattern_file(tmp(), names[int(st)], st);
  return io::Dataset::open(path);
}

std::vector<std::int32_t> ints(const Tensor& t) {
  const auto f = t.to_floats();
  return {f.begin(), f.end()};
}

// Checks that a batch is internally consistent with the dataset; returns its segment indices.
std::vector<std::int32_t> check_batch(const io::Batch& b, const io::DatasetInfo& in, std::int64_t B) {
  REQUIRE(b.x.shape() == Shape{B, kM, kT, 1});
  CHECK(b.x.layout() == Layout::nhwc);
  const auto idx = ints(b.index), lab = ints(b.labels), file = ints(b.file);
  const auto leak = b.leak.to_floats();
  const auto x = b.x.to_floats();
  for (std::int64_t r = 0; r < B; ++r) {
    const std::int32_t s = idx[std::size_t(r)];
    REQUIRE(s >= 0);
    REQUIRE(s < kN);
    CHECK(lab[std::size_t(r)] == in.labels[std::size_t(s)]);
    CHECK(file[std::size_t(r)] == s / (kL * kS));
    CHECK(leak[std::size_t(r)] == float(in.leak[std::size_t(s)]));
    std::int64_t bad = 0;
    for (std::int64_t e = 0; e < kM * kT; ++e) bad += x[std::size_t(r * kM * kT + e)] != pattern(s, e);
    CHECK(bad == 0);
  }
  CHECK(std::is_sorted(idx.begin(), idx.begin() + b.valid));
  return idx;
}

io::ReaderConfig cfg_cpu(std::int64_t B, bool shuffle = true, io::Residency res = io::Residency::off) {
  io::ReaderConfig c;
  c.batch_size = B;
  c.shuffle = shuffle;
  c.seed = 42;
  c.threads = 2;
  c.ring_slots = 3;
  c.device = Device::cpu();
  c.dtype = DType::f32;
  c.resident = res;
  return c;
}

int thread_count() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

std::string next_error(io::BatchReader& r) {
  try {
    r.next();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("epoch_order is a seeded permutation, reproducible, different per epoch and seed") {
  const auto a = io::epoch_order(1000, 7, 0, true);
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (std::int64_t i = 0; i < 1000; ++i) REQUIRE(sorted[std::size_t(i)] == i);
  CHECK(a == io::epoch_order(1000, 7, 0, true));
  CHECK(a != io::epoch_order(1000, 7, 1, true));
  CHECK(a != io::epoch_order(1000, 8, 0, true));
  const auto id = io::epoch_order(50, 7, 3, false);
  for (std::int64_t i = 0; i < 50; ++i) CHECK(id[std::size_t(i)] == i);
  // Not a near-identity: most elements move.
  std::int64_t fixed = 0;
  for (std::int64_t i = 0; i < 1000; ++i) fixed += a[std::size_t(i)] == i;
  CHECK(fixed < 20);
}

TEST_CASE("streaming reader: an epoch covers distinct segments, sorted per batch, across files") {
  for (io::WriteStorage st : {io::WriteStorage::contiguous, io::WriteStorage::chunked, io::WriteStorage::gzip}) {
    CAPTURE(int(st));
    auto ds = pattern_ds(st);
    io::BatchReader r(ds, cfg_cpu(16));
    CHECK_FALSE(r.resident());
    REQUIRE(r.batches_per_epoch() == kN / 16);
    std::set<std::int32_t> seen;
    bool cross_file = false;
    for (std::int64_t k = 0; k < r.batches_per_epoch(); ++k) {
      const io::Batch b = r.next();
      CHECK(b.epoch == 0);
      CHECK(b.position == k);
      CHECK(b.valid == 16);
      CHECK(b.last_in_epoch == (k == r.batches_per_epoch() - 1));
      const auto idx = check_batch(b, ds->info(), 16);
      seen.insert(idx.begin(), idx.end());
      std::set<std::int32_t> files;
      for (auto s : idx) files.insert(s / (kL * kS));
      cross_file |= files.size() > 1;
    }
    CHECK(seen.size() == std::size_t(r.batches_per_epoch() * 16));
    CHECK(cross_file);
    const io::Batch b = r.next();  // into epoch 1
    CHECK(b.epoch == 1);
    CHECK(b.position == 0);
    CHECK(r.stats().batches == r.batches_per_epoch() + 1);
    CHECK(r.stats().bytes_read > 0);
  }
}

TEST_CASE("pad mode: the last batch is padded with real segments and reports how many rows are valid") {
  auto ds = pattern_ds();
  io::ReaderConfig c = cfg_cpu(32);
  c.last_batch = io::LastBatch::pad;
  io::BatchReader r(ds, c);
  REQUIRE(r.batches_per_epoch() == (kN + 31) / 32);
  std::set<std::int32_t> seen;
  for (std::int64_t k = 0; k < r.batches_per_epoch(); ++k) {
    const io::Batch b = r.next();
    const auto idx = check_batch(b, ds->info(), 32);
    CHECK(b.valid == (k + 1 < r.batches_per_epoch() ? 32 : kN - 32 * k));
    seen.insert(idx.begin(), idx.begin() + b.valid);
  }
  CHECK(seen.size() == std::size_t(kN));  // every segment exactly once among the valid rows
}

TEST_CASE("evaluation order: no shuffle gives segments in file order") {
  auto ds = pattern_ds(io::WriteStorage::gzip);
  io::ReaderConfig c = cfg_cpu(25, false);
  c.last_batch = io::LastBatch::pad;
  io::BatchReader r(ds, c);
  std::int32_t expect = 0;
  for (std::int64_t k = 0; k < r.batches_per_epoch(); ++k) {
    const io::Batch b = r.next();
    const auto idx = check_batch(b, ds->info(), 25);
    const auto file = ints(b.file);
    for (std::int64_t i = 0; i < b.valid; ++i) {
      CHECK(idx[std::size_t(i)] == expect++);
      if (i) CHECK(file[std::size_t(i)] >= file[std::size_t(i - 1)]);
    }
  }
  CHECK(expect == kN);
}

TEST_CASE("state/restore resumes exactly, across an epoch boundary, in a fresh reader and in place") {
  auto ds = pattern_ds(io::WriteStorage::chunked);
  const io::ReaderConfig c = cfg_cpu(16);
  io::BatchReader a(ds, c);
  std::vector<io::ReaderState> states;
  std::vector<std::vector<std::int32_t>> idx;
  std::vector<std::vector<float>> xs;
  for (int k = 0; k < 12; ++k) {  // 7 batches per epoch: crosses into epoch 1
    states.push_back(a.state());
    const io::Batch b = a.next();
    idx.push_back(ints(b.index));
    xs.push_back(b.x.to_floats());
  }
  CHECK(states[7] == io::ReaderState{1, 0});
  io::BatchReader fresh(ds, c);
  fresh.restore(states[5]);
  for (int k = 5; k < 12; ++k) {
    const io::Batch b = fresh.next();
    CHECK(ints(b.index) == idx[std::size_t(k)]);
    CHECK(b.x.to_floats() == xs[std::size_t(k)]);
  }
  a.restore(states[2]);
  CHECK(a.state() == states[2]);
  for (int k = 2; k < 6; ++k) CHECK(ints(a.next().index) == idx[std::size_t(k)]);
  CHECK(a.batch_rows(0, 3) == std::vector<std::int64_t>(idx[3].begin(), idx[3].end()));
  CHECK_THROWS_WITH_AS(a.restore({0, 7}), doctest::Contains("position 0..6"), Error);
}

TEST_CASE("shares: each process's reader delivers exactly its positions of the plain order, and resumes") {
  auto ds = pattern_ds(io::WriteStorage::contiguous);
  const io::ReaderConfig c = cfg_cpu(16);  // 7 batches per epoch
  io::BatchReader all(ds, c);
  std::vector<std::vector<std::int32_t>> plain;  // epochs 0 and 1, position by position
  for (int k = 0; k < 14; ++k) plain.push_back(ints(all.next().index));
  for (const bool resident : {false, true}) {
    for (int share = 0; share < 3; ++share) {
      CAPTURE(resident);
      CAPTURE(share);
      io::ReaderConfig sc = c;
      sc.share = share;
      sc.shares = 3;
      sc.resident = resident ? io::Residency::on : io::Residency::off;
      io::BatchReader mine(ds, sc);
      // Epoch 0: positions share, share + 3 (< 7) and, for share 0, 6; then epoch 1 from share again.
      std::vector<int> want;
      for (int e = 0; e < 2; ++e)
        for (int p = share; p < 7; p += 3) want.push_back(e * 7 + p);
      CHECK(mine.state() == io::ReaderState{0, 0});
      for (std::size_t k = 0; k < want.size(); ++k) {
        const io::Batch b = mine.next();
        CHECK(ints(b.index) == plain[std::size_t(want[k])]);
        CHECK(b.position == want[k] % 7);
        CHECK(b.last_in_epoch == (want[k] % 7 + 3 >= 7));
      }
      mine.restore({1, 3});  // the group's position: this share's batch 3 + share of epoch 1
      CHECK(mine.state() == io::ReaderState{1, 3});
      if (3 + share < 7) CHECK(ints(mine.next().index) == plain[std::size_t(7 + 3 + share)]);
      CHECK_THROWS_WITH_AS(mine.restore({0, 2}), doctest::Contains("a multiple of the 3 shares"), Error);
    }
  }
}

TEST_CASE("resident mode gathers the same batches as streaming, in every compute dtype") {
  auto ds = pattern_ds(io::WriteStorage::gzip);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(dt));
    io::ReaderConfig cs = cfg_cpu(16), cr = cfg_cpu(16, true, io::Residency::on);
    cs.dtype = cr.dtype = dt;
    io::BatchReader s(ds, cs), r(ds, cr);
    CHECK(r.resident());
    for (int k = 0; k < 9; ++k) {
      const io::Batch a = s.next(), b = r.next();
      CHECK(a.x.dtype() == dt);
      CHECK(b.x.dtype() == dt);
      CHECK(ints(a.index) == ints(b.index));
      CHECK(ints(a.labels) == ints(b.labels));
      CHECK(ints(a.file) == ints(b.file));
      CHECK(a.leak.to_floats() == b.leak.to_floats());
      CHECK(std::memcmp(a.x.raw(), b.x.raw(), a.x.nbytes()) == 0);
      CHECK(a.epoch == b.epoch);
      CHECK(a.position == b.position);
    }
  }
  // auto picks resident for a dataset this small on the CPU backend.
  io::BatchReader autor(ds, cfg_cpu(16, true, io::Residency::automatic));
  CHECK(autor.resident());
}

TEST_CASE("a worker's error reaches next() for the batch it concerns, with context; the reader stays failed") {
  testing::TempDir dir("io_reader_err");
  const std::string path = write_pattern_file(dir, "nan.h5", io::WriteStorage::contiguous, 50);
  auto ds = io::Dataset::open(path);
  const int before = thread_count();
  {
    io::BatchReader r(ds, cfg_cpu(16, false));
    for (int k = 0; k < 3; ++k) CHECK(r.next().valid == 16);  // segments 0..47 are fine
    const std::string msg = next_error(r);
    CHECK(msg.find("reader: batch 3 of epoch 0") != std::string::npos);
    CHECK(msg.find("non-finite value (nan) at segment 50 (file 4, long 0, short 2), mel 0, frame 7") != std::string::npos);
    CHECK(msg.find(path) != std::string::npos);
    CHECK(next_error(r) == msg);  // failed for good
  }
  CHECK(thread_count() == before);
  // Resident mode checks the whole dataset when it loads.
  CHECK_THROWS_WITH_AS(io::BatchReader(ds, cfg_cpu(16, false, io::Residency::on)),
                       doctest::Contains("non-finite value (nan) at segment 50"), Error);
  io::ReaderConfig unchecked = cfg_cpu(16, false);
  unchecked.check_finite = false;
  io::BatchReader r2(ds, unchecked);
  for (int k = 0; k < 4; ++k) r2.next();  // passes NaN through when asked not to check
}

TEST_CASE("a file truncated under a running reader is an error, not zeros") {
  testing::TempDir dir("io_reader_trunc");
  const std::string path = write_pattern_file(dir, "t.h5", io::WriteStorage::contiguous);
  auto ds = io::Dataset::open(path);
  io::ReaderConfig c = cfg_cpu(16, false);
  io::BatchReader r(ds, c);
  r.next();
  std::filesystem::resize_file(path, 8192);
  std::string msg;
  for (int k = 0; k < 8 && msg.empty(); ++k) {
    try {
      r.next();
    } catch (const Error& e) {
      msg = e.what();
    }
  }
  CHECK(msg.find("file truncated") != std::string::npos);
  CHECK(msg.find("reader: batch") != std::string::npos);
}

TEST_CASE("clean shutdown: no thread left behind, whether idle, mid-prefetch or after restore") {
  auto ds = pattern_ds(io::WriteStorage::gzip);
  const int before = thread_count();
  for (int variant = 0; variant < 3; ++variant) {
    io::ReaderConfig c = cfg_cpu(8);
    c.threads = 4;
    c.ring_slots = 8;
    {
      io::BatchReader r(ds, c);
      CHECK(thread_count() == before + 4);
      if (variant >= 1) r.next();
      if (variant == 2) r.restore({3, 2});
    }
    CHECK(thread_count() == before);
  }
}

TEST_CASE("bad reader configurations are errors with the expected and found values") {
  auto ds = pattern_ds();
  io::ReaderConfig c = cfg_cpu(1000);
  CHECK_THROWS_WITH_AS(io::BatchReader(ds, c), doctest::Contains("fewer than one batch of 1000"), Error);
  c = cfg_cpu(16);
  c.ring_slots = 1;
  CHECK_THROWS_WITH_AS(io::BatchReader(ds, c), doctest::Contains("ring_slots must be 2..8, found 1"), Error);
  c = cfg_cpu(16);
  c.dtype = DType::i32;
  CHECK_THROWS_WITH_AS(io::BatchReader(ds, c), doctest::Contains("compute dtype must be f32, bf16 or f16"), Error);
  CHECK_THROWS_WITH_AS(io::parse_residency("maybe"), doctest::Contains("resident mode: expected one of auto, on, off, found 'maybe'"), Error);
  c = cfg_cpu(16);
  c.threads = 100000;  // once std::terminate: threads left joinable when the system refused one
  CHECK_THROWS_WITH_AS(io::BatchReader(ds, c), doctest::Contains("threads must be in [1, 256], found 100000"), Error);
  c.threads = 0;
  CHECK_THROWS_WITH_AS(io::BatchReader(ds, c), doctest::Contains("threads must be in [1, 256], found 0"), Error);
}

TEST_CASE("a system that refuses reader threads slows the reader down, never ends the process") {
  // Issue 21: a resident load with more threads than the system would start
  // ended in std::terminate (a joinable std::thread destroyed while the
  // exception of the refused one unwound). A child process with little
  // address space left refuses most thread stacks.
  auto ds = pattern_ds();
  for (io::Residency res : {io::Residency::on, io::Residency::off}) {
    CAPTURE(int(res));
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      long vm_pages = 0;
      if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(f, "%ld", &vm_pages) != 1) vm_pages = 0;
        std::fclose(f);
      }
      const rlim_t room = rlim_t(vm_pages) * rlim_t(::sysconf(_SC_PAGESIZE)) + (rlim_t(48) << 20);
      const rlimit lim{room, room};
      if (vm_pages == 0 || ::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(3);
      int rc = 0;
      try {
        io::ReaderConfig c = cfg_cpu(16, true, res);
        c.threads = 256;
        io::BatchReader r(ds, c);
        for (int i = 0; i < 3; ++i) r.next();
      } catch (const Error&) {
        rc = 2;  // a clear error is acceptable too
      } catch (...) {
        rc = 4;
      }
      ::_exit(rc);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK_MESSAGE(WIFEXITED(status), "the child died of signal ", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    if (WIFEXITED(status)) CHECK((WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 2));
  }
}
