// `melforge data build`'s library (audio/dataset_builder.hpp): labels from
// folders or a CSV, the seeded stratified and grouped splits, the written
// files (shape, /files, attributes, features equal to the op on the decoded
// audio), bad files reported and skipped, strict, pad, and results that do
// not depend on the thread count.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <hdf5.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "audio/dataset_builder.hpp"
#include "audio/decode.hpp"
#include "audio/logmel.hpp"
#include "io/dataset.hpp"
#include "tests/audio/test_audio_files.hpp"
#include "tests/support/testing.hpp"

namespace fs = std::filesystem;
using namespace mf;
using mf::testing::AudioFileFormat;
using mf::testing::TestAudioSpec;
using mf::testing::TestSignal;

namespace {

// Small front-end so the tests stay fast: 8 kHz, n_fft 256, hop 128, 16 mels,
// 2 x 2 segments of 8 frames = 32 frames = 3968 samples (~0.5 s).
audio::FrontendParams small_frontend() {
  audio::FrontendParams p;
  p.sample_rate = 8000;
  p.n_fft = 256;
  p.hop_length = 128;
  p.n_mels = 16;
  p.frames = 8;
  p.long_segments = 2;
  p.short_segments = 2;
  return p;
}

audio::BuildOptions options(const fs::path& root, const fs::path& out) {
  audio::BuildOptions o;
  o.audio_root = root;
  o.out_dir = out;
  o.pipeline.frontend = small_frontend();
  o.dtype = DType::f32;
  o.seed = 3;
  o.pipeline.threads = 2;
  o.pipeline.batch_files = 5;  // several batches, a partial last one
  return o;
}

std::vector<std::string> read_files_dataset(const fs::path& h5) { return mf::testing::read_h5_strings(h5, "files"); }

double read_number_attribute(const fs::path& h5, const char* name) {
  const hid_t f = H5Fopen(h5.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  REQUIRE_MESSAGE(a >= 0, "attribute ", name);
  double v = 0;
  H5Aread(a, H5T_NATIVE_DOUBLE, &v);
  H5Aclose(a);
  H5Fclose(f);
  return v;
}

std::vector<float> all_values(const fs::path& h5) {
  auto ds = io::Dataset::open(h5.string());
  std::vector<float> v(std::size_t(ds->info().num_segments * ds->info().segment_elems()));
  ds->read_all(DType::f32, v.data(), true, 1);
  return v;
}

}  // namespace

TEST_CASE("data build: folders -> stratified seeded splits with /files, attributes and the op's features") {
  mf::testing::TempDir dir("audio_build");
  mf::testing::write_class_folders(dir.path() / "audio", {"normal", "leak_small", "leak_big"}, 10);
  const auto o = options(dir.path() / "audio", dir.path() / "out");
  const auto r = audio::build_dataset(o);
  CHECK(r.class_names == std::vector<std::string>{"leak_big", "leak_small", "normal"});
  CHECK(r.skipped.empty());
  std::set<std::string> seen;
  std::int64_t total = 0;
  for (const auto& s : r.splits) {
    REQUIRE(!s.path.empty());
    auto ds = io::Dataset::open(s.path.string());
    const auto& in = ds->info();
    CHECK(in.shape == Shape{s.files_written, 2, 2, 16, 8});
    CHECK(in.class_names == r.class_names);
    CHECK(in.normal_class == 2);  // the class named normal
    CHECK(in.n_fft == 256);
    CHECK(in.sample_rate == 8000);
    CHECK(in.hop_length == 128);
    CHECK(read_number_attribute(s.path, "fmax") == 4000);
    for (auto n : s.files_per_class) CHECK(n >= 1);  // every class in every split
    const auto files = read_files_dataset(s.path);
    REQUIRE(files.size() == std::size_t(s.files_written));
    CHECK(std::is_sorted(files.begin(), files.end()));
    for (std::size_t i = 0; i < files.size(); ++i) {
      // The label is the file's folder.
      CHECK(r.class_names[std::size_t(in.file_labels[i])] == files[i].substr(0, files[i].find('/')));
      CHECK(seen.insert(files[i]).second);
    }
    total += s.files_written;
  }
  CHECK(total == 30);
  CHECK(r.splits[0].files_written == 3 * 6);  // 10 per class: val and test round(1.5) = 2 each, train 6
  CHECK(fs::exists(dir.path() / "out/skipped.csv"));

  // Every segment is the op's output on the decoded file: segment l*S + s of
  // the file holds frames [(l*S + s) * frames, ...).
  const auto& test = r.splits[2];
  const auto files = read_files_dataset(test.path);
  const auto values = all_values(test.path);
  const auto p = small_frontend();
  auto op = audio::make_logmel_cpu(p);
  const std::int64_t E = p.segments() * p.n_mels * p.frames;
  for (std::size_t i = 0; i < files.size(); ++i) {
    auto a = audio::load_mono(dir.path() / "audio" / files[i], p.sample_rate);
    std::vector<float> row(std::size_t(p.window_samples()), 0.f);
    std::copy_n(a.samples.begin(), std::min(a.samples.size(), row.size()), row.begin());
    std::vector<float> want(static_cast<std::size_t>(E));
    op->compute(1, row.data(), want.data(), nullptr);
    CAPTURE(files[i]);
    CHECK(std::equal(want.begin(), want.end(), values.begin() + std::ptrdiff_t(i) * E));
  }
}

TEST_CASE("data build: the split depends on the seed only; the bytes not on the thread count or batch size") {
  mf::testing::TempDir dir("audio_build_det");
  mf::testing::write_class_folders(dir.path() / "audio", {"a", "b"}, 9);
  auto o = options(dir.path() / "audio", dir.path() / "one");
  o.pipeline.threads = 1;
  o.pipeline.batch_files = 64;
  audio::build_dataset(o);
  o = options(dir.path() / "audio", dir.path() / "two");
  audio::build_dataset(o);
  o = options(dir.path() / "audio", dir.path() / "seed");
  o.seed = 4;
  audio::build_dataset(o);
  for (const char* s : {"train.h5", "val.h5", "test.h5"}) {
    CHECK(read_files_dataset(dir.path() / "one" / s) == read_files_dataset(dir.path() / "two" / s));
    CHECK(all_values(dir.path() / "one" / s) == all_values(dir.path() / "two" / s));
  }
  CHECK(read_files_dataset(dir.path() / "one/val.h5") != read_files_dataset(dir.path() / "seed/val.h5"));
  // --compress gzip: shuffle + deflate chunks, the same values.
  o = options(dir.path() / "audio", dir.path() / "gz");
  o.gzip = true;
  audio::build_dataset(o);
  CHECK(io::Dataset::open((dir.path() / "gz/train.h5").string())->info().storage.filters.size() == 2);
  CHECK(all_values(dir.path() / "gz/train.h5") == all_values(dir.path() / "two/train.h5"));
}

TEST_CASE("data build: bad files are skipped with their reasons; --strict stops; --pad keeps short files") {
  mf::testing::TempDir dir("audio_build_bad");
  mf::testing::write_class_folders(dir.path() / "audio", {"x", "y"}, 6);
  std::ofstream(dir.path() / "audio/x/text.wav") << "this is not audio\n";
  std::ofstream(dir.path() / "audio/y/notes.txt") << "ignored: not an audio extension\n";
  TestAudioSpec s;
  s.sample_rate = 8000;
  s.frames = 1000;  // 0.125 s: too short for 32 frames
  mf::testing::write_test_audio(dir.path() / "audio/y/short.wav", AudioFileFormat::wav_pcm16, s);
  auto o = options(dir.path() / "audio", dir.path() / "out");
  o.split = audio::parse_split("1,0,0");
  const auto r = audio::build_dataset(o);
  REQUIRE(r.skipped.size() == 2);
  std::map<std::string, std::string> why;
  for (const auto& k : r.skipped) why[k.path] = k.reason;
  CHECK(why["x/text.wav"].find("x/text.wav") != std::string::npos);
  CHECK(why["y/short.wav"].find("too short") != std::string::npos);
  CHECK(why["y/short.wav"].find("--pad") != std::string::npos);
  CHECK(r.ignored.size() == 1);
  CHECK(r.splits[0].files_written == 12);
  CHECK(r.splits[1].path.empty());  // fraction 0: not written
  CHECK(!fs::exists(dir.path() / "out/val.h5"));
  std::ifstream sk(dir.path() / "out/skipped.csv");
  std::string csv((std::istreambuf_iterator<char>(sk)), std::istreambuf_iterator<char>());
  CHECK(csv.find("x/text.wav,") != std::string::npos);

  o.pipeline.pad = true;
  o.out_dir = dir.path() / "padded";
  const auto rp = audio::build_dataset(o);
  CHECK(rp.skipped.size() == 1);
  CHECK(rp.padded == 1);
  CHECK(rp.splits[0].files_written == 13);

  o.pipeline.strict = true;
  o.out_dir = dir.path() / "strict";
  const std::string e = mf::testing::error_of([&] { audio::build_dataset(o); });
  CHECK(e.find("text.wav") != std::string::npos);
  CHECK(e.find("--strict") != std::string::npos);
  CHECK(!fs::exists(dir.path() / "strict/train.h5"));  // nothing half-written
  for (const auto& f : fs::directory_iterator(dir.path() / "strict")) FAIL_CHECK("left behind: ", f.path());
}

TEST_CASE("data build: --labels CSV with a leak column; --split-by groups never cross splits") {
  mf::testing::TempDir dir("audio_build_csv");
  mf::testing::write_class_folders(dir.path() / "audio", {"g"}, 12);
  {
    std::ofstream csv(dir.path() / "labels.csv");
    csv << "path,label,leak\n";
    for (int i = 0; i < 12; ++i)
      csv << fmt::format("g/f{:02d}{},{},{}\n", i, i % 3 == 1 ? ".flac" : ".wav", i % 2 ? "pipe_b" : "pipe_a", int(i % 3 == 0));
    std::ofstream groups(dir.path() / "groups.csv");
    groups << "path,group\n";
    for (int i = 0; i < 12; ++i) groups << fmt::format("g/f{:02d}{},site{}\n", i, i % 3 == 1 ? ".flac" : ".wav", i / 2);
  }
  auto o = options(dir.path() / "audio", dir.path() / "out");
  o.labels_csv = dir.path() / "labels.csv";
  o.split_by_csv = dir.path() / "groups.csv";
  o.split = audio::parse_split("0.5,0.25,0.25");
  const auto r = audio::build_dataset(o);
  CHECK(r.class_names == std::vector<std::string>{"pipe_a", "pipe_b"});
  std::map<std::string, std::string> split_of_site;
  for (const auto& s : r.splits) {
    REQUIRE(!s.path.empty());
    auto ds = io::Dataset::open(s.path.string());
    CHECK(ds->info().leak_in_file);
    const auto files = read_files_dataset(s.path);
    for (std::size_t i = 0; i < files.size(); ++i) {
      const int n = std::stoi(files[i].substr(3, 2));
      CHECK(ds->info().file_leak[i] == (n % 3 == 0));
      const std::string site = std::to_string(n / 2);
      CHECK((split_of_site.emplace(site, s.name).first->second == s.name));  // a site stays in one split
    }
  }
  CHECK(r.splits[0].files_written == 6);

  std::ofstream(dir.path() / "bad.csv") << "path,label,leak\ng/f00.wav,a,2\n";
  o.labels_csv = dir.path() / "bad.csv";
  o.split_by_csv.clear();
  CHECK(mf::testing::error_of([&] { audio::build_dataset(o); }).find("leak must be 0 or 1, found '2'") !=
        std::string::npos);
  CHECK(mf::testing::error_of([&] { audio::parse_split("0.7,0.2"); }).find("three") != std::string::npos);
  CHECK(mf::testing::error_of([&] { audio::parse_split("0.7,0.2,0.2"); }).find("sum to 1") != std::string::npos);
}

TEST_CASE("data build --utterances: each file whole, 1 + samples / hop frames, the fixed window's frames first") {
  mf::testing::TempDir dir("audio_build_utterances");
  const std::vector<std::pair<const char*, std::int64_t>> files = {
      {"a/one.wav", 4000}, {"a/two.wav", 9000}, {"b/three.wav", 20000}, {"b/four.wav", 6100}, {"b/short.wav", 500}};
  std::map<std::string, std::int64_t> samples;
  std::uint64_t seed = 1;
  for (const auto& [name, n] : files) {
    TestAudioSpec s;
    s.sample_rate = 8000;  // the front-end's rate: no resampling, so prefixes decode the same
    s.frames = n;
    s.signal = TestSignal::noise;
    s.seed = seed++;
    fs::create_directories((dir.path() / "audio" / name).parent_path());
    mf::testing::write_test_audio(dir.path() / "audio" / name, AudioFileFormat::wav_pcm16, s);
    samples[name] = n;
  }
  auto o = options(dir.path() / "audio", dir.path() / "out");
  o.split = audio::parse_split("1,0,0");
  o.pipeline.whole_files = true;
  o.pipeline.frontend.long_segments = o.pipeline.frontend.short_segments = 1;  // --frames 8: the shortest kept
  const auto r = audio::build_dataset(o);
  REQUIRE(r.skipped.size() == 1);
  CHECK(r.skipped[0].path == "b/short.wav");
  CHECK(r.skipped[0].reason.find("fewer than the 8 --frames an utterance must have") != std::string::npos);
  io::DatasetNames names;
  names.crop_frames = 8;
  const auto ds = io::Dataset::open(r.splits[0].path.string(), names);
  const io::DatasetInfo& in = ds->info();
  REQUIRE(in.ragged());
  REQUIRE(in.num_files == 4);
  CHECK(in.n_fft == 256);
  const auto p = o.pipeline.frontend;
  auto fixed = audio::make_logmel_cpu(p);  // one segment of 8 frames from the file's first window
  const auto names_written = read_files_dataset(r.splits[0].path);
  for (std::int64_t f = 0; f < in.num_files; ++f) {
    const std::string name = names_written[std::size_t(f)];
    CAPTURE(name);
    CHECK(in.utterance_frames(f) == 1 + samples[name] / p.hop_length);  // librosa's frame count (center=True)
    auto a = audio::load_mono(dir.path() / "audio" / name, p.sample_rate);
    std::vector<float> row(std::size_t(p.window_samples()), 0.f), want(std::size_t(p.n_mels * p.frames));
    std::copy_n(a.samples.begin(), std::min(a.samples.size(), row.size()), row.begin());
    fixed->compute(1, row.data(), want.data(), nullptr);
    std::vector<float> got(want.size());
    const std::vector<std::int64_t> rows = {f}, starts = {0};
    ds->read_crops(rows, starts, DType::f32, got.data(), true);  // [mels, 8]
    CHECK(got == want);
  }
}
