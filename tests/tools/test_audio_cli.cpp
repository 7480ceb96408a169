// Audio in, decision out, as a user runs it: `melforge data build` on a
// folder of generated recordings, `melforge train` on the result, then
// `melforge predict --audio` on the held-out files must give the same rows as
// `melforge predict --data test.h5` (the same features, cut the same way, from
// the front-end parameters the checkpoint carries); and the command-line
// errors a user meets.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "tests/audio/test_audio_files.hpp"
#include "tests/support/cli.hpp"

namespace fs = std::filesystem;
using mf::testing::AudioFileFormat;
using mf::testing::has;
using mf::testing::TestAudioSpec;
using mf::testing::TestSignal;

namespace {
mf::testing::CliResult run(const std::string& args) { return mf::testing::run_cli(args); }

const char* kFrontend = "--sample-rate 8000 --n-fft 256 --hop 128 --mels 16 --frames 8 --long 2 --short 2";

// normal: noise; leak_low / leak_high: noise plus a tone at 700 / 2200 Hz,
// levels and rates varying per file.
void make_recordings(const fs::path& root, int per_class) {
  const char* classes[] = {"normal", "leak_low", "leak_high"};
  for (int c = 0; c < 3; ++c) {
    fs::create_directories(root / classes[c]);
    for (int i = 0; i < per_class; ++i) {
      TestAudioSpec n;
      n.signal = TestSignal::noise;
      n.sample_rate = i % 2 ? 16000 : 8000;
      n.frames = n.sample_rate * 55 / 100;
      n.amplitude = 0.05 + 0.01 * (i % 5);
      n.seed = std::uint64_t(1000 * c + i);
      auto x = mf::testing::generate_test_audio(n);
      if (c > 0) {
        TestAudioSpec t = n;
        t.signal = TestSignal::tone;
        t.frequency_hz = (c == 1 ? 700 : 2200) + 20 * (i % 4);
        t.amplitude = 0.1 + 0.02 * (i % 3);
        const auto y = mf::testing::generate_test_audio(t);
        for (std::size_t k = 0; k < x.size(); ++k) x[k] += y[k];
      }
      const auto fmt_ = i % 3 == 0 ? AudioFileFormat::flac16 : AudioFileFormat::wav_pcm16;
      mf::testing::write_audio_file(root / classes[c] / fmt::format("rec{:02d}{}", i, mf::testing::file_extension(fmt_)),
                                    fmt_, n.sample_rate, 1, x);
    }
  }
}

std::vector<std::string> files_of(const fs::path& h5) { return mf::testing::read_h5_strings(h5, "files"); }

std::vector<std::vector<std::string>> read_rows(const fs::path& csv) {
  std::ifstream in(csv);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    rows.push_back(f);
  }
  return rows;
}
}  // namespace

TEST_CASE("data build -> train -> predict --audio gives the rows of predict --data test.h5") {
  mf::testing::TempDir d("audio_cli");
  make_recordings(d.path() / "rec", 12);
  auto r = run(fmt::format("data build --audio {} --out {} {} --dtype f32 --seed 2 --progress plain", (d.path() / "rec").string(),
                           (d.path() / "data").string(), kFrontend));
  CAPTURE(r.out);
  REQUIRE(r.code == 0);
  CHECK(has(r, "bottleneck"));
  CHECK(has(r, "files/s"));
  r = run(fmt::format("train --train {} --val {} --out {} --epochs 4 --set model.channels=[8,16] --set model.pools=[2,2] "
                      "--set model.dense=32 --set train.batch_size=16 --set log.progress=off",
                      (d.path() / "data/train.h5").string(), (d.path() / "data/val.h5").string(), (d.path() / "run").string()));
  CAPTURE(r.out);
  REQUIRE(r.code == 0);
  std::ifstream cfg(d.path() / "run/config.toml");
  const std::string toml((std::istreambuf_iterator<char>(cfg)), std::istreambuf_iterator<char>());
  CHECK(toml.find("sample_rate = 8000") != std::string::npos);  // the front-end travels with the run
  const std::string ckpt = (d.path() / "run/checkpoints/best.h5").string();
  r = run(fmt::format("predict --checkpoint {} --data {} --out {}", ckpt, (d.path() / "data/test.h5").string(),
                      (d.path() / "p_data.csv").string()));
  CAPTURE(r.out);
  REQUIRE(r.code == 0);
  const auto files = files_of(d.path() / "data/test.h5");
  std::string args;
  for (const auto& f : files) args += fmt::format(" {}", (d.path() / "rec" / f).string());
  r = run(fmt::format("predict --checkpoint {} --audio{} --out {}", ckpt, args, (d.path() / "p_audio.csv").string()));
  CAPTURE(r.out);
  REQUIRE(r.code == 0);
  const auto a = read_rows(d.path() / "p_data.csv"), b = read_rows(d.path() / "p_audio.csv");
  REQUIRE(a.size() == files.size() + 1);
  REQUIRE(b.size() == a.size());
  CHECK(b[0][0] == "path");
  for (std::size_t i = 1; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(b[i][0] == (d.path() / "rec" / files[i - 1]).string());
    // file,label,label_name,<pred...> vs path,<pred...>: the same predictions and probabilities.
    CHECK(std::vector<std::string>(a[i].begin() + 3, a[i].end()) == std::vector<std::string>(b[i].begin() + 1, b[i].end()));
  }
  // Per segment: L x S = 4 rows per file, each naming its audio file.
  r = run(fmt::format("predict --checkpoint {} --audio{} --per-segment --out {}", ckpt, args, (d.path() / "p_seg.csv").string()));
  CHECK(r.code == 0);
  const auto seg = read_rows(d.path() / "p_seg.csv");
  REQUIRE(seg.size() == 4 * files.size() + 1);
  CHECK(seg[0][0] == "segment");
  CHECK(seg[0][1] == "path");
  CHECK(seg[5][1] == (d.path() / "rec" / files[1]).string());
  // A folder works too; a front-end other than the checkpoint's is refused.
  r = run(fmt::format("predict --checkpoint {} --audio {} --out {}", ckpt, (d.path() / "rec").string(), (d.path() / "p_all.csv").string()));
  CHECK(r.code == 0);
  CHECK(read_rows(d.path() / "p_all.csv").size() == 37);
  r = run(fmt::format("predict --checkpoint {} --audio {} --set frontend.n_fft=512 --out {}", ckpt, (d.path() / "rec").string(),
                      (d.path() / "x.csv").string()));
  CHECK(r.code == 1);
  CHECK(has(r, "trained on other features (n_fft = 256 vs 512: trained vs given)"));
  CHECK_FALSE(fs::exists(d.path() / "x.csv"));
}

TEST_CASE("data build: command-line errors name what was expected and what was found") {
  mf::testing::TempDir d("audio_cli_err");
  const std::string out = (d.path() / "o").string(), empty = (d.path() / "empty").string();
  auto r = run(fmt::format("data build --audio {} --out {}", (d.path() / "none").string(), out));
  CHECK(r.code == 1);
  CHECK(has(r, "expected a folder with one sub-folder per class"));
  fs::create_directories(d.path() / "empty/cls");
  r = run(fmt::format("data build --audio {} --out {}", empty, out));
  CHECK(r.code == 1);
  CHECK(has(r, "no audio files found"));
  r = run(fmt::format("data build --audio {} --out {} --split 0.5,0.5", empty, out));
  CHECK(r.code == 1);
  CHECK(has(r, "exactly three fractions"));
  r = run(fmt::format("data build --audio {} --out {} --n-fft 255", empty, out));
  CHECK(r.code == 1);
  CHECK(has(r, "n_fft 255"));
  r = run("data build --help");
  CHECK(r.code == 0);
  for (const char* opt : {"--audio", "--labels", "--split-by", "--sample-rate", "--n-fft", "--hop", "--mels", "--fmin",
                          "--fmax", "--frames", "--long", "--short", "--pad", "--strict", "--compress"})
    CHECK_MESSAGE(has(r, opt), opt);
}
