// Speaker-balanced batches (io/balanced_order.hpp, data.per_class): the batch
// structure the prototypical losses rely on (M consecutive rows of each of
// B/M distinct classes), different files within a group where possible, the
// number of batches, determinism per (seed, epoch), and the reader serving
// that order in streaming and resident mode, resumable.
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "engine/error.hpp"
#include "io/balanced_order.hpp"
#include "io/h5_writer.hpp"
#include "io/reader.hpp"
#include "tests/io/io_testing.hpp"

using namespace mf;

namespace {

// Labels of segments with `files` files of `per_file` segments; file f has
// class class_of(f).
struct Data {
  std::vector<std::int32_t> labels;
  std::vector<std::int64_t> file_of;
};
Data make(const std::vector<int>& files_per_class, int per_file) {
  Data d;
  std::int64_t f = 0;
  for (std::size_t c = 0; c < files_per_class.size(); ++c)
    for (int k = 0; k < files_per_class[c]; ++k, ++f)
      for (int s = 0; s < per_file; ++s) {
        d.labels.push_back(std::int32_t(c));
        d.file_of.push_back(f);
      }
  return d;
}

// Checks the structure of every batch; returns the rows.
void check_structure(const Data& d, const std::vector<std::int64_t>& order, int M, std::int64_t B) {
  REQUIRE(order.size() % std::size_t(B) == 0);
  std::set<std::int64_t> seen;
  for (std::size_t b0 = 0; b0 < order.size(); b0 += std::size_t(B)) {
    std::set<std::int32_t> classes;
    for (std::int64_t g = 0; g < B / M; ++g) {
      const std::int32_t c = d.labels[std::size_t(order[b0 + std::size_t(g * M)])];
      CHECK(classes.insert(c).second);  // a class once per batch
      std::set<std::int64_t> files;
      for (int r = 0; r < M; ++r) {
        const std::int64_t s = order[b0 + std::size_t(g * M + r)];
        CHECK(d.labels[std::size_t(s)] == c);  // M consecutive rows of one class
        files.insert(d.file_of[std::size_t(s)]);
        CHECK(seen.insert(s).second);  // no segment twice in an epoch
      }
      CHECK(files.size() == std::size_t(M));  // every class here has >= M files
    }
  }
}

}  // namespace

TEST_CASE("balanced order: M consecutive rows of B/M distinct classes, from different files, every batch full") {
  const Data d = make({4, 3, 3, 5, 2}, 6);  // 5 classes, 2..5 files of 6 segments
  for (auto [M, B] : {std::pair{2, 4}, std::pair{2, 8}, std::pair{3, 6}, std::pair{2, 10}}) {
    CAPTURE(M);
    CAPTURE(B);
    const std::int64_t nb = io::balanced_batches(d.labels, M, B);
    REQUIRE(nb > 0);
    const auto o = io::balanced_epoch_order(d.labels, d.file_of, M, B, 7, 0);
    CHECK(std::int64_t(o.size()) == nb * B);
    if (M <= 2) check_structure(d, o, M, B);  // every class has >= 2 files
  }
}

TEST_CASE("balanced order: batches per epoch, capped large classes, deterministic per seed and epoch") {
  // Class 0 has 50 groups of 2, the 3 others 4 each: with M = 2, K = 2 each
  // batch needs two classes and holds class 0 at most once, so the other
  // classes' 12 groups bound it: min(50, b) + 12 >= 2b gives b = 12.
  const Data d = make({50, 4, 4, 4}, 2);
  CHECK(io::balanced_batches(d.labels, 2, 4) == 12);
  const auto a = io::balanced_epoch_order(d.labels, d.file_of, 2, 4, 7, 0);
  const auto b = io::balanced_epoch_order(d.labels, d.file_of, 2, 4, 7, 0);
  const auto c = io::balanced_epoch_order(d.labels, d.file_of, 2, 4, 7, 1);
  const auto e = io::balanced_epoch_order(d.labels, d.file_of, 2, 4, 8, 0);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(a != e);
  check_structure(d, a, 2, 4);
  check_structure(d, c, 2, 4);
  // Errors: a batch that is not a multiple of M, a single class, too few classes.
  CHECK_THROWS_WITH_AS(io::balanced_batches(d.labels, 2, 5), doctest::Contains("multiple of it"), Error);
  CHECK_THROWS_WITH_AS(io::balanced_batches(d.labels, 2, 2), doctest::Contains("at least 2 classes"), Error);
  CHECK(io::balanced_batches(d.labels, 2, 10) == 0);  // 5 classes needed, 4 exist
  CHECK_THROWS_WITH_AS(io::balanced_epoch_order(d.labels, d.file_of, 2, 10, 7, 0),
                       doctest::Contains("needs 5 classes with 2 segments"), Error);
}

TEST_CASE("reader with per_class: serves the balanced order (unsorted, all rows valid), streaming and resident, "
          "and resumes") {
  testing::TempDir dir("io_balanced");
  io::WriteSpec ws;
  const std::int64_t F = 12, L = 2, S = 2, Mm = 4, T = 5, N = F * L * S;
  ws.shape = {F, L, S, Mm, T};
  ws.dtype = DType::f32;
  for (std::int64_t f = 0; f < F; ++f) ws.labels.push_back(std::int32_t(f % 4));
  ws.class_names = {"a", "b", "c", "d"};
  std::vector<float> v(static_cast<std::size_t>(N * Mm * T));
  for (std::int64_t s = 0; s < N; ++s)
    for (std::int64_t e = 0; e < Mm * T; ++e) v[std::size_t(s * Mm * T + e)] = float(s);
  const std::string path = dir / "speakers.h5";
  {
    io::H5Writer w(path, ws);
    w.write_segments(0, N, v.data());
    w.close();
  }
  auto ds = io::Dataset::open(path);
  std::vector<std::int64_t> file_of(static_cast<std::size_t>(N));
  for (std::int64_t i = 0; i < N; ++i) file_of[std::size_t(i)] = ds->info().file_of(i);
  for (io::Residency res : {io::Residency::off, io::Residency::on}) {
    io::ReaderConfig c;
    c.batch_size = 6;
    c.per_class = 2;
    c.seed = 3;
    c.resident = res;
    io::BatchReader r(ds, c);
    const std::int64_t nb = io::balanced_batches(ds->info().labels, 2, 6);
    CHECK(r.batches_per_epoch() == nb);
    const auto order = io::balanced_epoch_order(ds->info().labels, file_of, 2, 6, 3, 0);
    std::vector<io::ReaderState> states;
    std::vector<std::vector<float>> xs;
    for (std::int64_t k = 0; k < nb + 2; ++k) {
      states.push_back(r.state());
      const io::Batch b = r.next();
      CHECK(b.valid == 6);
      const auto x = b.x.to_floats();
      xs.push_back(x);
      if (k < nb)
        for (std::int64_t row = 0; row < 6; ++row)
          CHECK(std::int64_t(x[std::size_t(row * Mm * T)]) == order[std::size_t(k * 6 + row)]);
    }
    io::BatchReader again(ds, c);
    again.restore(states[std::size_t(nb - 1)]);
    for (std::int64_t k = nb - 1; k < nb + 2; ++k) CHECK(again.next().x.to_floats() == xs[std::size_t(k)]);
  }
}
