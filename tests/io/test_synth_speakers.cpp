// `data synth --speakers` (io/synth_speakers.hpp): names, the split by speaker,
// what the files hold, determinism over seeds and thread counts, and the
// difficulty: a raw-spectrum cosine baseline must land well between chance
// and perfect. Also pins the leak synth's values (io/synth.hpp), which the
// speakers mode must not change.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "engine/parallel.hpp"
#include "io/dataset.hpp"
#include "io/synth.hpp"
#include "io/synth_speakers.hpp"
#include "model/verification.hpp"
#include "tests/support/temp_dir.hpp"

namespace {

using mf::io::SpeakerSynthConfig;

std::vector<float> read_values(const std::string& path) {
  auto d = mf::io::Dataset::open(path);
  std::vector<float> v(std::size_t(d->info().num_segments * d->info().segment_elems()));
  d->read_all(mf::DType::f32, v.data(), true, 1);
  return v;
}

SpeakerSynthConfig small_config() {
  SpeakerSynthConfig c;
  c.speakers = 8;
  c.files_per_speaker = 3;
  c.mels = 16;
  c.frames = 12;
  c.long_segments = 1;
  c.short_segments = 2;
  c.seed = 5;
  c.dtype = mf::DType::f32;
  return c;
}

std::uint64_t fnv1a(const std::vector<float>& v, std::uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (std::size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// The EER of cosine scores of time-averaged raw spectra over all pairs of
// files of `speakers` speakers (ids first..first+speakers-1) at the default shape.
double raw_spectrum_eer(std::uint64_t seed, int first, int speakers) {
  SpeakerSynthConfig c;
  c.seed = seed;
  c.speakers = first + speakers;
  const std::int64_t M = c.mels, T = c.frames, nseg = c.long_segments * c.short_segments;
  const std::int64_t files = std::int64_t(speakers) * c.files_per_speaker;
  std::vector<double> mean(std::size_t(files * M), 0.0);
  mf::parallel_for(files, [&](std::int64_t b, std::int64_t e) {
    std::vector<float> buf(std::size_t(nseg * M * T));
    for (std::int64_t f = b; f < e; ++f) {
      mf::io::synth_speaker_file(c, first + int(f / c.files_per_speaker), f % c.files_per_speaker, buf.data());
      for (std::int64_t s = 0; s < nseg; ++s)
        for (std::int64_t m = 0; m < M; ++m)
          for (std::int64_t t = 0; t < T; ++t) mean[std::size_t(f * M + m)] += buf[std::size_t((s * M + m) * T + t)];
    }
  });
  std::vector<double> scores;
  std::vector<std::int32_t> labels;
  for (std::int64_t i = 0; i < files; ++i)
    for (std::int64_t j = i + 1; j < files; ++j) {
      double dot = 0, ni = 0, nj = 0;
      for (std::int64_t m = 0; m < M; ++m) {
        const double a = mean[std::size_t(i * M + m)], b = mean[std::size_t(j * M + m)];
        dot += a * b;
        ni += a * a;
        nj += b * b;
      }
      scores.push_back(dot / std::sqrt(ni * nj));
      labels.push_back(i / c.files_per_speaker == j / c.files_per_speaker ? 1 : 0);
    }
  return mf::model::error_rates(scores, labels).eer;
}

}  // namespace

TEST_CASE("speaker and recording names") {
  CHECK(mf::io::speaker_name(12, 40) == "spk0012");
  CHECK(mf::io::speaker_name(0, 10000) == "spk0000");
  CHECK(mf::io::speaker_name(12, 10001) == "spk00012");
  CHECK(mf::io::speaker_file_name(12, 40, 3, 8) == "spk0012/rec03");
  CHECK(mf::io::speaker_file_name(7, 40, 42, 101) == "spk0007/rec042");
}

TEST_CASE("speakers are split into disjoint train/val/test sets") {
  SpeakerSynthConfig c;
  c.speakers = 40;
  auto s = mf::io::speaker_splits(c);
  CHECK(s[0].size() == 28);
  CHECK(s[1].size() == 6);
  CHECK(s[2].size() == 6);
  for (int n : {6, 7, 13, 100, 1001}) {
    c.speakers = n;
    s = mf::io::speaker_splits(c);
    std::set<int> all;
    for (const auto& v : s) {
      CHECK(v.size() >= 2);
      all.insert(v.begin(), v.end());
    }
    CHECK(all.size() == std::size_t(n));  // disjoint and covering
    CHECK(*all.begin() == 0);
    CHECK(*all.rbegin() == n - 1);
  }
  c.speakers = 5;
  CHECK_THROWS_WITH(mf::io::speaker_splits(c), doctest::Contains("--speakers must be >= 6"));
  c = small_config();
  c.files_per_speaker = 1;
  mf::testing::TempDir dir("synth_spk_bad");
  CHECK_THROWS_WITH(mf::io::write_synthetic_speakers((dir.path() / "x").string(), c),
                    doctest::Contains("--files-per-speaker must be >= 2"));
}

TEST_CASE("write_synthetic_speakers: shapes, labels, names, speakers disjoint across splits") {
  mf::testing::TempDir dir("synth_spk");
  const SpeakerSynthConfig c = small_config();
  const auto splits = mf::io::write_synthetic_speakers((dir.path() / "a").string(), c);
  REQUIRE(splits.size() == 3);
  std::set<std::string> seen;
  std::int64_t total = 0;
  for (const auto& sp : splits) {
    CAPTURE(sp.name);
    auto d = mf::io::Dataset::open(sp.path);
    const auto& in = d->info();
    const auto n = std::int64_t(sp.speakers.size());
    CHECK(in.layout == mf::io::SegmentLayout::file_structured);
    CHECK(in.shape == mf::Shape{n * 3, 1, 2, 16, 12});
    CHECK(in.num_classes == n);
    CHECK_FALSE(in.leak_in_file);
    CHECK(in.db_per_unit == 10.0);
    REQUIRE(in.class_names.size() == std::size_t(n));
    REQUIRE(in.file_names.size() == std::size_t(n * 3));
    for (std::int64_t f = 0; f < n * 3; ++f) {
      const int spk = sp.speakers[std::size_t(f / 3)];
      CHECK(in.file_labels[std::size_t(f)] == f / 3);
      CHECK(in.class_names[std::size_t(f / 3)] == mf::io::speaker_name(spk, 8));
      CHECK(in.file_names[std::size_t(f)] == mf::io::speaker_file_name(spk, 8, f % 3, 3));
    }
    for (const auto& name : in.class_names) CHECK(seen.insert(name).second);  // no speaker in two splits
    total += n;
    // The file holds exactly what synth_speaker_file renders, in speaker-major order.
    const auto v = read_values(sp.path);
    const std::int64_t per_file = 2 * 16 * 12;
    std::vector<float> one(static_cast<std::size_t>(per_file));
    for (std::int64_t f : {std::int64_t(0), n * 3 - 1}) {
      mf::io::synth_speaker_file(c, sp.speakers[std::size_t(f / 3)], f % 3, one.data());
      CHECK(std::memcmp(one.data(), v.data() + f * per_file, std::size_t(per_file) * sizeof(float)) == 0);
    }
    for (float x : v) {
      REQUIRE(std::isfinite(x));
      REQUIRE(std::abs(x) < 8.0f);
    }
  }
  CHECK(total == 8);
  CHECK(seen.size() == 8);
}

TEST_CASE("write_synthetic_speakers is deterministic: same seed same values with 1 or 2 threads, other seed other") {
  mf::testing::TempDir dir("synth_spk_det");
  SpeakerSynthConfig c = small_config();
  c.mels = 72;  // the direct path (>= 64 mels); the small config covers the averaged one
  const int before = mf::cpu_threads();
  mf::set_cpu_threads(1);
  mf::io::write_synthetic_speakers((dir.path() / "t1").string(), c);
  mf::set_cpu_threads(2);
  mf::io::write_synthetic_speakers((dir.path() / "t2").string(), c);
  c.seed = 6;
  mf::io::write_synthetic_speakers((dir.path() / "s6").string(), c);
  mf::set_cpu_threads(before);
  for (const char* s : {"train.h5", "val.h5", "test.h5"}) {
    CAPTURE(s);
    const auto a = read_values((dir.path() / "t1" / s).string());
    CHECK(a == read_values((dir.path() / "t2" / s).string()));
    CHECK(a != read_values((dir.path() / "s6" / s).string()));
  }
  // Recordings of one speaker differ from each other; a voice depends only on (seed, speaker).
  std::vector<float> r0(std::size_t(2 * 72 * 12)), r1(r0.size()), big(r0.size());
  mf::io::synth_speaker_file(c, 3, 0, r0.data());
  mf::io::synth_speaker_file(c, 3, 1, r1.data());
  SpeakerSynthConfig more = c;
  more.speakers = 50;
  mf::io::synth_speaker_file(more, 3, 0, big.data());
  CHECK(r0 != r1);
  CHECK(r0 == big);
}

TEST_CASE("difficulty: cosine of time-averaged raw spectra of unseen speakers is far from chance and from perfect") {
  // 24 speakers x 8 recordings at the default shape: 18,336 trials, 672 targets.
  for (std::uint64_t seed : {1, 2, 3}) {
    const double eer = raw_spectrum_eer(seed, 0, 24);
    MESSAGE("seed " << seed << ": raw-spectrum cosine EER " << eer);
    CHECK(eer > 0.15);
    CHECK(eer < 0.35);
  }
}

TEST_CASE("the leak synth's values are unchanged (pinned hashes)") {
  // FNV-1a of synth_file's floats for every class, at 16 mels (the averaged
  // path) and 64 (the direct one). Recorded when the speakers mode was added;
  // a change here changes every leak dataset `data synth` writes.
  mf::io::SynthConfig c;
  c.frames = 16;
  c.long_segments = 1;
  c.short_segments = 2;
  std::uint64_t h[2] = {0xcbf29ce484222325ull, 0xcbf29ce484222325ull};
  for (int k = 0; k < 2; ++k) {
    c.mels = k == 0 ? 16 : 64;
    std::vector<float> v(std::size_t(2 * c.mels * 16));
    for (int cls = 0; cls < 4; ++cls) {
      mf::io::synth_file(c, cls, 1000 + std::uint64_t(cls), v.data());
      h[k] = fnv1a(v, h[k]);
    }
  }
  CAPTURE(h[0]);
  CAPTURE(h[1]);
  CHECK(h[0] == 1778952514800543941ull);
  CHECK(h[1] == 17743198732651585212ull);
}
