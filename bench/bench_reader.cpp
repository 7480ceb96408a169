// `melforge-bench reader`: the input pipeline's throughput on a file in the
// page cache, beside
// - the limit: a plain sequential read of the same file (pread, 4 MiB blocks,
//   1 and N threads; the best is the limit on this machine),
// - h5py reading the same batches one segment at a time (what a PyTorch
//   Dataset does; bench/h5py_reader.py, run by $MELFORGE_PYTHON, else Debian's
//   /usr/bin/python3),
// - what a training step consumes: segments/s = FLOP/s / 246 MFLOP per sample
//   (design.md's LeakCNN-64 step), with FLOP/s measured here on the CPU (an
//   fp32 matmul microkernel: an optimistic ceiling for a CPU step) or assumed
//   on a GPU (--gpu-step-tflops).
// On a GPU it also measures pinned host-to-device bandwidth alone, the
// streaming reader feeding the device, and the resident gather.
// Validation before timing: the first batches of the reader are compared with
// Dataset::read of the same rows.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "bench/bench_common.hpp"
#include "bench/suites.hpp"
#include "engine/device.hpp"
#include "engine/error.hpp"
#include "engine/memory.hpp"
#include "engine/parallel.hpp"
#include "engine/stream.hpp"
#include "io/reader.hpp"
#include "io/synth.hpp"

namespace mf::bench {

namespace {

struct Opts {
  std::string file;
  std::int64_t files = 512;  // synthesized: 512 files x 4 x 8 segments of 64x64 f16 = 128 MiB
  std::string storage = "contiguous";
  std::int64_t batch = 256;
  std::string threads = "1,2";
  int repeats = 3;
  double gpu_step_tflops = 300;  // achieved BF16 TFLOP/s assumed for a GPU training step
  bool skip_h5py = false;
};

std::vector<int> parse_threads(const std::string& s) {
  std::vector<int> v;
  std::size_t pos = 0;
  while (pos < s.size()) {
    const std::size_t c = s.find(',', pos);
    v.push_back(std::stoi(s.substr(pos, c == std::string::npos ? std::string::npos : c - pos)));
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return v;
}

// GB/s of a plain sequential read of the whole file with `threads` threads.
double plain_read_gbs(const std::string& path, int threads, int repeats) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MF_CHECK(fd >= 0, "{}: cannot open", path);
  const std::size_t size = std::filesystem::file_size(path);
  const std::size_t blk = std::size_t(4) << 20;
  const std::size_t nblk = (size + blk - 1) / blk;
  double best = 0;
  for (int rep = 0; rep < repeats; ++rep) {
    const double t0 = now_s();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        std::vector<char> buf(blk);
        for (std::size_t b = std::size_t(t); b < nblk; b += std::size_t(threads)) {
          const std::size_t n = std::min(blk, size - b * blk);
          if (::pread(fd, buf.data(), n, off_t(b * blk)) != ssize_t(n)) std::abort();
        }
      });
    for (auto& th : pool) th.join();
    best = std::max(best, double(size) / (now_s() - t0) / 1e9);
  }
  ::close(fd);
  return best;
}

struct ReaderRun {
  double seconds = 0, segments = 0, wait_ms = 0;
};

ReaderRun time_reader(std::shared_ptr<const io::Dataset> ds, io::ReaderConfig c, std::int64_t batches,
                      cudaStream_t stream) {
  io::BatchReader r(std::move(ds), c);
  r.next(stream);  // fills the pipeline (and loads, for resident mode)
  if (stream) MF_CUDA_CHECK(cudaStreamSynchronize(stream));
  const double t0 = now_s();
  double wait = 0;
  for (std::int64_t k = 0; k < batches; ++k) wait += r.next(stream).wait_ms;
  if (stream) MF_CUDA_CHECK(cudaStreamSynchronize(stream));
  return {now_s() - t0, double(batches * c.batch_size), wait};
}

void validate(std::shared_ptr<const io::Dataset> ds, const io::ReaderConfig& c) {
  io::BatchReader r(ds, c);
  const std::size_t row = std::size_t(ds->info().segment_elems()) * dtype_size(c.dtype);
  for (int k = 0; k < 3; ++k) {
    const io::Batch b = r.next();
    const auto rows = r.batch_rows(b.epoch, b.position);
    std::vector<std::byte> want(rows.size() * row);
    ds->read(rows, c.dtype, want.data(), true);
    MF_CHECK(std::memcmp(want.data(), b.x.raw(), want.size()) == 0, "reader validation failed at batch {}", k);
  }
}

// bench/h5py_reader.py: beside an installed melforge-bench
// (PREFIX/share/melforge/bench, cmake/packaging.cmake), else in the source tree.
std::string h5py_reader_script() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto installed = exe.parent_path().parent_path() / "share/melforge/bench/h5py_reader.py";
    if (std::filesystem::exists(installed, ec)) return installed.string();
  }
  return std::string(MELFORGE_SOURCE_DIR) + "/bench/h5py_reader.py";
}

// h5py reading the reader's batches of epoch 0 one segment at a time (what a
// PyTorch Dataset does), through bench/h5py_reader.py.
void time_h5py(const std::shared_ptr<const io::Dataset>& ds, const io::ReaderConfig& base, const std::string& path,
               std::int64_t bpe, double limit, nlohmann::json& res) {
  const double seg_bytes = double(ds->info().segment_bytes());
  const std::int64_t batch = base.batch_size;
  io::BatchReader r(ds, base);
  const std::string idx_path = (std::filesystem::temp_directory_path() /
                                fmt::format("melforge_bench_idx_{}.bin", ::getpid())).string();
  {
    std::ofstream f(idx_path, std::ios::binary);
    for (std::int64_t k = 0; k < bpe; ++k) {
      const auto rows = r.batch_rows(0, k);
      f.write(reinterpret_cast<const char*>(rows.data()), std::streamsize(rows.size() * 8));
    }
  }
  const char* py = std::getenv("MELFORGE_PYTHON");  // a python3 with h5py (tools/gpu-check.sh sets it)
  const std::string cmd = fmt::format("{} {} {} {} {}", py && *py ? py : "/usr/bin/python3",
                                      h5py_reader_script(), path, idx_path, batch);
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[512];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  std::filesystem::remove(idx_path);
  try {
    const auto j = nlohmann::json::parse(out);
    const double sps = j["segments"].get<double>() / j["seconds"].get<double>();
    res["h5py_per_segment"] = {{"segments_per_s", sps}, {"GBps", sps * seg_bytes / 1e9}};
    fmt::print("{:<44} {:>10.3f} {:>14.0f} {:>9.1f}%\n", "h5py, same batches, one read per segment",
               sps * seg_bytes / 1e9, sps, 100 * sps * seg_bytes / 1e9 / limit);
  } catch (const std::exception& e) {
    fmt::print("h5py baseline failed ({}): {}\n", e.what(), out);
  }
}

// On the GPU: pinned host-to-device bandwidth alone, then the streaming reader
// feeding the device and the resident gather, beside an assumed step rate.
void time_gpu_feed(const std::shared_ptr<const io::Dataset>& ds, const io::ReaderConfig& base, int threads,
                   std::int64_t bpe, double gpu_step_tflops, double step_flop, nlohmann::json& res) {
  const auto& in = ds->info();
  const double seg_bytes = double(in.segment_bytes());
  const std::int64_t batch = base.batch_size;
  const Device dev = Device::cuda(0);
  Stream s(dev, "bench.compute");
  const std::size_t bytes = std::size_t(batch) * in.segment_bytes();
  PinnedBuffer host(bytes);
  void* d = device_alloc(bytes, 0, s);
  const double ms = time_cuda_ms([&] { MF_CUDA_CHECK(cudaMemcpyAsync(d, host.data(), bytes, cudaMemcpyHostToDevice, s)); },
                                 s, 3, 20, false);
  device_free(d, s);
  const double h2d = double(bytes) / (ms * 1e-3) / 1e9;
  res["gpu_pinned_h2d_GBps"] = h2d;
  fmt::print("\n{:<44} {:>10.2f} {:>14.0f}\n", "GPU: pinned H2D alone (one batch)", h2d, h2d * 1e9 / seg_bytes);
  for (io::Residency resd : {io::Residency::off, io::Residency::on}) {
    io::ReaderConfig c = base;
    c.device = dev;
    c.dtype = DType::bf16;
    c.resident = resd;
    c.threads = threads;
    const ReaderRun rr = time_reader(ds, c, bpe, s);
    const double sps = rr.segments / rr.seconds;
    const std::string name = resd == io::Residency::off ? "gpu_stream_bf16" : "gpu_resident_bf16";
    res[name] = {{"segments_per_s", sps}, {"GBps", sps * seg_bytes / 1e9}, {"wait_ms_per_batch", rr.wait_ms / double(bpe)}};
    fmt::print("{:<44} {:>10.2f} {:>14.0f}\n",
               resd == io::Residency::off ? "GPU: reader streaming -> device bf16" : "GPU: reader resident gather bf16",
               sps * seg_bytes / 1e9, sps);
  }
  const double gpu_need = gpu_step_tflops * 1e12 / step_flop;
  res["gpu_step_segments_per_s_assumed"] = gpu_need;
  fmt::print("GPU training step at an assumed {:.0f} TFLOP/s: {:.0f} segments/s\n", gpu_step_tflops, gpu_need);
}

void run_reader(const Opts& o) {
  std::string path = o.file;
  std::filesystem::path tmpdir;
  if (path.empty()) {
    tmpdir = std::filesystem::temp_directory_path() / fmt::format("melforge_bench_reader_{}", ::getpid());
    io::SynthConfig sc;
    sc.files = o.files;
    sc.long_segments = 4;
    sc.short_segments = 8;
    sc.storage = io::parse_write_storage(o.storage);
    fmt::print("synthesizing {} files of 4 x 8 segments (64 x 64 f16, {}) in {} ...\n", sc.files, o.storage,
               tmpdir.string());
    path = io::write_synthetic(tmpdir.string(), sc)[0].path;
  }
  auto ds = io::Dataset::open(path);
  const auto& in = ds->info();
  const double seg_bytes = double(in.segment_bytes());
  const std::int64_t bpe = in.num_segments / o.batch;
  const double file_mb = double(std::filesystem::file_size(path)) / 1e6;
  fmt::print("file {}: {} segments of {} x {} {} ({}, {:.1f} MB), batch {}\n", path, in.num_segments, in.n_mels,
             in.frames, dtype_name(in.dtype), io::storage_layout_name(in.storage.layout), file_mb, o.batch);
  nlohmann::json res;
  res["file"] = {{"segments", in.num_segments}, {"segment_bytes", in.segment_bytes()}, {"MB", file_mb},
                 {"storage", std::string(io::storage_layout_name(in.storage.layout))},
                 {"filters", in.storage.filters}, {"dtype", std::string(dtype_name(in.dtype))}};
  res["batch"] = o.batch;
  res["cpu_cores"] = std::thread::hardware_concurrency();

  // Page cache: read it all once.
  plain_read_gbs(path, 1, 1);
  const auto threads = parse_threads(o.threads);
  double limit = 0;
  fmt::print("\n{:<44} {:>10} {:>14} {:>10}\n", "path", "GB/s", "segments/s", "% limit");
  for (int t : threads) {
    const double g = plain_read_gbs(path, t, o.repeats);
    limit = std::max(limit, g);
    res["plain_read_GBps"][std::to_string(t)] = g;
    fmt::print("{:<44} {:>10.2f} {:>14.0f}\n", fmt::format("plain sequential pread, {} thread(s)", t), g,
               g * 1e9 / seg_bytes);
  }
  res["plain_read_limit_GBps"] = limit;

  io::ReaderConfig base;
  base.batch_size = o.batch;
  base.seed = 1;
  base.device = Device::cpu();
  base.resident = io::Residency::off;
  for (DType dt : {in.dtype, DType::f32}) {
    base.dtype = dt;
    validate(ds, base);
    for (int t : threads) {
      io::ReaderConfig c = base;
      c.threads = t;
      ReaderRun best;
      for (int rep = 0; rep < o.repeats; ++rep) {
        const ReaderRun rr = time_reader(ds, c, bpe, nullptr);
        if (best.seconds == 0 || rr.seconds < best.seconds) best = rr;
      }
      const double sps = best.segments / best.seconds, gbs = sps * seg_bytes / 1e9;
      const std::string key = fmt::format("stream_cpu_{}_threads{}", dtype_name(dt), t);
      res[key] = {{"GBps", gbs}, {"segments_per_s", sps}, {"fraction_of_limit", gbs / limit},
                  {"wait_ms_per_batch", best.wait_ms / double(bpe)}};
      fmt::print("{:<44} {:>10.2f} {:>14.0f} {:>9.0f}%\n",
                 fmt::format("reader streaming -> {} host, {} thread(s)", dtype_name(dt), t), gbs, sps,
                 100 * gbs / limit);
    }
  }
  {
    io::ReaderConfig c = base;
    c.dtype = DType::f32;
    c.resident = io::Residency::on;
    c.threads = threads.back();
    const ReaderRun rr = time_reader(ds, c, bpe, nullptr);
    const double sps = rr.segments / rr.seconds;
    res["resident_cpu_f32"] = {{"segments_per_s", sps}, {"GBps_out", sps * double(in.segment_elems()) * 4 / 1e9}};
    fmt::print("{:<44} {:>10} {:>14.0f}\n", "reader resident (CPU gather) -> f32", "", sps);
  }

  if (!o.skip_h5py) time_h5py(ds, base, path, bpe, limit, res);

  // What a training step consumes is measured, not estimated: the CPU step's
  // samples/s come from `melforge-bench step --device cpu` (or a training
  // run's log); the reader is the bottleneck only where it delivers less.
  const double step_flop = 246e6;  // LeakCNN-64's training FLOPs per sample (the GPU feed's model)
  fmt::print("\nCPU training step: measure it with melforge-bench step --device cpu (the reader above delivers "
             "{:.0f} segments/s on {} threads)\n",
             res[fmt::format("stream_cpu_{}_threads{}", dtype_name(DType::f32), threads.back())]["segments_per_s"]
                 .get<double>(),
             threads.back());

  if (gpu_available()) {
    time_gpu_feed(ds, base, threads.back(), bpe, o.gpu_step_tflops, step_flop, res);
  } else {
    fmt::print("\nno GPU ({}): host-to-device and device-fed figures not measured\n", gpu_info().why_none);
  }
  if (!tmpdir.empty()) std::filesystem::remove_all(tmpdir);
  if (!common().no_write) fmt::print("wrote {}\n", write_results(common().out_dir, "reader", res));
}

}  // namespace

void register_reader(CLI::App& app) {
  auto* cmd = app.add_subcommand("reader", "Input pipeline: reader GB/s vs plain read, h5py and the training step");
  static Opts o;
  cmd->add_option("--file", o.file, "Dataset file (default: synthesize one in /tmp)");
  cmd->add_option("--files", o.files, "Files to synthesize (x 32 segments of 64x64 f16)")->capture_default_str();
  cmd->add_option("--storage", o.storage, "Synthesized storage: contiguous|chunked|gzip")->capture_default_str();
  cmd->add_option("--batch", o.batch, "Batch size")->capture_default_str();
  cmd->add_option("--threads", o.threads, "Reader thread counts to time, comma-separated")->capture_default_str();
  cmd->add_option("--repeats", o.repeats, "Repeats (best is kept)")->capture_default_str();
  cmd->add_option("--gpu-step-tflops", o.gpu_step_tflops, "Achieved TFLOP/s assumed for a GPU step")->capture_default_str();
  cmd->add_flag("--no-h5py", o.skip_h5py, "Skip the h5py baseline");
  cmd->callback([] { run_reader(o); });
}

}  // namespace mf::bench
