// `melforge data synth` and `melforge data inspect` as a user runs them: exit
// codes and messages, on good and bad files (never a core dump).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>

#include "io/dataset.hpp"
#include "io/h5_writer.hpp"
#include "tests/io/io_testing.hpp"
#include "tests/support/cli.hpp"

namespace {
using Result = mf::testing::CliResult;
using mf::testing::has;
Result run(const std::string& args) { return mf::testing::run_cli(args); }
}  // namespace

TEST_CASE("data synth writes train/val/test split by file, reproducibly; inspect reads them") {
  mf::testing::TempDir dir("cli_synth");
  const Result r = run("data synth --out " + (dir / "a") + " --files 12 --classes 3 --mels 16 --frames 20 --long 2 "
                       "--short 3 --seed 9");
  CAPTURE(r.out);
  REQUIRE(r.code == 0);
  CHECK(has(r, "train"));
  for (const char* s : {"train.h5", "val.h5", "test.h5"}) CHECK(std::filesystem::exists(dir / ("a/" + std::string(s))));
  // Same seed, same bytes; another seed, other bytes.
  REQUIRE(run("data synth --out " + (dir / "b") + " --files 12 --classes 3 --mels 16 --frames 20 --long 2 --short 3 "
              "--seed 9").code == 0);
  REQUIRE(run("data synth --out " + (dir / "c") + " --files 12 --classes 3 --mels 16 --frames 20 --long 2 --short 3 "
              "--seed 10 --dtype f32 --storage gzip").code == 0);
  auto a = mf::io::Dataset::open(dir / "a/train.h5"), b = mf::io::Dataset::open(dir / "b/train.h5"),
       c = mf::io::Dataset::open(dir / "c/train.h5");
  CHECK(a->info().layout == mf::io::SegmentLayout::file_structured);
  CHECK(a->info().shape == mf::Shape{6, 2, 3, 16, 20});
  CHECK(a->info().num_classes == 3);
  CHECK(c->info().dtype == mf::DType::f32);
  CHECK(c->info().storage.filters.size() == 2);
  std::vector<float> va(std::size_t(36 * 320)), vb(va.size()), vc(va.size());
  a->read_all(mf::DType::f32, va.data(), true, 2);
  b->read_all(mf::DType::f32, vb.data(), true, 2);
  c->read_all(mf::DType::f32, vc.data(), true, 2);
  CHECK(va == vb);
  CHECK(va != vc);
  // Files of every class in every split.
  for (const char* s : {"train.h5", "val.h5", "test.h5"}) {
    auto d = mf::io::Dataset::open(dir / ("a/" + std::string(s)));
    std::vector<int> count(3, 0);
    for (auto l : d->info().file_labels) ++count[std::size_t(l)];
    for (int n : count) CHECK(n >= 1);
  }
  const Result i = run("data inspect " + (dir / "c/train.h5"));
  CAPTURE(i.out);
  CHECK(i.code == 0);
  for (const char* s : {"file-structured", "f32 [6, 2, 3, 16, 20]", "chunked", "shuffle", "deflate", "histogram",
                        "normal", "leak_mid", "values", "finite"})
    CHECK(has(i, s));
  CHECK(has(i, "leak segments"));
}

TEST_CASE("data inspect on a speaker set says it has no leak target") {
  mf::testing::TempDir dir("cli_inspect_speakers");
  Result r = run(fmt::format("data synth --out {} --speakers 6 --files-per-speaker 2 --mels 16 --frames 16 --long 1 "
                             "--short 2 --seed 1", dir / "spk"));
  INFO(r.out);
  REQUIRE(r.code == 0);
  r = run("data inspect " + (dir / "spk/train.h5"));
  CHECK(r.code == 0);
  CHECK(has(r, "leak        none: no /leak dataset and no class named normal"));
  CHECK_FALSE(has(r, "leak segments"));
  CHECK_FALSE(has(r, "derived: label != 0"));
}

TEST_CASE("data synth below 64 mels is the 64-band scene with adjacent bands averaged in power") {
  // A coarser filter bank over the same recording: tones and leak bands keep
  // their widths in Hz, so a 32-mel dataset is the 64-mel task at half the
  // resolution, not a harder one.
  mf::testing::TempDir dir("cli_synth_mels");
  const std::string common = " --files 6 --classes 4 --frames 8 --long 1 --short 2 --seed 3 --dtype f32";
  REQUIRE(run("data synth --out " + (dir / "m64") + " --mels 64" + common).code == 0);
  REQUIRE(run("data synth --out " + (dir / "m32") + " --mels 32" + common).code == 0);
  auto hi = mf::io::Dataset::open(dir / "m64/train.h5"), lo = mf::io::Dataset::open(dir / "m32/train.h5");
  const std::int64_t files = hi->info().shape[0];
  REQUIRE(files >= 1);
  REQUIRE(hi->info().shape == mf::Shape{files, 1, 2, 64, 8});
  REQUIRE(lo->info().shape == mf::Shape{files, 1, 2, 32, 8});
  const auto segs = std::size_t(files * 2);
  std::vector<float> vh(segs * 64 * 8), vl(segs * 32 * 8);
  hi->read_all(mf::DType::f32, vh.data(), true, 1);
  lo->read_all(mf::DType::f32, vl.data(), true, 1);
  double worst = 0;
  for (std::size_t s = 0; s < segs; ++s)
    for (std::size_t m = 0; m < 32; ++m)
      for (std::size_t t = 0; t < 8; ++t) {
        const double p = (std::pow(10.0, double(vh[(s * 64 + 2 * m) * 8 + t])) +
                          std::pow(10.0, double(vh[(s * 64 + 2 * m + 1) * 8 + t]))) / 2;
        worst = std::max(worst, std::abs(std::log10(p + 1e-12) - double(vl[(s * 32 + m) * 8 + t])));
      }
  CHECK(worst < 1e-5);
}

TEST_CASE("data synth rejects bad arguments with a message") {
  mf::testing::TempDir dir("cli_synth_bad");
  Result r = run("data synth --out " + (dir / "x") + " --files 2");
  CHECK(r.code == 1);
  CHECK(has(r, "--files must be >= 3"));
  r = run("data synth --out " + (dir / "x") + " --dtype f64");
  CHECK(r.code == 1);
  r = run("data synth --out " + (dir / "x") + " --storage lz4");
  CHECK(r.code == 1);
  CHECK(has(r, "expected contiguous, chunked or gzip"));
}

TEST_CASE("data inspect: bad files exit 1 with the file, the dataset, expected and found") {
  mf::testing::TempDir dir("cli_inspect_bad");
  {
    std::ofstream(dir / "text.h5") << "this is not HDF5\n";
  }
  Result r = run("data inspect " + (dir / "text.h5"));
  CHECK(r.code == 1);
  CHECK(has(r, "not an HDF5 file"));
  CHECK(has(r, dir / "text.h5"));

  REQUIRE(run("data synth --out " + (dir / "s") + " --files 6 --classes 4 --mels 8 --frames 8 --long 1 --short 2").code == 0);
  const std::string good = dir / "s/train.h5";
  r = run("data inspect " + good + " --segments nope");
  CHECK(r.code == 1);
  CHECK(has(r, "dataset /nope is missing"));
  CHECK(has(r, "segments"));

  std::filesystem::copy_file(good, dir / "trunc.h5");
  std::filesystem::resize_file(dir / "trunc.h5", std::filesystem::file_size(good) / 2);
  r = run("data inspect " + (dir / "trunc.h5"));
  CHECK(r.code == 1);
  CHECK(has(r, "truncated"));

  mf::io::WriteSpec ws;
  ws.shape = {4, 8, 8};
  ws.dtype = mf::DType::f32;
  ws.labels = {0, 1, 0, 1};
  std::vector<float> v(256, 0.5f);
  v[2 * 64 + 9] = INFINITY;
  {
    mf::io::H5Writer w(dir / "inf.h5", ws);
    w.write_segments(0, 4, v.data());
  }
  r = run("data inspect " + (dir / "inf.h5"));
  CHECK(r.code == 1);
  CHECK(has(r, "non-finite value (inf) at segment 2, mel 1, frame 1"));
  r = run("data inspect " + (dir / "inf.h5") + " --no-scan");
  CHECK(r.code == 0);

  r = run("data inspect " + (dir / "missing.h5"));
  CHECK(r.code == 1);
  CHECK(has(r, "No such file"));
}
