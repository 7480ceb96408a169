// The embeddings file `melforge embed` writes (HDF5, written atomically):
//   /embeddings  f32 [rows, dim]  L2-normalised (one row per file, or per
//                segment with --per-segment)
//   /files       strings [rows]   each row's file name (the dataset's /files,
//                or "#<index>"); per segment: "name#<segment within the file>"
//   /labels      i32 [rows]       the class (speaker) of the row's file
//   attributes   class_names (strings), per_segment (0/1), checkpoint (path),
//                data (path), dim
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace mf::io {

struct EmbeddingFile {
  std::int64_t rows = 0, dim = 0;
  std::vector<float> values;             // [rows, dim]
  std::vector<std::string> names;        // [rows]
  std::vector<std::int32_t> labels;      // [rows]
  std::vector<std::string> class_names;
  bool per_segment = false;
  std::string checkpoint, data;
};

void write_embedding_file(const std::filesystem::path& path, const EmbeddingFile& e);

}  // namespace mf::io
