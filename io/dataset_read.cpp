// Dataset::Impl's reads (io/dataset_storage.hpp): contiguous data in runs of
// consecutive rows, chunked data one decoded chunk at a time, anything else
// through H5Dread. Each converts to the destination type and, when asked,
// reports the first non-finite value with its position.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/float_convert.hpp"
#include "io/dataset_storage.hpp"
#include "io/h5_error.hpp"

namespace mf::io {

namespace {

void pread_full(int fd, void* buf, std::size_t n, std::uint64_t off, const std::string& path) {
  auto* p = static_cast<char*>(buf);
  std::size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, p + done, n - done, off_t(off + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      MF_THROW("{}: reading {} bytes at offset {} failed: {}", path, n, off, std::strerror(errno));
    }
    if (r == 0)
      MF_THROW("{}: file truncated: reading {} bytes at offset {} hit the end of the file after {} bytes", path,
               n, off, done);
    done += std::size_t(r);
  }
}

struct Scratch {
  std::vector<std::byte> a, b, c;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}
void grow(std::vector<std::byte>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
}

void inflate_chunk(const std::byte* src, std::size_t n, std::vector<std::byte>& out, std::size_t expect,
                   const std::string& ctx) {
  grow(out, expect);
  uLongf len = uLongf(expect);
  const int rc = ::uncompress(reinterpret_cast<Bytef*>(out.data()), &len, reinterpret_cast<const Bytef*>(src), uLong(n));
  if (rc != Z_OK || len != expect)
    MF_THROW("{}: gzip (deflate) data is corrupt: zlib says '{}' after {} of {} bytes", ctx,
             rc == Z_OK ? "short output" : zError(rc), std::size_t(len), expect);
}
void unshuffle(const std::byte* src, std::size_t n, std::size_t esz, std::vector<std::byte>& out) {
  grow(out, n);
  const std::size_t m = n / esz;
  for (std::size_t j = 0; j < esz; ++j)
    for (std::size_t i = 0; i < m; ++i) out[i * esz + j] = src[j * m + i];
  std::memcpy(out.data() + m * esz, src + m * esz, n - m * esz);  // leftover bytes stay as they are
}

}  // namespace

void Dataset::Impl::read_contiguous(const DatasetInfo& info, std::span<const std::int64_t> rows, DType dt,
                                    void* dst, bool check) const {
  const std::size_t sb = info.segment_bytes(), ob = std::size_t(info.segment_elems()) * dtype_size(dt);
  const std::int64_t elems = info.segment_elems();
  const std::size_t max_run = std::max<std::size_t>(1, (std::size_t(8) << 20) / sb);
  auto* out = static_cast<std::byte*>(dst);
  std::size_t i = 0;
  while (i < rows.size()) {
    std::size_t j = i + 1;
    while (j < rows.size() && j - i < max_run && rows[j] == rows[j - 1] + 1) ++j;
    const std::size_t n = j - i;
    const std::uint64_t off = base + std::uint64_t(rows[i]) * sb;
    std::byte* o = out + i * ob;
    const void* src = o;
    if (dt == dtype) {
      pread_full(fd, o, n * sb, off, path);
    } else {
      auto& s = scratch();
      grow(s.a, n * sb);
      pread_full(fd, s.a.data(), n * sb, off, path);
      src = s.a.data();
    }
    const std::int64_t bad = convert_floats(src, dtype, o, dt, std::int64_t(n) * elems, check);
    if (bad >= 0) throw_nonfinite(info, rows[i + std::size_t(bad / elems)], bad % elems, float_at(src, dtype, bad));
    i = j;
  }
}

const std::byte* Dataset::Impl::decode_chunk(std::int64_t c) const {
  auto& s = scratch();
  const ChunkRec& rec = chunks[std::size_t(c)];
  grow(s.a, rec.size);
  pread_full(fd, s.a.data(), rec.size, rec.addr, path);
  const std::byte* data = s.a.data();
  std::size_t len = rec.size;
  for (int f = int(filters.size()) - 1; f >= 0; --f) {
    if (rec.filter_mask & (1u << f)) continue;  // this filter was skipped for this chunk
    std::vector<std::byte>& o = (data == s.b.data()) ? s.c : s.b;
    if (filters[std::size_t(f)] == H5Z_FILTER_DEFLATE) {
      inflate_chunk(data, len, o, chunk_bytes,
                    fmt::format("{}: {} chunk {} at offset {}", path, seg_name, c, rec.addr));
      len = chunk_bytes;
    } else {
      unshuffle(data, len, esz, o);
    }
    data = o.data();
  }
  if (len != chunk_bytes)
    MF_THROW("{}: {} chunk {} at offset {} holds {} bytes after decoding, expected {}", path, seg_name, c,
             rec.addr, len, chunk_bytes);
  return data;
}

void Dataset::Impl::read_chunked(const DatasetInfo& info, std::span<const std::int64_t> rows, DType dt, void* dst,
                                 bool check) const {
  const int rank = int(dims.size());
  const int lead = rank - 2;
  const std::int64_t M = info.n_mels, T = info.frames, cm = chunk[std::size_t(rank - 2)],
                     ct = chunk[std::size_t(rank - 1)];
  const std::int64_t gm = grid[std::size_t(rank - 2)], gt = grid[std::size_t(rank - 1)];
  const std::size_t ob = std::size_t(M * T) * dtype_size(dt);
  // (chunk, row) pairs, grouped by chunk so each chunk is read and decoded once per call.
  struct Need {
    std::int64_t chunk;
    std::int64_t row;
  };
  thread_local std::vector<Need> need;  // reused across calls (no page faults from a fresh 100 KB+ vector each batch)
  need.clear();
  need.reserve(rows.size() * std::size_t(gm * gt));
  for (std::size_t r = 0; r < rows.size(); ++r) {
    std::int64_t s = rows[r], lin = 0;
    std::int64_t coord[3] = {0, 0, 0};
    for (int k = lead - 1; k >= 0; --k) {
      coord[k] = s % dims[std::size_t(k)];
      s /= dims[std::size_t(k)];
    }
    for (int k = 0; k < lead; ++k) lin = lin * grid[std::size_t(k)] + coord[k] / chunk[std::size_t(k)];
    for (std::int64_t a = 0; a < gm; ++a)
      for (std::int64_t b = 0; b < gt; ++b) need.push_back({(lin * gm + a) * gt + b, std::int64_t(r)});
  }
  std::sort(need.begin(), need.end(), [](const Need& x, const Need& y) {
    return x.chunk != y.chunk ? x.chunk < y.chunk : x.row < y.row;
  });
  auto* out = static_cast<std::byte*>(dst);
  std::size_t i = 0;
  while (i < need.size()) {
    const std::int64_t c = need[i].chunk;
    const std::byte* data = decode_chunk(c);
    // Chunk origin.
    std::int64_t origin[5] = {0, 0, 0, 0, 0};
    {
      std::int64_t r = c;
      for (int k = rank - 1; k >= 0; --k) {
        origin[k] = (r % grid[std::size_t(k)]) * chunk[std::size_t(k)];
        r /= grid[std::size_t(k)];
      }
    }
    const std::int64_t m0 = origin[rank - 2], t0 = origin[rank - 1];
    const std::int64_t m1 = std::min(M, m0 + cm), t1 = std::min(T, t0 + ct);
    for (; i < need.size() && need[i].chunk == c; ++i) {
      const std::int64_t row = need[i].row, seg = rows[std::size_t(row)];
      std::int64_t sidx = seg, loc = 0;
      std::int64_t coord[3] = {0, 0, 0};
      for (int k = lead - 1; k >= 0; --k) {
        coord[k] = sidx % dims[std::size_t(k)];
        sidx /= dims[std::size_t(k)];
      }
      for (int k = 0; k < lead; ++k) loc = loc * chunk[std::size_t(k)] + (coord[k] - origin[k]);
      for (std::int64_t m = m0; m < m1; ++m) {
        const std::int64_t src_e = (loc * cm + (m - m0)) * ct;
        const std::byte* src = data + std::size_t(src_e) * esz;
        std::byte* o = out + std::size_t(row) * ob + std::size_t(m * T + t0) * dtype_size(dt);
        const std::int64_t bad = convert_floats(src, dtype, o, dt, t1 - t0, check);
        if (bad >= 0) throw_nonfinite(info, seg, m * T + t0 + bad, float_at(src, dtype, bad));
      }
    }
  }
}

void Dataset::Impl::read_hdf5(const DatasetInfo& info, std::span<const std::int64_t> rows, DType dt, void* dst,
                              bool check) const {
  // HDF5 serializes these calls with its global lock (the Debian build is thread-safe).
  const int rank = int(info.shape.size());
  const std::int64_t elems = info.segment_elems();
  const std::size_t ob = std::size_t(elems) * dtype_size(dt);
  auto& s = scratch();
  grow(s.a, std::size_t(elems) * sizeof(float));
  auto* f = reinterpret_cast<float*>(s.a.data());
  H5Id fspace(H5Dget_space(dset), H5Sclose);
  const hsize_t mdim = hsize_t(elems);
  H5Id mspace(H5Screate_simple(1, &mdim, nullptr), H5Sclose);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    std::vector<hsize_t> start(std::size_t(rank), 0), count(std::size_t(rank), 1);
    std::int64_t sidx = rows[r];
    for (int k = rank - 3; k >= 0; --k) {
      start[std::size_t(k)] = hsize_t(sidx % info.shape[std::size_t(k)]);
      sidx /= info.shape[std::size_t(k)];
    }
    count[std::size_t(rank - 2)] = hsize_t(info.n_mels);
    count[std::size_t(rank - 1)] = hsize_t(info.frames);
    MF_H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
                "{}: selecting {} of {}", path, info.where(rows[r]), seg_name);
    MF_H5_CHECK(H5Dread(dset, H5T_NATIVE_FLOAT, mspace, fspace, H5P_DEFAULT, f), "{}: reading {} of {}", path,
                info.where(rows[r]), seg_name);
    const std::int64_t bad = convert_floats(f, DType::f32, static_cast<std::byte*>(dst) + r * ob, dt, elems, check);
    if (bad >= 0) throw_nonfinite(info, rows[r], bad, f[bad]);
  }
}

}  // namespace mf::io
