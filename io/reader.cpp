#include "io/reader.hpp"

#include "engine/cuda_entry.hpp"
#include "io/balanced_order.hpp"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "engine/counter_rng.hpp"
#include "engine/memory.hpp"
#include "engine/nvtx.hpp"
#include "engine/parallel.hpp"
#include "engine/stream.hpp"
#include "io/crops.hpp"
#include "io/gather.hpp"

namespace mf::io {

Residency parse_residency(std::string_view s) { return parse_enum<Residency>(kResidencyNames, s, "resident mode"); }
LastBatch parse_last_batch(std::string_view s) { return parse_enum<LastBatch>(kLastBatchNames, s, "last batch"); }

// ---- order -------------------------------------------------------------------

namespace {
// Uniform in [0, bound) without modulo bias.
std::uint64_t bounded(std::uint64_t& state, std::uint64_t bound) {
  const std::uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const std::uint64_t r = splitmix64_next(state);
    if (r >= threshold) return r % bound;
  }
}
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }
}  // namespace

std::vector<std::int64_t> epoch_order(std::int64_t n, std::uint64_t seed, std::int64_t epoch, bool shuffle) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[std::size_t(i)] = i;
  if (!shuffle) return v;
  std::uint64_t state = seed * 0x2545f4914f6cdd1dull ^ (std::uint64_t(epoch) + 0x632be59bd9b4e019ull);
  splitmix64_next(state);
  for (std::int64_t i = n - 1; i > 0; --i) std::swap(v[std::size_t(i)], v[bounded(state, std::uint64_t(i + 1))]);
  return v;
}

// ---- the reader ----------------------------------------------------------------

struct BatchReader::Impl {
  std::shared_ptr<const Dataset> ds;
  ReaderConfig cfg;
  std::int64_t N = 0, B = 0, bpe = 0;
  std::vector<std::int64_t> file_ids;  // per segment (per_class mode only)
  std::size_t x_row_bytes = 0;
  bool gpu = false, is_resident = false;
  cudaStream_t last_stream = nullptr;
  // The reader's own stream (host-to-device copies, the resident load). Declared
  // before every tensor so that it outlives their stream-ordered frees.
  Stream copy_stream;

  // Order cache (two epochs: the consumer's and the one prefetch runs into).
  mutable std::mutex order_mu;
  mutable std::map<std::int64_t, std::shared_ptr<const std::vector<std::int64_t>>> orders;

  ReaderState base;
  std::int64_t next_seq = 0;
  std::exception_ptr failed;

  mutable std::mutex stats_mu;
  ReaderStats st;

  // Device output buffers (two: a batch stays valid until the following next()).
  // One batch's tensors, as handed out in a Batch.
  struct BatchTensors {
    Tensor x, labels, leak, index, file;
    void allocate(std::int64_t b, const DatasetInfo& in, DType dtype, Device device, cudaStream_t stream) {
      x = Tensor::empty({b, in.n_mels, in.frames, 1}, dtype, device, Layout::nhwc, stream);
      labels = Tensor::empty({b}, DType::i32, device, Layout::plain, stream);
      leak = Tensor::empty({b}, DType::f32, device, Layout::plain, stream);
      index = Tensor::empty({b}, DType::i32, device, Layout::plain, stream);
      file = Tensor::empty({b}, DType::i32, device, Layout::plain, stream);
    }
    void give(Batch& out) const {
      out.x = x;
      out.labels = labels;
      out.leak = leak;
      out.index = index;
      out.file = file;
    }
  };
  struct DevBuf : BatchTensors {
    std::int64_t seq = -1, valid = 0;
    Event ready;
  };
  DevBuf dev[2];

  // ---- streaming
  struct Slot {
    PinnedBuffer pinned;                   // GPU: x | labels | leak | index | file
    BatchTensors t;                        // CPU: the batch itself
    void* x = nullptr;
    std::int32_t* labels = nullptr;
    float* leak = nullptr;
    std::int32_t* index = nullptr;
    std::int32_t* file = nullptr;
    std::vector<std::int64_t> rows;
    std::int64_t seq = -1, valid = 0;
    int pending = 0;
    bool ready = false;
    std::exception_ptr error;
    Event copy_done;
    bool copy_recorded = false;
  };
  struct Task {
    int slot;
    std::int64_t r0, r1;
  };
  std::vector<Slot> slots;
  std::deque<Task> queue;
  std::mutex mu;
  std::condition_variable cv_work, cv_done;
  bool stop = false;
  int running = 0;
  std::vector<std::thread> workers;
  std::int64_t given_cpu = -1;  // CPU: the seq whose slot the caller holds
  Event consumed;

  // ---- resident
  Tensor data, all_labels, all_leak, all_file, epoch_idx;
  std::int64_t epoch_idx_epoch = -1;

  // Also when the constructor throws after starting the workers (joinable
  // threads must not be destroyed); a no-op after ~BatchReader stopped them.
  ~Impl() { stop_workers(); }

  // Where batch `seq` (counted from `base`) lies: with shares, the seq-th of
  // this share's positions share, share + shares, ... of each epoch.
  ReaderState state_of(std::int64_t seq) const {
    if (cfg.shares == 1) {
      const std::int64_t pos = base.position + seq;
      return {base.epoch + pos / bpe, pos % bpe};
    }
    const std::int64_t per_epoch = (bpe - cfg.share + cfg.shares - 1) / cfg.shares;
    const std::int64_t idx = base.position / cfg.shares + seq;
    return {base.epoch + idx / per_epoch, cfg.share + idx % per_epoch * cfg.shares};
  }

  std::shared_ptr<const std::vector<std::int64_t>> order(std::int64_t epoch) const {
    std::lock_guard lk(order_mu);
    if (auto it = orders.find(epoch); it != orders.end()) return it->second;
    auto o = std::make_shared<const std::vector<std::int64_t>>(
        cfg.per_class > 0 ? balanced_epoch_order(ds->info().labels, file_ids, cfg.per_class, B, cfg.seed, epoch)
                          : epoch_order(N, cfg.seed, epoch, cfg.shuffle));
    orders[epoch] = o;
    while (orders.size() > 2) orders.erase(orders.begin()->first == epoch ? std::next(orders.begin()) : orders.begin());
    return o;
  }

  std::vector<std::int64_t> rows_of(std::int64_t epoch, std::int64_t position, std::int64_t* valid) const {
    MF_CHECK(epoch >= 0 && position >= 0 && position < bpe,
             "reader: batch (epoch {}, position {}) out of range: expected epoch >= 0 and position 0..{}", epoch,
             position, bpe - 1);
    const auto o = order(epoch);
    const std::int64_t n = std::int64_t(o->size());
    const std::int64_t b0 = position * B, b1 = std::min(n, b0 + B);
    std::vector<std::int64_t> rows(o->begin() + b0, o->begin() + b1);
    if (cfg.per_class == 0) std::sort(rows.begin(), rows.end());  // balanced rows keep their class groups
    if (valid) *valid = b1 - b0;
    for (std::int64_t j = 0; std::int64_t(rows.size()) < B; ++j) rows.push_back((*o)[std::size_t(j % N)]);
    return rows;
  }

  void alloc_dev(cudaStream_t s) {
    const auto& in = ds->info();
    for (auto& d : dev) {
      d.allocate(B, in, cfg.dtype, cfg.device, s);
      if (gpu) d.ready = Event(cfg.device);
    }
  }

  // ---- streaming ----------------------------------------------------------------

  void start_streaming() {
    const auto& in = ds->info();
    slots.resize(std::size_t(cfg.ring_slots));
    for (auto& s : slots) {
      if (gpu) {
        const std::size_t xb = align_up(std::size_t(B) * x_row_bytes, 256), mb = align_up(std::size_t(B) * 4, 256);
        s.pinned = PinnedBuffer(xb + 4 * mb);
        auto* p = static_cast<std::byte*>(s.pinned.data());
        s.x = p;
        s.labels = reinterpret_cast<std::int32_t*>(p + xb);
        s.leak = reinterpret_cast<float*>(p + xb + mb);
        s.index = reinterpret_cast<std::int32_t*>(p + xb + 2 * mb);
        s.file = reinterpret_cast<std::int32_t*>(p + xb + 3 * mb);
        s.copy_done = Event(cfg.device);
      } else {
        s.t.allocate(B, in, cfg.dtype, Device::cpu(), nullptr);
        s.x = s.t.x.raw();
        s.labels = s.t.labels.data<std::int32_t>();
        s.leak = s.t.leak.data<float>();
        s.index = s.t.index.data<std::int32_t>();
        s.file = s.t.file.data<std::int32_t>();
        // Touch the slot once now: its pages are then mapped before the first
        // batch (no page faults inside the read path).
        std::memset(s.x, 0, s.t.x.nbytes());
      }
    }
    if (gpu) {
      copy_stream = Stream(cfg.device, "reader.copy");
      consumed = Event(cfg.device);
      alloc_dev(copy_stream);
      copy_stream.synchronize();
    }
    // Workers share one queue: when the system refuses a thread, fewer do the work.
    const int nt = std::max(1, cfg.threads);
    workers.reserve(std::size_t(nt));
    for (int t = 0; t < nt; ++t) {
      try {
        workers.emplace_back([this] { worker(); });
      } catch (const std::system_error& e) {
        MF_CHECK(!workers.empty(), "reader: {}: cannot start a reader thread: {}", ds->info().path, e.what());
        break;
      }
    }
    schedule_initial();
  }

  void schedule_initial() {
    for (std::int64_t q = 0; q < std::int64_t(slots.size()); ++q) schedule(q);
  }

  // Queues batch `seq` into its slot (consumer thread only).
  void schedule(std::int64_t seq) {
    Slot& s = slots[std::size_t(seq % std::int64_t(slots.size()))];
    const ReaderState where = state_of(seq);
    std::vector<std::int64_t> rows = rows_of(where.epoch, where.position, &s.valid);
    const std::int64_t per = std::max<std::int64_t>(16, (B + 2 * std::max(1, cfg.threads) - 1) / (2 * std::max(1, cfg.threads)));
    std::lock_guard lk(mu);
    s.rows = std::move(rows);
    s.seq = seq;
    s.ready = false;
    s.error = nullptr;
    s.pending = int((B + per - 1) / per);
    for (std::int64_t r0 = 0; r0 < B; r0 += per)
      queue.push_back({int(seq % std::int64_t(slots.size())), r0, std::min(B, r0 + per)});
    cv_work.notify_all();
  }

  void worker() {
    try {
      set_current(cfg.device);
    } catch (...) {
    }
    const auto& in = ds->info();
    for (;;) {
      Task t;
      {
        std::unique_lock lk(mu);
        cv_work.wait(lk, [&] { return stop || !queue.empty(); });
        if (stop) return;
        t = queue.front();
        queue.pop_front();
        ++running;
      }
      Slot& s = slots[std::size_t(t.slot)];
      std::exception_ptr err;
      const double t0 = now_ms();
      try {
        NvtxRange range("reader.read");
        if (gpu && s.copy_recorded) s.copy_done.synchronize();  // the slot's previous batch has left for the device
        for (std::int64_t r = t.r0; r < t.r1; ++r) {
          const std::int64_t seg = s.rows[std::size_t(r)];
          s.labels[r] = in.labels[std::size_t(seg)];
          s.leak[r] = float(in.leak[std::size_t(seg)]);
          s.index[r] = std::int32_t(seg);
          s.file[r] = std::int32_t(in.file_of(seg));
        }
        read_segments(std::span<const std::int64_t>(s.rows.data() + t.r0, std::size_t(t.r1 - t.r0)),
                      state_of(s.seq).epoch, static_cast<std::byte*>(s.x) + std::size_t(t.r0) * x_row_bytes);
      } catch (const std::exception& e) {
        const ReaderState w = state_of(s.seq);
        err = std::make_exception_ptr(Error(
            fmt::format("reader: batch {} of epoch {} (rows {}..{}): {}", w.position, w.epoch, t.r0, t.r1 - 1,
                        user_message(e)),
            detail::where(__FILE__, __LINE__)));
      }
      {
        std::lock_guard slk(stats_mu);
        st.read_ms += now_ms() - t0;
        if (!err) st.bytes_read += std::uint64_t(t.r1 - t.r0) * ds->info().segment_bytes();
      }
      std::lock_guard lk(mu);
      --running;
      if (err && !s.error) s.error = err;
      if (--s.pending == 0) s.ready = true;
      cv_done.notify_all();
    }
  }

  // Waits for the slot of `seq`; returns false (without waiting) when `block`
  // is false and it is not ready yet. Throws the slot's error when blocking.
  bool wait_slot(std::int64_t seq, bool block) {
    Slot& s = slots[std::size_t(seq % std::int64_t(slots.size()))];
    std::unique_lock lk(mu);
    if (!block) return s.seq == seq && s.ready && !s.error;
    cv_done.wait(lk, [&] { return s.seq == seq && s.ready; });
    if (s.error) {
      failed = s.error;
      std::rethrow_exception(s.error);
    }
    return true;
  }

  // Issues the host-to-device copy of batch `seq` (its slot is ready).
  void issue_copy(std::int64_t seq, cudaStream_t compute) {
    Slot& s = slots[std::size_t(seq % std::int64_t(slots.size()))];
    DevBuf& d = dev[seq % 2];
    consumed.record(compute);       // everything queued so far on `compute`, incl. uses of d's previous batch
    consumed.wait_on(copy_stream);
    const std::size_t b = std::size_t(B);
    MF_CUDA_CHECK(cudaMemcpyAsync(d.x.raw(), s.x, b * x_row_bytes, cudaMemcpyHostToDevice, copy_stream));
    MF_CUDA_CHECK(cudaMemcpyAsync(d.labels.raw(), s.labels, b * 4, cudaMemcpyHostToDevice, copy_stream));
    MF_CUDA_CHECK(cudaMemcpyAsync(d.leak.raw(), s.leak, b * 4, cudaMemcpyHostToDevice, copy_stream));
    MF_CUDA_CHECK(cudaMemcpyAsync(d.index.raw(), s.index, b * 4, cudaMemcpyHostToDevice, copy_stream));
    MF_CUDA_CHECK(cudaMemcpyAsync(d.file.raw(), s.file, b * 4, cudaMemcpyHostToDevice, copy_stream));
    s.copy_done.record(copy_stream);
    d.ready.record(copy_stream);
    {
      std::lock_guard lk(mu);
      s.copy_recorded = true;
    }
    d.seq = seq;
    d.valid = s.valid;
  }

  Batch next_streaming(cudaStream_t stream) {
    const std::int64_t seq = next_seq;
    const std::int64_t R = std::int64_t(slots.size());
    Batch out;
    if (!gpu) {
      if (given_cpu >= 0) {  // the caller is done with the previous slot
        schedule(given_cpu + R);
        given_cpu = -1;
      }
      const double t0 = now_ms();
      wait_slot(seq, true);
      out.wait_ms = now_ms() - t0;
      Slot& s = slots[std::size_t(seq % R)];
      s.t.give(out);
      out.valid = s.valid;
      given_cpu = seq;
    } else {
      const double t0 = now_ms();
      DevBuf& d = dev[seq % 2];
      if (d.seq != seq) {
        wait_slot(seq, true);
        issue_copy(seq, stream);
      }
      d.ready.wait_on(stream);
      schedule(seq + R);  // the slot refills once its copy is done (workers wait on its event)
      if (wait_slot(seq + 1, false)) issue_copy(seq + 1, stream);  // overlap the next copy with this step
      out.wait_ms = now_ms() - t0;
      d.give(out);
      out.valid = d.valid;
    }
    return out;
  }

  void stop_workers() {
    {
      std::lock_guard lk(mu);
      stop = true;
      queue.clear();
    }
    cv_work.notify_all();
    for (auto& t : workers) t.join();
    workers.clear();
  }

  // Drops queued work and waits for running tasks (restore).
  void drain() {
    std::unique_lock lk(mu);
    queue.clear();
    cv_done.wait(lk, [&] { return running == 0; });
    for (auto& s : slots) {
      s.seq = -1;
      s.ready = false;
      s.pending = 0;
      s.error = nullptr;
    }
  }

  // ---- resident -----------------------------------------------------------------

  void load_resident() {
    const auto& in = ds->info();
    const double t0 = now_ms();
    if (gpu) copy_stream = Stream(cfg.device, "reader.load");
    const Stream& s = copy_stream;
    data = Tensor::empty({N, in.n_mels, in.frames}, cfg.dtype, cfg.device, Layout::plain, s);
    if (!gpu) {
      ds->read_all(cfg.dtype, data.raw(), cfg.check_finite, std::max(1, cfg.threads));
    } else {
      // Blocks through two pinned staging buffers: read one while the other is copied.
      const std::int64_t block = std::max<std::int64_t>(1, (std::int64_t(32) << 20) / std::int64_t(x_row_bytes));
      PinnedBuffer stage[2] = {PinnedBuffer(std::size_t(block) * x_row_bytes),
                               PinnedBuffer(std::size_t(block) * x_row_bytes)};
      Event done[2] = {Event(cfg.device), Event(cfg.device)};
      std::vector<std::int64_t> rows;
      for (std::int64_t r0 = 0, i = 0; r0 < N; r0 += block, ++i) {
        const std::int64_t r1 = std::min(N, r0 + block);
        if (i >= 2) done[i % 2].synchronize();
        rows.resize(std::size_t(r1 - r0));
        for (std::int64_t r = r0; r < r1; ++r) rows[std::size_t(r - r0)] = r;
        parallel_read(rows, stage[i % 2].data());
        MF_CUDA_CHECK(cudaMemcpyAsync(static_cast<std::byte*>(data.raw()) + std::size_t(r0) * x_row_bytes,
                                      stage[i % 2].data(), std::size_t(r1 - r0) * x_row_bytes,
                                      cudaMemcpyHostToDevice, s));
        done[i % 2].record(s);
      }
    }
    std::vector<float> lab(static_cast<std::size_t>(N)), leak(static_cast<std::size_t>(N)),
        file(static_cast<std::size_t>(N));
    for (std::int64_t i = 0; i < N; ++i) {
      lab[std::size_t(i)] = float(in.labels[std::size_t(i)]);
      leak[std::size_t(i)] = float(in.leak[std::size_t(i)]);
      file[std::size_t(i)] = float(in.file_of(i));
    }
    // Exact: labels and file ids are < 2^24 (checked in the constructor).
    all_labels = Tensor::from_floats(lab, {N}, DType::i32).to(cfg.device, s);
    all_leak = Tensor::from_floats(leak, {N}, DType::f32).to(cfg.device, s);
    all_file = Tensor::from_floats(file, {N}, DType::i32).to(cfg.device, s);
    alloc_dev(s);
    s.synchronize();
    std::lock_guard lk(stats_mu);
    st.load_ms = now_ms() - t0;
    st.bytes_read += std::uint64_t(N) * in.segment_bytes();
  }

  // Segments, or crops of whole utterances: epoch `epoch`'s random crops for
  // training (ReaderConfig::random_crops), the centred ones otherwise.
  void read_segments(std::span<const std::int64_t> rows, std::int64_t epoch, void* dst) const {
    const DatasetInfo& in = ds->info();
    if (!in.ragged() || !cfg.random_crops) return ds->read(rows, cfg.dtype, dst, cfg.check_finite);
    thread_local std::vector<std::int64_t> starts;
    starts.resize(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i)
      starts[i] = random_crop_start(cfg.seed, epoch, rows[i], in.utterance_frames(rows[i]), in.frames);
    ds->read_crops(rows, starts, cfg.dtype, dst, cfg.check_finite);
  }

  void parallel_read(const std::vector<std::int64_t>& rows, void* dst) {
    const int nt = std::max(1, cfg.threads);
    const std::size_t per = (rows.size() + std::size_t(nt) - 1) / std::size_t(nt);
    run_on_threads(nt, [&](int t) {
      const std::size_t b = std::size_t(t) * per, e = std::min(rows.size(), b + per);
      if (b < e)
        ds->read(std::span<const std::int64_t>(rows.data() + b, e - b), cfg.dtype,
                 static_cast<std::byte*>(dst) + b * x_row_bytes, cfg.check_finite);
    });
  }

  Batch next_resident(cudaStream_t stream) {
    const std::int64_t seq = next_seq;
    const ReaderState w = state_of(seq);
    const double t0 = now_ms();
    if (epoch_idx_epoch != w.epoch) {
      std::vector<float> idx(static_cast<std::size_t>(bpe * B));
      for (std::int64_t p = 0; p < bpe; ++p) {
        const auto rows = rows_of(w.epoch, p, nullptr);
        for (std::int64_t r = 0; r < B; ++r) idx[std::size_t(p * B + r)] = float(rows[std::size_t(r)]);
      }
      epoch_idx = Tensor::from_floats(idx, {bpe * B}, DType::i32).to(cfg.device, stream);
      epoch_idx_epoch = w.epoch;
    }
    DevBuf& d = dev[seq % 2];
    const std::int32_t* idx = epoch_idx.data<std::int32_t>() + w.position * B;
    auto gather = gpu ? MF_CUDA_ENTRY(gather_rows_cuda) : gather_rows_cpu;
    gather(data.raw(), std::int64_t(x_row_bytes), idx, B, d.x.raw(), stream);
    gather(all_labels.raw(), 4, idx, B, d.labels.raw(), stream);
    gather(all_leak.raw(), 4, idx, B, d.leak.raw(), stream);
    gather(all_file.raw(), 4, idx, B, d.file.raw(), stream);
    if (gpu)
      MF_CUDA_CHECK(cudaMemcpyAsync(d.index.raw(), idx, std::size_t(B) * 4, cudaMemcpyDeviceToDevice, stream));
    else
      std::memcpy(d.index.raw(), idx, std::size_t(B) * 4);
    Batch out;
    out.wait_ms = now_ms() - t0;
    d.give(out);
    out.valid = cfg.per_class > 0 ? B : std::min(B, N - w.position * B);
    return out;
  }
};

BatchReader::BatchReader(std::shared_ptr<const Dataset> dataset, const ReaderConfig& cfg)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  MF_CHECK(dataset != nullptr, "BatchReader: no dataset");
  m.ds = std::move(dataset);
  m.cfg = cfg;
  const auto& in = m.ds->info();
  m.N = in.num_segments;
  m.B = cfg.batch_size;
  MF_CHECK(m.B >= 1, "reader: batch_size must be >= 1, found {}", m.B);
  MF_CHECK(cfg.ring_slots >= 2 && cfg.ring_slots <= 8, "reader: ring_slots must be 2..8, found {}", cfg.ring_slots);
  MF_CHECK(cfg.threads >= 1 && cfg.threads <= kMaxReadThreads, "reader: threads must be in [1, {}], found {}",
           kMaxReadThreads, cfg.threads);
  MF_CHECK(cfg.dtype == DType::f32 || cfg.dtype == DType::bf16 || cfg.dtype == DType::f16,
           "reader: compute dtype must be f32, bf16 or f16, found {}", dtype_name(cfg.dtype));
  MF_CHECK(m.N < (std::int64_t(1) << 24), "reader: {} has {} segments; at most 2^24 are supported", in.path, m.N);
  MF_CHECK(cfg.max_device_share > 0 && cfg.max_device_share <= 1,
           "reader: max_device_share must be in (0, 1], found {}", cfg.max_device_share);
  m.bpe = cfg.last_batch == LastBatch::drop ? m.N / m.B : (m.N + m.B - 1) / m.B;
  if (cfg.per_class > 0) {
    m.file_ids.resize(std::size_t(m.N));
    for (std::int64_t i = 0; i < m.N; ++i) m.file_ids[std::size_t(i)] = in.file_of(i);
    m.bpe = balanced_batches(in.labels, cfg.per_class, m.B);
    MF_CHECK(m.bpe > 0, "data.per_class = {}: {} cannot fill one batch of {}: it needs {} classes with at least {} "
             "segments each", cfg.per_class, in.path, m.B, m.B / cfg.per_class, cfg.per_class);
  }
  MF_CHECK(m.bpe > 0, "reader: {} has {} segments, fewer than one batch of {} with the last partial batch "
           "dropped: use a smaller batch, or pad the last batch (ReaderConfig::last_batch = LastBatch::pad)", in.path,
           m.N, m.B);
  MF_CHECK(cfg.shares >= 1 && cfg.share >= 0 && cfg.share < cfg.shares && m.bpe >= cfg.shares,
           "reader: {}: share {} of {} of {} batches per epoch: expected 0 <= share < shares <= batches", in.path,
           cfg.share, cfg.shares, m.bpe);
  m.gpu = cfg.device.is_cuda();
  if (m.gpu) set_current(cfg.device);
  m.x_row_bytes = std::size_t(in.segment_elems()) * dtype_size(cfg.dtype);

  const std::uint64_t need = std::uint64_t(m.N) * (m.x_row_bytes + 12) + std::uint64_t(m.bpe * m.B) * 4;
  // Whole utterances are cropped anew every epoch: read as the epoch needs them.
  MF_CHECK(!in.ragged() || !cfg.random_crops || in.segments_per_file == 1,
           "reader: {}: random crops take one crop per utterance; the file was opened with {} (evaluation's "
           "crops_per_utterance)", in.path, in.segments_per_file);
  MF_CHECK(!in.ragged() || !cfg.random_crops || cfg.resident != Residency::on,
           "reader: {} holds whole utterances, cropped anew every epoch: the streamed reader reads them; set "
           "reader.gpu_cache = auto or off", in.path);
  if (in.ragged() && cfg.random_crops) {
    m.is_resident = false;
  } else if (cfg.resident == Residency::automatic) {
    double avail = 0;
    if (m.gpu) {
      std::size_t free_b = 0, total_b = 0;
      MF_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
      avail = double(free_b);
    } else {
      avail = double(sysconf(_SC_AVPHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
    }
    m.is_resident = double(need) <= cfg.max_device_share * avail;
  } else {
    m.is_resident = cfg.resident == Residency::on;
  }
  if (m.is_resident) m.load_resident();
  else m.start_streaming();
}

BatchReader::~BatchReader() {
  Impl& m = *impl_;
  m.stop_workers();
  if (m.gpu) {
    try {
      if (m.copy_stream.handle()) m.copy_stream.synchronize();
      if (m.last_stream) MF_CUDA_CHECK_PRINT(cudaStreamSynchronize(m.last_stream));
    } catch (...) {
    }
  }
}

Batch BatchReader::next(cudaStream_t stream) {
  Impl& m = *impl_;
  if (m.failed) std::rethrow_exception(m.failed);
  NvtxRange range("reader.next");
  m.last_stream = stream;
  Batch b = m.is_resident ? m.next_resident(stream) : m.next_streaming(stream);
  const ReaderState w = m.state_of(m.next_seq);
  b.epoch = w.epoch;
  b.position = w.position;
  b.last_in_epoch = w.position + m.cfg.shares >= m.bpe;  // this share's last of the epoch
  ++m.next_seq;
  std::lock_guard lk(m.stats_mu);
  ++m.st.batches;
  m.st.wait_ms += b.wait_ms;
  return b;
}

ReaderState BatchReader::state() const {
  const ReaderState s = impl_->state_of(impl_->next_seq);
  return {s.epoch, s.position - impl_->cfg.share};  // the group's position
}

void BatchReader::restore(const ReaderState& s) {
  Impl& m = *impl_;
  MF_CHECK(s.epoch >= 0 && s.position >= 0 && s.position < m.bpe && s.position % m.cfg.shares == 0,
           "reader: cannot restore (epoch {}, position {}): expected epoch >= 0 and position 0..{} ({} batches "
           "per epoch), a multiple of the {} shares", s.epoch, s.position, m.bpe - 1, m.bpe, m.cfg.shares);
  if (!m.is_resident) {
    m.drain();
    if (m.gpu) m.copy_stream.synchronize();
    for (auto& d : m.dev) d.seq = -1;
    m.given_cpu = -1;
  }
  m.failed = nullptr;
  m.base = s;
  m.next_seq = 0;
  if (!m.is_resident) m.schedule_initial();
}

std::int64_t BatchReader::batches_per_epoch() const { return impl_->bpe; }
bool BatchReader::resident() const { return impl_->is_resident; }
const ReaderConfig& BatchReader::config() const { return impl_->cfg; }
const DatasetInfo& BatchReader::info() const { return impl_->ds->info(); }
const Dataset& BatchReader::dataset() const { return *impl_->ds; }
ReaderStats BatchReader::stats() const {
  std::lock_guard lk(impl_->stats_mu);
  return impl_->st;
}
std::vector<std::int64_t> BatchReader::batch_rows(std::int64_t epoch, std::int64_t position) const {
  return impl_->rows_of(epoch, position, nullptr);
}

}  // namespace mf::io
