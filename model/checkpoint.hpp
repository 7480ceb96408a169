// Checkpoints: one HDF5 file holding named arrays (model/host_array.hpp:
// weights, FP32 master, AdamW moments; f32, bf16, f16, i32 or u8) and scalar metadata (step, epoch,
// sampler position, schedule state, loss scale, RNG state, the config TOML).
//
// File layout (readable with h5py):
//   /arrays/<name>   the array; attributes "dtype" (melforge dtype name; bf16 and
//                    f16 are stored as their uint16 bit patterns) and "crc32"
//   /ints/<name>     scalar int64
//   /floats/<name>   scalar float64
//   /strings/<name>  scalar fixed-length string
//   root attribute "melforge_checkpoint" = format version
//
// Writes are atomic: a temporary file in the same folder, fsync, rename over
// the final name, fsync the folder. A crash at any point leaves either the old
// file or the new one, never a mix. Reads verify every array's CRC-32, so a
// corrupt or truncated file is an error (and `newest_good` skips it).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/dtype.hpp"
#include "engine/tensor.hpp"
#include "model/host_array.hpp"

namespace mf::model {

class Checkpoint {
 public:
  std::map<std::string, HostArray> arrays;
  std::map<std::string, std::int64_t> ints;
  std::map<std::string, double> floats;
  std::map<std::string, std::string> strings;

  void put(const std::string& name, DType dtype, const Shape& shape, const void* data);
  // A host copy of any tensor (a device tensor is copied to the host).
  void put(const std::string& name, const Tensor& t);
  template <class T> void put(const std::string& name, std::span<const T> v) {
    put(name, dtype_of_v<T>, {std::int64_t(v.size())}, v.data());
  }

  // Accessors throw mf::Error naming the checkpoint (`source`) and the entry.
  const HostArray& array(const std::string& name) const;
  // Copies an array into `dst` (same dtype and element count; any device).
  void read_into(const std::string& name, Tensor& dst) const;
  std::int64_t get_int(const std::string& name) const;
  // get_int, range-checked: values from a file are untrusted. Throws mf::Error
  // naming the checkpoint, /ints/<name>, the range expected and the value found.
  std::int64_t get_int_in(const std::string& name, std::int64_t lo, std::int64_t hi) const;
  double get_float(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;
  bool has(const std::string& name) const;

  std::string source = "<memory>";  // the path it was read from
};

inline constexpr int kCheckpointVersion = 1;

// Writes `c` to `path` atomically (engine/atomic_file.hpp, which also has the
// crash-before-rename test hook). The folder must exist.
void write_checkpoint(const std::filesystem::path& path, const Checkpoint& c);

// Reads and verifies a checkpoint; throws mf::Error naming the file and what is wrong.
Checkpoint read_checkpoint(const std::filesystem::path& path);

// The checkpoints of a run directory: ckpt-<step>.h5 files, the last N kept,
// plus best.h5 (a hard link to, or copy of, the best one).
class CheckpointDir {
 public:
  CheckpointDir(std::filesystem::path dir, std::int64_t keep_last);

  // Writes ckpt-<step>.h5 (and best.h5 when `best`), then removes all but the
  // newest keep_last ckpt files. Returns the path written.
  std::filesystem::path save(const Checkpoint& c, std::int64_t step, bool best);

  // ckpt-*.h5 files, newest (highest step) first.
  std::vector<std::filesystem::path> list() const;
  std::filesystem::path best_path() const { return dir_ / "best.h5"; }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::int64_t keep_last_;
};

// The newest checkpoint of `dir` that reads and verifies; each newer one that
// does not is skipped with a warning naming it and why (also appended to
// `skipped`, newest first, when given). nullopt when none.
struct FoundCheckpoint {
  std::filesystem::path path;
  Checkpoint checkpoint;
};
std::optional<FoundCheckpoint> newest_good_checkpoint(const std::filesystem::path& dir,
                                                     std::vector<std::string>* skipped = nullptr);

// CRC-32 (IEEE 802.3, as zlib's crc32).
std::uint32_t crc32(const void* data, std::size_t n, std::uint32_t crc = 0);

}  // namespace mf::model
