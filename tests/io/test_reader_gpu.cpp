// GPU suite of the input pipeline (skipped without a GPU): the gather kernel
// against its CPU twin (every word width, odd row sizes, poisoned outputs), and
// the GPU reader (streaming through pinned slots + copy stream, and resident)
// against the CPU reader, batch for batch, bit for bit.
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "engine/stream.hpp"
#include "io/gather.hpp"
#include "io/h5_writer.hpp"
#include "io/reader.hpp"
#include "io/synth.hpp"
#include "tests/io/io_testing.hpp"

using namespace mf;

TEST_CASE("gather_rows_cuda matches gather_rows_cpu for every word width and odd sizes") {
  Stream s(Device::cuda(0), "test");
  std::mt19937 rng(5);
  for (std::int64_t row_bytes : {1, 3, 4, 12, 16, 48, 8192 + 4, 8192}) {
    for (std::int64_t n : {1, 7, 256}) {
      CAPTURE(row_bytes);
      CAPTURE(n);
      const std::int64_t rows = 300;
      std::vector<unsigned char> src(static_cast<std::size_t>(rows * row_bytes));
      for (auto& b : src) b = static_cast<unsigned char>(rng());
      std::vector<std::int32_t> idx(static_cast<std::size_t>(n));
      for (auto& i : idx) i = std::int32_t(rng() % rows);
      std::vector<unsigned char> want(static_cast<std::size_t>(n * row_bytes));
      io::gather_rows_cpu(src.data(), row_bytes, idx.data(), n, want.data(), nullptr);
      void *dsrc, *ddst, *didx;
      MF_CUDA_CHECK(cudaMalloc(&dsrc, src.size() + 16));
      MF_CUDA_CHECK(cudaMalloc(&ddst, want.size() + 16));
      MF_CUDA_CHECK(cudaMalloc(&didx, idx.size() * 4));
      MF_CUDA_CHECK(cudaMemcpy(dsrc, src.data(), src.size(), cudaMemcpyHostToDevice));
      MF_CUDA_CHECK(cudaMemcpy(didx, idx.data(), idx.size() * 4, cudaMemcpyHostToDevice));
      MF_CUDA_CHECK(cudaMemset(ddst, 0xff, want.size()));
      io::gather_rows_cuda(dsrc, row_bytes, static_cast<const std::int32_t*>(didx), n, ddst, s);
      s.synchronize();
      std::vector<unsigned char> got(want.size());
      MF_CUDA_CHECK(cudaMemcpy(got.data(), ddst, got.size(), cudaMemcpyDeviceToHost));
      CHECK(got == want);
      // Misaligned destination: the byte path.
      MF_CUDA_CHECK(cudaMemset(ddst, 0xff, want.size() + 16));
      io::gather_rows_cuda(dsrc, row_bytes, static_cast<const std::int32_t*>(didx), n,
                           static_cast<char*>(ddst) + 1, s);
      s.synchronize();
      MF_CUDA_CHECK(cudaMemcpy(got.data(), static_cast<char*>(ddst) + 1, got.size(), cudaMemcpyDeviceToHost));
      CHECK(got == want);
      cudaFree(dsrc);
      cudaFree(ddst);
      cudaFree(didx);
    }
  }
}

TEST_CASE("the GPU reader delivers the CPU reader's batches (streaming and resident, bf16 and f32)") {
  testing::TempDir dir("io_gpu");
  io::SynthConfig sc;
  sc.files = 12;
  sc.long_segments = 2;
  sc.short_segments = 4;
  sc.mels = 16;
  sc.frames = 24;
  sc.storage = io::WriteStorage::gzip;
  const auto splits = io::write_synthetic(dir.path().string(), sc);
  auto ds = io::Dataset::open(splits[0].path);
  Stream compute(Device::cuda(0), "compute");
  for (DType dt : {DType::bf16, DType::f32})
    for (io::Residency res : {io::Residency::off, io::Residency::on}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(int(res));
      io::ReaderConfig c;
      c.batch_size = 6;
      c.seed = 3;
      c.dtype = dt;
      c.last_batch = io::LastBatch::pad;
      c.device = Device::cpu();
      c.resident = io::Residency::off;
      io::BatchReader cpu(ds, c);
      c.device = Device::cuda(0);
      c.resident = res;
      io::BatchReader gpu(ds, c);
      CHECK(gpu.resident() == (res == io::Residency::on));
      for (std::int64_t k = 0; k < 2 * gpu.batches_per_epoch() + 1; ++k) {
        const io::Batch a = cpu.next();
        const io::Batch b = gpu.next(compute);
        REQUIRE(b.x.is_cuda());
        compute.synchronize();
        CHECK(a.valid == b.valid);
        CHECK(a.epoch == b.epoch);
        CHECK(a.index.to_floats() == b.index.to_floats());
        CHECK(a.labels.to_floats() == b.labels.to_floats());
        CHECK(a.file.to_floats() == b.file.to_floats());
        CHECK(a.leak.to_floats() == b.leak.to_floats());
        const Tensor bx = b.x.to(Device::cpu(), compute);
        CHECK(std::memcmp(a.x.raw(), bx.raw(), a.x.nbytes()) == 0);
      }
    }
}

TEST_CASE("GPU streaming reader: tensors stay valid until the following next() while copies overlap") {
  testing::TempDir dir("io_gpu2");
  io::SynthConfig sc;
  sc.files = 9;
  sc.long_segments = 2;
  sc.short_segments = 8;
  const auto splits = io::write_synthetic(dir.path().string(), sc);
  auto ds = io::Dataset::open(splits[0].path);
  Stream compute(Device::cuda(0), "compute");
  io::ReaderConfig c;
  c.batch_size = 16;
  c.device = Device::cuda(0);
  c.resident = io::Residency::off;
  c.shuffle = false;
  c.dtype = DType::f16;
  io::BatchReader r(ds, c);
  io::ReaderConfig cc = c;
  cc.device = Device::cpu();
  io::BatchReader ref(ds, cc);
  // Queue a copy of each batch on the compute stream before asking for the next one, never synchronizing in between.
  std::vector<Tensor> copies;
  for (int k = 0; k < 10; ++k) {
    const io::Batch b = r.next(compute);
    Tensor t = Tensor::empty(b.x.shape(), b.x.dtype(), Device::cuda(0), Layout::nhwc, compute);
    t.copy_from(b.x, compute);
    copies.push_back(t);
  }
  compute.synchronize();
  for (int k = 0; k < 10; ++k) {
    const io::Batch a = ref.next();
    const Tensor h = copies[std::size_t(k)].to(Device::cpu(), compute);
    CHECK(std::memcmp(a.x.raw(), h.raw(), h.nbytes()) == 0);
  }
}
