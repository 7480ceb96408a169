// Dataset::Impl: where a dataset's segments live in the file and how rows are
// read from it (io/dataset.hpp, "Storage", has the contract).
//
// resolve_storage (io/dataset_storage.cpp) runs once at open: it records the
// data's address (contiguous) or the address, size and filter mask of every
// chunk (the chunk index), each checked against the file's size, and picks a
// read mode. The reads (io/dataset_read.cpp) then bypass HDF5 on the fast
// paths (pread, plus zlib for deflated chunks, from any number of threads) or
// go through H5Dread under HDF5's global lock for anything else.
#pragma once

#include <hdf5.h>
#include <unistd.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/error.hpp"
#include "io/dataset.hpp"
#include "io/h5_id.hpp"

namespace mf::io {

// One allocated chunk of a chunked dataset, as HDF5's chunk index lists it.
struct ChunkRec {
  std::uint64_t addr = 0;         // byte offset in the file
  std::uint32_t size = 0;         // stored (possibly compressed) bytes; HDF5 chunks are < 4 GiB
  std::uint32_t filter_mask = 0;  // bit f set: filter f of the pipeline was skipped for this chunk
};

struct Dataset::Impl {
  enum class Mode { contiguous, chunked, hdf5 } mode = Mode::contiguous;
  std::string path, seg_name;
  int fd = -1;  // the fast paths' descriptor
  DType dtype = DType::f32;
  std::size_t esz = 4;
  std::uint64_t base = 0;  // contiguous: the data's offset in the file
  // chunked
  std::vector<std::int64_t> dims, chunk, grid;
  std::vector<ChunkRec> chunks;  // row-major over grid
  std::vector<int> filters;      // pipeline order (H5Z_FILTER_*)
  std::size_t chunk_bytes = 0;   // one decoded chunk
  // H5Dread fallback (kept open only then)
  H5Id file, dset;

  ~Impl() {
    if (fd >= 0) ::close(fd);
  }

  // Resolves where the data lives and sets `mode` for the fast paths; fills
  // info.storage. Returns whether reads take a fast path (else the caller
  // sets Mode::hdf5 and keeps `file` and `dset` open).
  bool resolve_storage(DatasetInfo& info, hid_t h5file, hid_t ds, std::uint64_t file_size);
  // Ragged data: the chunked path's shape seen as [T, 1, n_mels], so its
  // reads take frames as rows of one "mel" of n_mels "frames" (each chunk's
  // part of a frame is then one run of values, io/dataset_ragged.cpp).
  void view_frames_as_rows();

  // Dataset::read for each mode: rows already range-checked, dt f32/f16/bf16.
  void read_contiguous(const DatasetInfo& info, std::span<const std::int64_t> rows, DType dt, void* dst,
                       bool check) const;
  void read_chunked(const DatasetInfo& info, std::span<const std::int64_t> rows, DType dt, void* dst,
                    bool check) const;
  void read_hdf5(const DatasetInfo& info, std::span<const std::int64_t> rows, DType dt, void* dst,
                 bool check) const;

 private:
  bool index_chunks(DatasetInfo& info, hid_t ds, hid_t dcpl, std::uint64_t file_size);
  // The chunk `c` read and run back through its filters: chunk_bytes bytes in
  // one of the calling thread's scratch buffers.
  const std::byte* decode_chunk(std::int64_t c) const;
  [[noreturn]] void throw_nonfinite(const DatasetInfo& info, std::int64_t seg, std::int64_t elem,
                                    float v) const {
    if (info.layout == SegmentLayout::ragged_frames)  // a row is one frame, [1, n_mels]
      MF_THROW("{}: {} holds a non-finite value ({}) at {}, mel {}: expected finite log-mel values", path, seg_name, v,
               info.where(seg), elem);
    MF_THROW("{}: {} holds a non-finite value ({}) at {}, mel {}, frame {}: expected finite log-mel values", path,
             seg_name, v, info.where(seg), elem / info.frames, elem % info.frames);
  }
};

}  // namespace mf::io
