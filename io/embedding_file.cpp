#include "io/embedding_file.hpp"

#include "engine/atomic_file.hpp"
#include "engine/error.hpp"
#include "io/h5_error.hpp"
#include "io/h5_write.hpp"

namespace mf::io {

void write_embedding_file(const std::filesystem::path& path, const EmbeddingFile& e) {
  MF_CHECK(std::int64_t(e.values.size()) == e.rows * e.dim && std::int64_t(e.names.size()) == e.rows &&
               std::int64_t(e.labels.size()) == e.rows,
           "write_embedding_file: {} values, {} names and {} labels for {} rows of {}", e.values.size(),
           e.names.size(), e.labels.size(), e.rows, e.dim);
  write_file_atomic(path, [&](const std::filesystem::path& tmp) {
    const std::string p = tmp.string();
    const hid_t f = MF_H5_CHECK(H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "{}: creating",
                                path.string());
    try {
      write_array(f, "embeddings", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, e.values.data(),
                  {hsize_t(e.rows), hsize_t(e.dim)}, path.string());
      write_strings(f, "files", e.names, false, path.string());
      write_vector(f, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, e.labels.data(), hsize_t(e.rows), path.string());
      if (!e.class_names.empty()) write_strings(f, "class_names", e.class_names, true, path.string());
      const std::int64_t per_segment = e.per_segment ? 1 : 0;
      write_attr_number(f, "per_segment", H5T_STD_I64LE, H5T_NATIVE_INT64, &per_segment, path.string());
      write_attr_number(f, "dim", H5T_STD_I64LE, H5T_NATIVE_INT64, &e.dim, path.string());
      write_attr_string(f, "checkpoint", e.checkpoint, path.string());
      write_attr_string(f, "data", e.data, path.string());
    } catch (...) {
      H5Fclose(f);
      throw;
    }
    MF_H5_CHECK(H5Fclose(f), "{}: closing", path.string());
  });
}

}  // namespace mf::io
