// io::Dataset against files written by h5py (tests/io/h5_cases.py): every
// layout, dtype and filter round-trips bit for bit, and every malformed case
// fails at open (or, for non-finite values, at read) with a message naming the
// file, the dataset, what was expected and what was found.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <numeric>
#include <random>

#include "engine/error.hpp"
#include "io/dataset.hpp"
#include "io/h5_writer.hpp"
#include "tests/io/io_testing.hpp"

using namespace mf;

namespace {

struct Case {
  const char* name;
  io::SegmentLayout layout;
  DType dtype;
  io::StorageLayout storage;
  bool fast;
};

const Case kGood[] = {
    {"flat_f32_contiguous", io::SegmentLayout::flat, DType::f32, io::StorageLayout::contiguous, true},
    {"flat_f16_contiguous", io::SegmentLayout::flat, DType::f16, io::StorageLayout::contiguous, true},
    {"flat_f16_chunked", io::SegmentLayout::flat, DType::f16, io::StorageLayout::chunked, true},
    {"flat_f32_gzip_shuffle", io::SegmentLayout::flat, DType::f32, io::StorageLayout::chunked, true},
    {"fs_f16_gzip_shuffle", io::SegmentLayout::file_structured, DType::f16, io::StorageLayout::chunked, true},
    {"fs_f32_gzip", io::SegmentLayout::file_structured, DType::f32, io::StorageLayout::chunked, true},
    {"fs_f32_chunked", io::SegmentLayout::file_structured, DType::f32, io::StorageLayout::chunked, true},
    {"fs_f16_contiguous_named", io::SegmentLayout::file_structured, DType::f16, io::StorageLayout::contiguous, true},
    {"fs_f32_fletcher32", io::SegmentLayout::file_structured, DType::f32, io::StorageLayout::chunked, false},
    {"flat_f32_compact", io::SegmentLayout::flat, DType::f32, io::StorageLayout::compact, false},
};

io::DatasetNames names_for(const std::string& name) {
  io::DatasetNames n;
  if (name == "fs_f16_contiguous_named") {
    n.segments = "mel";
    n.labels = "y";
  }
  return n;
}

std::string open_error(const std::string& path, const io::DatasetNames& names = {}) {
  try {
    io::Dataset::open(path, names);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string read_error(const std::string& path) {
  try {
    auto ds = io::Dataset::open(path);
    std::vector<std::int64_t> rows(static_cast<std::size_t>(ds->info().num_segments));
    std::iota(rows.begin(), rows.end(), 0);
    std::vector<float> out(rows.size() * std::size_t(ds->info().segment_elems()));
    ds->read(rows, DType::f32, out.data(), true);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("every layout, dtype and filter written by h5py reads back bit for bit") {
  const auto& dir = testing::h5_cases();
  for (const Case& c : kGood) {
    const std::string cname = c.name;
    CAPTURE(cname);
    const auto ds = io::Dataset::open(dir / (std::string(c.name) + ".h5"), names_for(c.name));
    const io::DatasetInfo& in = ds->info();
    CHECK(in.layout == c.layout);
    CHECK(in.dtype == c.dtype);
    CHECK(in.storage.layout == c.storage);
    CHECK(in.storage.fast_path == c.fast);
    CHECK(in.n_mels == 8);
    CHECK(in.frames == 12);
    CHECK(in.num_classes == 3);
    CHECK(in.class_names == std::vector<std::string>{"normal", "leak_a", "leak_b"});
    const auto ref = testing::read_raw<float>(dir / (std::string(c.name) + ".ref.bin"));
    const auto labels = testing::read_raw<std::int32_t>(dir / (std::string(c.name) + ".labels.bin"));
    const std::int64_t N = in.num_segments, E = in.segment_elems();
    REQUIRE(std::int64_t(ref.size()) == N * E);
    REQUIRE(std::int64_t(labels.size()) == N);
    CHECK(std::vector<std::int32_t>(in.labels.begin(), in.labels.end()) == labels);
    for (std::int64_t s = 0; s < N; ++s) CHECK(in.leak[std::size_t(s)] == (labels[std::size_t(s)] != 0));
    if (c.layout == io::SegmentLayout::file_structured) {
      CHECK(in.num_files == 5);
      CHECK(in.segments_per_file == 12);
      CHECK(in.file_of(13) == 1);
      CHECK(in.where(13) == "segment 13 (file 1, long 0, short 1)");
    }

    // All rows, in a shuffled order with repeats (the reader sorts; Dataset must not need it).
    std::vector<std::int64_t> rows(static_cast<std::size_t>(N));
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), std::mt19937(7));
    rows.push_back(rows.front());
    std::vector<float> got(rows.size() * std::size_t(E), -12345.f);
    ds->read(rows, DType::f32, got.data(), true);
    std::int64_t mismatches = 0;
    for (std::size_t r = 0; r < rows.size(); ++r)
      for (std::int64_t e = 0; e < E; ++e)
        mismatches += std::bit_cast<std::uint32_t>(got[r * std::size_t(E) + std::size_t(e)]) !=
                      std::bit_cast<std::uint32_t>(ref[std::size_t(rows[r] * E + e)]);
    CHECK(mismatches == 0);

    // Sorted subsets into bf16 and f16 match the host conversion of the reference.
    for (DType dt : {DType::bf16, DType::f16}) {
      const std::vector<std::int64_t> sub = {0, 1, N / 2, N - 1};
      std::vector<std::uint16_t> h(sub.size() * std::size_t(E));
      ds->read(sub, dt, h.data(), true);
      std::int64_t bad = 0;
      for (std::size_t r = 0; r < sub.size(); ++r)
        for (std::int64_t e = 0; e < E; ++e) {
          const float v = ref[std::size_t(sub[r] * E + e)];
          const std::uint16_t want = dt == DType::bf16 ? f32_to_bf16_bits(v) : f32_to_f16_bits(v);
          bad += h[r * std::size_t(E) + std::size_t(e)] != want;
        }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("read_all matches read of every row, with several threads") {
  const auto& dir = testing::h5_cases();
  for (const std::string name : {"fs_f16_gzip_shuffle", "flat_f16_chunked", "flat_f32_contiguous"}) {
    CAPTURE(name);
    const auto ds = io::Dataset::open(dir / (std::string(name) + ".h5"));
    const auto ref = testing::read_raw<float>(dir / (std::string(name) + ".ref.bin"));
    std::vector<float> all(ref.size());
    ds->read_all(DType::f32, all.data(), true, 3);
    CHECK(std::memcmp(all.data(), ref.data(), ref.size() * 4) == 0);
  }
}

TEST_CASE("attributes and the leak dataset are read; leak derives from the normal class") {
  const auto& dir = testing::h5_cases();
  auto ds = io::Dataset::open(dir / "fs_f16_gzip_shuffle.h5");
  CHECK(ds->info().leak_in_file);
  CHECK(ds->info().sample_rate == 16000);
  CHECK(ds->info().hop_length == 256);
  CHECK(ds->info().normal_class == 0);
  auto named = io::Dataset::open(dir / "fs_f16_contiguous_named.h5", names_for("fs_f16_contiguous_named"));
  CHECK_FALSE(named->info().leak_in_file);
  io::DatasetNames n = names_for("fs_f16_contiguous_named");
  n.normal_class = 1;
  auto other = io::Dataset::open(dir / "fs_f16_contiguous_named.h5", n);
  CHECK(other->info().file_leak == std::vector<std::uint8_t>{1, 0, 1, 0, 1});
}

TEST_CASE("each malformed file fails at open with a message naming file, dataset, expected and found") {
  const auto& dir = testing::h5_cases();
  struct Bad {
    const char* file;
    std::vector<std::string> parts;
  };
  const std::vector<Bad> cases = {
      {"bad_missing_segments.h5", {"dataset /segments is missing", "expected float16/float32", "root holds: labels"}},
      {"bad_missing_labels.h5", {"dataset /labels is missing", "expected integer labels [6]", "root holds: segments"}},
      {"bad_rank4.h5", {"/segments has the wrong rank", "expected 3", "found rank 4 [2, 3, 8, 12]"}},
      {"bad_int_segments.h5", {"/segments must hold float16 or float32", "found 16-bit integer"}},
      {"bad_f64_segments.h5", {"/segments has an unsupported float width", "expected 16 or 32 bits", "found 64 bits"}},
      {"bad_label_count.h5", {"/labels has shape [5]", "expected [6]", "does not match"}},
      {"bad_negative_label.h5", {"/labels holds a negative label -1 at index 2", "expected class indices"}},
      {"bad_label_range.h5", {"/labels holds label 5 at index 2, out of range", "expected 0..2", "class_names"}},
      {"bad_float_labels.h5", {"/labels must hold integers", "found 32-bit float"}},
      {"bad_empty.h5", {"/segments is empty", "[0, 8, 12]"}},
      {"bad_leak_value.h5", {"/leak holds 2 at index 2", "expected 0 or 1"}},
      {"bad_n_mels_attr.h5", {"attribute n_mels = 40", "expected n_mels = 8"}},
      {"bad_unwritten_chunks.h5", {"/segments has a chunk at [0, 0, 0] that was never written"}},
      {"bad_truncated.h5", {"cannot open as HDF5", "truncated"}},
      {"bad_not_hdf5.h5", {"not an HDF5 file", "expected the HDF5 signature"}},
      {"bad_lzf.h5", {"/segments is compressed with 'lzf'", "cannot decode", "expected no filter, gzip"}},
      {"does_not_exist.h5", {"cannot open", "No such file"}},
      // Declared sizes the file does not hold, and values of the wrong shape.
      {"bad_huge_contiguous.h5", {"file truncated: dataset /segments occupies 8444249301319680 bytes"}},
      {"bad_huge_chunked.h5", {"/segments has a chunk at [6, 0, 0] that was never written"}},
      {"bad_overflow_shape.h5", {"/segments has shape [4294967296, 4294967296, 12]", "overflows"}},
      {"bad_unwritten_labels.h5", {"dataset /labels: shape [6] of 32-bit integer declares 24 bytes",
                                   "stores 0 bytes"}},
      {"bad_class_names_2d.h5", {"attribute class_names", "expected a scalar or a list of strings, found shape [2, 2]"}},
      {"bad_class_names_int.h5", {"attribute class_names", "expected strings, found 32-bit integer"}},
      {"bad_hop_length_huge.h5", {"attribute hop_length", "expected a whole number in [0, 2^53], found 1e+300"}},
      {"bad_sample_rate_array.h5", {"attribute sample_rate", "expected one number (a scalar), found shape [2]"}},
      {"bad_class_names_not_utf8.h5", {"attribute class_names", "entry 1 is not UTF-8 text (byte 0xE9 at index 3)"}},
      {"bad_files_not_utf8.h5", {"dataset /files", "entry 2 is not UTF-8 text (byte 0xC3 at index 0)"}},
      // Whole utterances: /lengths must exist and cut /segments' frames exactly.
      {"bad_ragged_no_lengths.h5", {"dataset /lengths is missing", "[20, 8] holds whole utterances",
                                    "summing to 20"}},
      {"bad_ragged_lengths_sum.h5", {"dataset /lengths sums to 19 frames", "[20, 8] holds 20"}},
      {"bad_ragged_lengths_zero.h5", {"dataset /lengths entry 1 is 0", "expected a length of 1..15 frames",
                                      "utterance 1 starts at frame 5"}},
      {"bad_ragged_lengths_overrun.h5", {"dataset /lengths entry 1 is 15", "expected a length of 1..10 frames"}},
      {"bad_ragged_lengths_too_many.h5", {"dataset /lengths has shape [21]", "expected [F] with 1 <= F <= 20"}},
      {"bad_ragged_lengths_float.h5", {"dataset /lengths must hold integers", "found 32-bit float"}},
  };
  for (const Bad& b : cases) {
    const std::string bfile = b.file;
    CAPTURE(bfile);
    const std::string path = dir / b.file;
    if (std::string(b.file) == "bad_lzf.h5" && !std::filesystem::exists(path)) continue;  // h5py without lzf
    const std::string msg = open_error(path);
    CAPTURE(msg);
    CHECK(contains(msg, path));
    for (const auto& p : b.parts) CHECK(contains(msg, p));
  }
}

TEST_CASE("configured names that do not exist are reported with the names found") {
  const auto& dir = testing::h5_cases();
  io::DatasetNames n;
  n.segments = "spectrograms";
  const std::string msg = open_error(dir / "fs_f32_gzip.h5", n);
  CHECK(contains(msg, "dataset /spectrograms is missing"));
  CHECK(contains(msg, "segments"));
  n.segments = "group/deeper/x";
  CHECK(contains(open_error(dir / "fs_f32_gzip.h5", n), "dataset /group/deeper/x is missing"));
}

TEST_CASE("non-finite values are reported at read with their position") {
  const auto& dir = testing::h5_cases();
  const std::string nan = read_error(dir / "bad_nan.h5");
  CHECK(contains(nan, dir / "bad_nan.h5"));
  CHECK(contains(nan, "/segments holds a non-finite value (nan) at segment 3, mel 2, frame 5"));
  const std::string inf = read_error(dir / "bad_inf_gzip.h5");
  CHECK(contains(inf, "non-finite value (inf) at segment 4, mel 7, frame 11"));
  // Without the check the values come through (the caller asked for raw data).
  auto ds = io::Dataset::open(dir / "bad_nan.h5");
  std::vector<float> out(std::size_t(ds->info().segment_elems()));
  const std::int64_t row = 3;
  ds->read(std::span<const std::int64_t>(&row, 1), DType::f32, out.data(), false);
  CHECK(std::isnan(out[2 * 12 + 5]));
}

TEST_CASE("a file truncated after open fails at read, not silently") {
  testing::TempDir tmp("io_trunc");
  const std::string path = tmp / "t.h5";
  std::filesystem::copy_file(testing::h5_cases() / "flat_f32_contiguous.h5", path);
  auto ds = io::Dataset::open(path);
  std::filesystem::resize_file(path, 4096);
  std::vector<std::int64_t> rows = {30, 31, 36};
  std::vector<float> out(rows.size() * std::size_t(ds->info().segment_elems()));
  try {
    ds->read(rows, DType::f32, out.data(), true);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(contains(e.what(), "file truncated"));
    CHECK(contains(e.what(), path));
  }
}

TEST_CASE("melforge's own writer round-trips through the reader (f16, f32; contiguous, chunked, gzip)") {
  testing::TempDir tmp("io_writer");
  for (DType dt : {DType::f16, DType::f32})
    for (io::WriteStorage st : {io::WriteStorage::contiguous, io::WriteStorage::chunked, io::WriteStorage::gzip}) {
      io::WriteSpec ws;
      ws.shape = {3, 2, 2, 5, 7};
      ws.dtype = dt;
      ws.storage = st;
      ws.labels = {0, 2, 1};
      ws.class_names = {"normal", "x", "y"};
      const std::string path = tmp / "w.h5";
      std::vector<float> v(static_cast<std::size_t>(shape_numel(ws.shape)));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(int(i % 61) - 30) * 0.25f;  // exact in f16
      {
        io::H5Writer w(path, ws);
        w.write_segments(0, 8, v.data());
        w.write_segments(8, 4, v.data() + 8 * 35);
      }
      auto ds = io::Dataset::open(path);
      CHECK(ds->info().dtype == dt);
      CHECK(ds->info().num_segments == 12);
      CHECK(ds->info().labels[5] == 2);
      std::vector<float> all(v.size());
      ds->read_all(DType::f32, all.data(), true, 2);
      CHECK(all == v);
    }
}

TEST_CASE("a label too large for a class index is reported as such, with file and dataset") {
  testing::TempDir tmp("io_biglabel");
  io::WriteSpec ws;
  ws.shape = {3, 5, 7};
  ws.dtype = DType::f32;
  ws.labels = {0, std::int64_t(1) << 31, 1};  // no class_names: the class count comes from the largest label
  const std::string path = tmp / "big.h5";
  std::vector<float> v(static_cast<std::size_t>(shape_numel(ws.shape)), 0.5f);
  {
    io::H5Writer w(path, ws);
    w.write_segments(0, 3, v.data());
  }
  std::string msg = "<no error>";
  try {
    io::Dataset::open(path);
  } catch (const Error& e) {
    msg = e.message();
  }
  CHECK_MESSAGE(msg.find("big.h5: dataset /labels label value 2147483648 at index 1 exceeds the largest supported "
                         "class index 2147483646") != std::string::npos,
                msg);
}

TEST_CASE("DatasetNames::classes: labels are matched to the model's classes by name; a foreign class is refused") {
  testing::TempDir tmp("io_classes");
  auto write = [&](const std::string& name, std::vector<std::int64_t> labels, std::vector<std::string> names) {
    io::WriteSpec ws;
    ws.shape = {std::int64_t(labels.size()), 2, 3};
    ws.dtype = DType::f32;
    ws.labels = std::move(labels);
    ws.class_names = std::move(names);
    const std::string path = tmp / name;
    std::vector<float> v(static_cast<std::size_t>(shape_numel(ws.shape)), 0.25f);
    io::H5Writer w(path, ws);
    w.write_segments(0, ws.shape[0], v.data());
    return path;
  };
  io::DatasetNames model;
  model.classes = {"leak_low", "leak_high", "normal", "pump"};
  // Another order and a subset (a test set built from two class folders):
  // labels follow the names, the dataset has the model's four classes.
  const std::string sub = write("sub.h5", {0, 1, 1, 0}, {"normal", "leak_high"});
  auto ds = io::Dataset::open(sub, model);
  CHECK(ds->info().class_names == model.classes);
  CHECK(ds->info().num_classes == 4);
  CHECK(ds->info().labels == std::vector<std::int32_t>{2, 1, 1, 2});
  CHECK(ds->info().classes_present == std::vector<std::string>{"leak_high", "normal"});
  CHECK(ds->info().normal_class == 2);  // the leak targets derive from the model's "normal"
  CHECK(ds->info().leak == std::vector<std::uint8_t>{0, 1, 1, 0});
  // Without the model's classes the file is read as it is (index 0 is normal there).
  CHECK(io::Dataset::open(sub)->info().labels == std::vector<std::int32_t>{0, 1, 1, 0});
  // A class the model does not have is refused, naming both lists.
  const std::string foreign = write("foreign.h5", {0, 1}, {"normal", "valve"});
  std::string msg = "<no error>";
  try {
    io::Dataset::open(foreign, model);
  } catch (const Error& e) {
    msg = e.message();
  }
  CHECK_MESSAGE(msg.find("its classes (attribute class_names) are [normal, valve], the model has [leak_low, leak_high, "
                         "normal, pump]: class 'valve' (label 1) is not one of them") != std::string::npos, msg);
  // A file that names no classes is taken index for index, within the model's count.
  const std::string unnamed = write("unnamed.h5", {3, 0}, {});
  CHECK(io::Dataset::open(unnamed, model)->info().labels == std::vector<std::int32_t>{3, 0});
  const std::string too_many = write("too_many.h5", {4, 0}, {});
  CHECK_THROWS_WITH_AS(io::Dataset::open(too_many, model), doctest::Contains("holds label 4, out of range"), Error);
}
