// Whole utterances (the ragged layout, io/dataset.hpp; crops, io/crops.hpp):
// h5py's files read back as NumPy cuts their crops (wrapping included), on
// the contiguous and the chunked gzip paths; the crop positions are uniform,
// fresh every epoch and the same after a resume; melforge's own writer
// round-trips; the reader's training crops are the ones random_crop_start
// names.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <numeric>

#include "engine/error.hpp"
#include "io/crops.hpp"
#include "io/dataset.hpp"
#include "io/h5_writer.hpp"
#include "io/reader.hpp"
#include "tests/io/io_testing.hpp"

using namespace mf;

namespace {

// As tests/io/h5_cases.py's RAGGED_* (the crops it cut with NumPy).
const std::vector<std::int64_t> kLengths = {5, 17, 12, 3, 30, 9};
constexpr std::int64_t kCrop = 10, kMels = 8;
const std::vector<std::pair<std::int64_t, std::int64_t>> kCrops = {{0, 0}, {0, 4}, {1, 3}, {1, 7}, {2, 2},
                                                                   {3, 0}, {3, 2}, {4, 20}, {4, 0}, {5, 0}};

std::int64_t bit_mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  std::int64_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i]);
  return n;
}

}  // namespace

TEST_CASE("ragged files written by h5py: crops equal NumPy's, wrap included, on every read path") {
  const auto& dir = testing::h5_cases();
  for (const char* name : {"ragged_f16_contiguous", "ragged_f32_gzip"}) {
    CAPTURE(name);
    io::DatasetNames names;
    names.crop_frames = kCrop;
    const auto ds = io::Dataset::open(dir / (std::string(name) + ".h5"), names);
    const io::DatasetInfo& in = ds->info();
    CHECK(in.ragged());
    CHECK(in.num_segments == 6);
    CHECK(in.num_files == 6);
    CHECK(in.n_mels == kMels);
    CHECK(in.frames == kCrop);
    CHECK(in.labels == std::vector<std::int32_t>{0, 1, 2, 1, 0, 2});
    for (std::size_t u = 0; u < kLengths.size(); ++u) CHECK(in.utterance_frames(std::int64_t(u)) == kLengths[u]);
    CHECK(in.where(3) == "utterance 3");

    std::vector<std::int64_t> rows, starts;
    for (const auto& [u, s] : kCrops) {
      rows.push_back(u);
      starts.push_back(s);
    }
    std::vector<float> got(rows.size() * std::size_t(kMels * kCrop), -1.f);
    ds->read_crops(rows, starts, DType::f32, got.data(), true);
    CHECK(bit_mismatches(got, testing::read_raw<float>(dir / (std::string(name) + ".crops.bin"))) == 0);

    // read() gives the centred crops; a crop starting outside its utterance is refused.
    const auto frames = testing::read_raw<float>(dir / (std::string(name) + ".frames.bin"));
    const std::vector<std::int64_t> all = {0, 1, 2, 3, 4, 5};
    std::vector<float> centred(all.size() * std::size_t(kMels * kCrop)), want(centred.size());
    ds->read(all, DType::f32, centred.data(), true);
    std::int64_t off = 0;
    for (std::size_t u = 0; u < all.size(); ++u) {
      const std::int64_t len = kLengths[u], s = len > kCrop ? (len - kCrop) / 2 : 0;
      for (std::int64_t m = 0; m < kMels; ++m)
        for (std::int64_t k = 0; k < kCrop; ++k)
          want[(u * kMels + std::size_t(m)) * kCrop + std::size_t(k)] = frames[std::size_t((off + (s + k) % len) * kMels + m)];
      off += len;
    }
    CHECK(bit_mismatches(centred, want) == 0);
    const std::vector<std::int64_t> one = {3}, outside = {3};
    CHECK_THROWS_WITH_AS(ds->read_crops(one, outside, DType::f32, got.data(), true),
                         doctest::Contains("a crop of utterance 3 starting at frame 3: expected 0..2"), Error);
  }
}

TEST_CASE("random crop starts: uniform over the whole crops, new each epoch, a function of (seed, epoch, utterance)") {
  // One utterance of 20 frames, crops of 10: 11 positions; 22,000 draws over epochs.
  std::map<std::int64_t, int> seen;
  for (std::int64_t e = 0; e < 22000; ++e) ++seen[io::random_crop_start(7, e, 3, 20, 10)];
  REQUIRE(seen.size() == 11);
  CHECK(seen.begin()->first == 0);
  CHECK(seen.rbegin()->first == 10);
  double chi2 = 0;
  for (const auto& [pos, n] : seen) chi2 += (n - 2000.0) * (n - 2000.0) / 2000.0;
  CHECK(chi2 < 29.6);  // chi-square, 10 degrees of freedom: p = 0.001
  CHECK(io::random_crop_start(7, 4, 3, 20, 10) == io::random_crop_start(7, 4, 3, 20, 10));
  int differ = 0;
  for (std::int64_t u = 0; u < 100; ++u) differ += io::random_crop_start(7, 0, u, 500, 10) != io::random_crop_start(8, 0, u, 500, 10);
  CHECK(differ > 90);
  // A short utterance, or one exactly a crop long: its only crop starts at 0 (and wraps when short).
  CHECK(io::random_crop_start(7, 1, 3, 6, 10) == 0);
  CHECK(io::random_crop_start(7, 1, 3, 10, 10) == 0);
  CHECK(io::crop_frame(4, 3, 6) == 1);
}

TEST_CASE("melforge's ragged writer round-trips; the reader's training crops follow (seed, epoch) and resume exactly") {
  testing::TempDir dir("io_crops");
  const std::string path = dir / "utt.h5";
  // Frame t of the file holds t in every mel (exact in f16 up to 2048): a crop tells its frames.
  const std::vector<std::int64_t> lengths = {40, 25, 7, 60, 33, 12, 50, 18};
  const std::int64_t T = std::accumulate(lengths.begin(), lengths.end(), std::int64_t(0)), M = 4, N = 16;
  {
    io::WriteSpec ws;
    ws.shape = {0, M};
    ws.ragged = ws.appendable = true;
    ws.dtype = DType::f16;
    std::vector<float> v(std::size_t(T * M));
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t m = 0; m < M; ++m) v[std::size_t(t * M + m)] = float(t);
    io::H5Writer w(path, ws);
    w.append(T / 2, v.data());
    w.append(T - T / 2, v.data() + (T / 2) * M);
    w.finish_utterances(lengths, {0, 1, 0, 1, 0, 1, 0, 1}, {}, {});
  }
  io::DatasetNames names;
  names.crop_frames = N;
  const auto ds = io::Dataset::open(path, names);
  REQUIRE(ds->info().num_segments == 8);

  io::ReaderConfig rc;
  rc.batch_size = 4;
  rc.seed = 11;
  rc.threads = 2;
  rc.random_crops = true;
  io::BatchReader reader(ds, rc);
  CHECK_FALSE(reader.resident());
  std::vector<std::vector<float>> epoch_x;
  for (int b = 0; b < 4; ++b) {  // two epochs of two batches
    const io::Batch batch = reader.next();
    const std::vector<float> x = batch.x.to_floats();
    const auto idx = batch.index.to_floats();
    for (std::int64_t r = 0; r < batch.valid; ++r) {
      const auto u = std::int64_t(idx[std::size_t(r)]);
      const std::int64_t len = lengths[std::size_t(u)], off = ds->info().utterance_offsets[std::size_t(u)];
      const std::int64_t s = io::random_crop_start(11, batch.epoch, u, len, N);
      for (std::int64_t k = 0; k < N; ++k)  // [M, N]: mel 0's row holds the frames
        CHECK(x[std::size_t(r * M * N + k)] == float(off + (s + k) % len));
    }
    epoch_x.push_back(x);
  }
  // The same utterances, other crops, in the second epoch (positions differ for most).
  io::BatchReader again(ds, rc);
  again.restore({1, 1});
  CHECK(again.next().x.to_floats() == epoch_x[3]);
}
