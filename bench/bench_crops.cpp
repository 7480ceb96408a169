// `melforge-bench crops`: random crops of whole utterances (the ragged layout,
// io/crops.hpp) as training reads them, beside the fixed-segment reader on
// segments of the same size, same machine, same thread counts: crops/s and
// GB/s of delivered values. The goal: a crop costs no more than a segment.
// Both files are synthesized in /tmp with the same mels, frames and element
// type (utterances 1-4 crops long, as VoxCeleb's 4-20 s are 2-10 crops of
// 2 s) and read from the page cache (one warm-up epoch each).
// Validation before timing: the ragged reader's first batch equals
// Dataset::read_crops at the starts random_crop_start gives.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>

#include <unistd.h>

#include "bench/bench_common.hpp"
#include "bench/suites.hpp"
#include "engine/counter_rng.hpp"
#include "engine/device.hpp"
#include "engine/error.hpp"
#include "io/crops.hpp"
#include "io/h5_writer.hpp"
#include "io/reader.hpp"

namespace mf::bench {

namespace {

struct CropOpts {
  std::int64_t utterances = 4096, mels = 64, frames = 200, batch = 128;
  std::string threads = "1,2", storage = "contiguous", device = "cpu";
  int epochs = 3;
};

// utterances of frames..4*frames frames (ragged) and as many fixed segments of
// `frames` (flat), f16, values from a hash (no two equal rows).
void write_files(const CropOpts& o, const std::string& ragged, const std::string& flat) {
  std::vector<std::int64_t> lengths(std::size_t(o.utterances));
  for (std::int64_t u = 0; u < o.utterances; ++u)
    lengths[std::size_t(u)] = o.frames + std::int64_t(splitmix64_hash(std::uint64_t(u)) % std::uint64_t(3 * o.frames + 1));
  const std::int64_t T = std::accumulate(lengths.begin(), lengths.end(), std::int64_t(0));
  std::vector<float> v(std::size_t(std::max(T, o.utterances * o.frames) * o.mels));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(splitmix64_hash(i) % 4096) / 256.f - 8.f;
  io::WriteSpec ws;
  ws.dtype = DType::f16;
  ws.storage = io::parse_write_storage(o.storage);
  ws.labels.assign(std::size_t(o.utterances), 0);
  {
    io::WriteSpec r = ws;
    r.shape = {T, o.mels};
    r.ragged = true;
    r.labels.clear();
    if (ws.storage != io::WriteStorage::contiguous) r.chunk = {o.frames, o.mels};  // a crop spans 1-2 chunks
    io::H5Writer w(ragged, r);
    w.write_segments(0, T, v.data());
    w.finish_utterances(lengths, ws.labels, {}, {});
  }
  ws.shape = {o.utterances, o.mels, o.frames};
  if (ws.storage != io::WriteStorage::contiguous) ws.chunk = {1, o.mels, o.frames};  // one segment per chunk
  io::H5Writer w(flat, ws);
  w.write_segments(0, o.utterances, v.data());
  w.close();
}

// Best epoch of `epochs` (after one warm-up), in seconds.
double time_epochs(const std::shared_ptr<const io::Dataset>& ds, io::ReaderConfig rc, int epochs) {
  io::BatchReader reader(ds, rc);
  const std::int64_t bpe = reader.batches_per_epoch();
  double best = 1e30;
  for (int e = 0; e <= epochs; ++e) {
    const double t0 = now_s();
    for (std::int64_t b = 0; b < bpe; ++b) (void)reader.next();
    if (e > 0) best = std::min(best, now_s() - t0);  // epoch 0 warms the page cache
  }
  return best;
}

void check_first_batch(const std::shared_ptr<const io::Dataset>& ds, const io::ReaderConfig& rc) {
  io::BatchReader reader(ds, rc);
  const io::Batch b = reader.next();
  const auto idx = b.index.to_floats();
  std::vector<std::int64_t> rows, starts;
  for (std::int64_t r = 0; r < b.valid; ++r) {
    const auto u = std::int64_t(idx[std::size_t(r)]);
    rows.push_back(u);
    starts.push_back(io::random_crop_start(rc.seed, 0, u, ds->info().utterance_frames(u), ds->info().frames));
  }
  std::vector<float> want(rows.size() * std::size_t(ds->info().segment_elems()));
  ds->read_crops(rows, starts, DType::f32, want.data(), true);
  const std::vector<float> got = b.x.to_floats();
  MF_CHECK(std::equal(want.begin(), want.end(), got.begin()), "crops: the reader's first batch differs from "
           "Dataset::read_crops at random_crop_start's positions");
}

void run_crops(const CropOpts& o) {
  const std::string dir = (std::filesystem::temp_directory_path() / fmt::format("mf_bench_crops_{}", ::getpid())).string();
  std::filesystem::create_directories(dir);
  const std::string ragged = dir + "/utterances.h5", flat = dir + "/segments.h5";
  write_files(o, ragged, flat);
  io::DatasetNames names;
  names.crop_frames = o.frames;
  const auto rd = io::Dataset::open(ragged, names);
  const auto fd = io::Dataset::open(flat);
  io::ReaderConfig rc;
  rc.batch_size = o.batch;
  rc.seed = 1;
  rc.resident = io::Residency::off;
  rc.random_crops = true;
  rc.device = parse_device(o.device);  // on a GPU: each batch copied to the device, as training gets it
  check_first_batch(rd, rc);
  const double bytes = double(o.utterances / o.batch * o.batch) * double(o.mels * o.frames) * 2;  // f16 values delivered
  fmt::print("crops of {} frames x {} mels (f16) from {} utterances of {}..{} frames ({} storage), batch {}, to {}; "
             "fixed segments of the same size beside\n", o.frames, o.mels, o.utterances, o.frames, 4 * o.frames,
             o.storage, o.batch, rc.device.str());
  fmt::print("{:<34} {:>12} {:>9} {:>12} {:>9} {:>10}\n", "threads", "crops/s", "GB/s", "segments/s", "GB/s",
             "crop/seg");
  nlohmann::json res = {{"utterances", o.utterances}, {"mels", o.mels}, {"frames", o.frames}, {"batch", o.batch},
                        {"storage", o.storage}, {"device", rc.device.str()}, {"runs", nlohmann::json::array()}};
  std::size_t pos = 0;
  while (pos < o.threads.size()) {
    const std::size_t c = o.threads.find(',', pos);
    const int t = std::stoi(o.threads.substr(pos, c == std::string::npos ? std::string::npos : c - pos));
    pos = c == std::string::npos ? o.threads.size() : c + 1;
    io::ReaderConfig r = rc;
    r.threads = t;
    const double crop_s = time_epochs(rd, r, o.epochs);
    r.random_crops = false;
    const double seg_s = time_epochs(fd, r, o.epochs);
    const double n = double(o.utterances / o.batch * o.batch);
    fmt::print("{:<34} {:>12.0f} {:>9.2f} {:>12.0f} {:>9.2f} {:>10.2f}\n", t, n / crop_s, bytes / crop_s / 1e9,
               n / seg_s, bytes / seg_s / 1e9, crop_s / seg_s);
    res["runs"].push_back({{"threads", t}, {"crops_per_s", n / crop_s}, {"crop_GBps", bytes / crop_s / 1e9},
                           {"segments_per_s", n / seg_s}, {"segment_GBps", bytes / seg_s / 1e9},
                           {"crop_time_over_segment_time", crop_s / seg_s}});
  }
  std::filesystem::remove_all(dir);
  if (!common().no_write) fmt::print("wrote {}\n", write_results(common().out_dir, "crops", res));
}

}  // namespace

void register_crops(CLI::App& app) {
  auto* cmd = app.add_subcommand("crops", "Random crops of whole utterances (training's reader) vs fixed segments "
                                          "of the same size: crops/s and GB/s");
  static CropOpts o;
  cmd->add_option("--utterances", o.utterances, "Utterances (and fixed segments) to synthesize")->capture_default_str();
  cmd->add_option("--mels", o.mels, "Mel bands")->capture_default_str();
  cmd->add_option("--frames", o.frames, "Frames per crop (utterances are 1-4 crops long)")->capture_default_str();
  cmd->add_option("--batch", o.batch, "Batch size")->capture_default_str();
  cmd->add_option("--threads", o.threads, "Reader thread counts, comma-separated")->capture_default_str();
  cmd->add_option("--storage", o.storage, "contiguous|chunked|gzip")->capture_default_str();
  cmd->add_option("--epochs", o.epochs, "Timed epochs (the best is kept) after one warm-up")->capture_default_str();
  cmd->add_option("--device", o.device, "Where the batches go (cpu, cuda)")->capture_default_str();
  cmd->callback([] { run_crops(o); });
}

}  // namespace mf::bench
