#include "io/dataset_storage.hpp"

#include <algorithm>
#include <limits>
#include <optional>

#include "io/h5_error.hpp"
#include "io/h5_read.hpp"

namespace mf::io {

// The chunk shape, filters and (on the fast path) the address of every chunk.
// Returns false when a filter sends reads to the H5Dread fallback.
bool Dataset::Impl::index_chunks(DatasetInfo& info, hid_t ds, hid_t dcpl, std::uint64_t file_size) {
  auto& stg = info.storage;
  const auto& sh = info.shape;
  const int rank = int(sh.size());
  std::vector<hsize_t> cd(static_cast<std::size_t>(rank));
  MF_H5_CHECK(H5Pget_chunk(dcpl, rank, cd.data()), "{}: reading the chunk shape of {}", path, seg_name);
  stg.chunk.assign(cd.begin(), cd.end());
  bool fast = true;
  const int nf = H5Pget_nfilters(dcpl);
  for (int i = 0; i < nf; ++i) {
    unsigned flags = 0, fcfg = 0;
    std::size_t nelem = 8;
    unsigned cdv[8];
    char name[128] = {0};
    const H5Z_filter_t id = H5Pget_filter2(dcpl, unsigned(i), &flags, &nelem, cdv, sizeof(name), name, &fcfg);
    const std::string fname = name[0] ? std::string(name) : fmt::format("filter {}", int(id));
    stg.filters.push_back(fname);
    filters.push_back(int(id));
    if (id != H5Z_FILTER_DEFLATE && id != H5Z_FILTER_SHUFFLE) fast = false;
    if (H5Zfilter_avail(id) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      MF_THROW("{}: dataset {} is compressed with '{}' (HDF5 filter id {}), which this HDF5 library cannot "
               "decode: expected no filter, gzip (deflate) or shuffle", path, seg_name, fname, int(id));
    }
  }
  // The chunk grid, with every size checked: the numbers come from the file.
  for (std::int64_t c : stg.chunk)
    MF_CHECK(c >= 1, "{}: dataset {} has chunk shape {}: expected every chunk dimension >= 1 (damaged file?)", path,
             seg_name, shape_str(stg.chunk));
  dims = sh;
  chunk = stg.chunk;
  grid.resize(std::size_t(rank));
  for (int k = 0; k < rank; ++k) grid[std::size_t(k)] = (sh[std::size_t(k)] - 1) / chunk[std::size_t(k)] + 1;
  const std::optional<std::int64_t> nchunks = checked_numel(grid), chunk_elems = checked_numel(chunk);
  std::uint64_t cbytes = 0;
  if (!nchunks || !chunk_elems || __builtin_mul_overflow(std::uint64_t(*chunk_elems), std::uint64_t(esz), &cbytes) ||
      cbytes / kMaxFilterRatio > file_size)
    MF_THROW("{}: dataset {} has chunk shape {} (shape {}): expected chunks whose count and size fit in 64 bits and "
             "whose size fits in the {}-byte file, found {} (damaged file?)", path, seg_name, shape_str(stg.chunk),
             shape_str(sh), file_size, nchunks && chunk_elems ? fmt::format("{}-byte chunks", cbytes) : "an overflow");
  chunk_bytes = std::size_t(cbytes);
  // The chunks the file really stores (HDF5 walks its chunk index): the shape
  // may declare more, and the index below is sized from this, not from it.
  hsize_t stored = 0;
  {
    H5Id space(H5Dget_space(ds), H5Sclose);
    if (H5Dget_num_chunks(ds, space, &stored) < 0) H5Eclear2(H5E_DEFAULT);
  }
  stg.num_chunks = std::int64_t(std::min<hsize_t>(stored, hsize_t(std::numeric_limits<std::int64_t>::max())));
  if (!fast) return false;
  chunks.reserve(std::size_t(std::min<std::uint64_t>(std::uint64_t(*nchunks), stored)));
  std::vector<hsize_t> off(static_cast<std::size_t>(rank));
  for (std::int64_t c = 0; c < *nchunks; ++c) {
    std::int64_t r = c;
    for (int k = rank - 1; k >= 0; --k) {
      off[std::size_t(k)] = hsize_t((r % grid[std::size_t(k)]) * chunk[std::size_t(k)]);
      r /= grid[std::size_t(k)];
    }
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info_by_coord(ds, off.data(), &mask, &addr, &size) < 0 || addr == HADDR_UNDEF ||
        size == 0) {
      H5Eclear2(H5E_DEFAULT);
      MF_THROW("{}: dataset {} has a chunk at {} that was never written (partly written file?)", path, seg_name,
               shape_str(Shape(off.begin(), off.end())));
    }
    if (size > file_size || addr > file_size - size)
      MF_THROW("{}: file truncated: the chunk of {} at {} occupies {} bytes at offset {} but the file has {} bytes",
               path, seg_name, shape_str(Shape(off.begin(), off.end())), size, addr, file_size);
    // Distinct coordinates are distinct chunks: more than the index holds is a damaged index.
    MF_CHECK(chunks.size() < stored, "{}: dataset {}: its chunk index lists {} chunks but lookups find more "
             "(damaged file?)", path, seg_name, stored);
    chunks.push_back({addr, std::uint32_t(size), mask});  // size < 2^32: HDF5 chunks are < 4 GiB
  }
  stg.num_chunks = *nchunks;
  mode = Mode::chunked;
  return true;
}

// Resolves where the data lives, once: the fast paths (pread of contiguous
// data or of each chunk) check every address against the file's size; every
// path checks the declared size against what the file stores before anything
// is sized from the shape. Returns whether reads take a fast path.
bool Dataset::Impl::resolve_storage(DatasetInfo& info, hid_t h5file, hid_t ds, std::uint64_t file_size) {
  H5Id dcpl(MF_H5_CHECK(H5Dget_create_plist(ds), "{}: reading the storage of {}", path, seg_name), H5Pclose);
  const H5D_layout_t lay = H5Pget_layout(dcpl);
  auto& stg = info.storage;
  stg.storage_bytes = H5Dget_storage_size(ds);
  const std::uint64_t logical = std::uint64_t(info.num_segments) * info.segment_bytes();  // checked: set_segment_shape
  bool fast = H5Pget_external_count(dcpl) <= 0;
  if (lay == H5D_CONTIGUOUS) {
    stg.layout = StorageLayout::contiguous;
    const haddr_t addr = H5Dget_offset(ds);
    H5Eclear2(H5E_DEFAULT);
    if (fast) {
      if (addr == HADDR_UNDEF)
        MF_THROW("{}: dataset {} has no data in the file (its storage was never written)", path, seg_name);
      if (logical > file_size || addr > file_size - logical)
        MF_THROW("{}: file truncated: dataset {} occupies {} bytes at offset {} but the file has {} bytes", path,
                 seg_name, logical, addr, file_size);
      base = addr;
      mode = Mode::contiguous;
    }
  } else if (lay == H5D_CHUNKED) {
    stg.layout = StorageLayout::chunked;
    fast = index_chunks(info, ds, dcpl, file_size) && fast;
  } else {
    stg.layout = lay == H5D_COMPACT ? StorageLayout::compact : StorageLayout::other;
    fast = false;
  }
  // The same bound for every layout (io/h5_read.hpp): the fallback path sizes
  // nothing else before its reads.
  H5Value::dataset(h5file, seg_name, path, seg_name).checked_count(esz);
  return fast;
}

}  // namespace mf::io
