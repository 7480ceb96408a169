// safetensors (the Hugging Face weight format), written and read here without
// a dependency: an 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"key": "value"}} padded with spaces to a multiple of 8,
// then the raw little-endian data (offsets relative to its start, no holes).
// dtypes: F32, BF16, F16, I32, U8. Loads with safetensors.torch.load_file and
// with any reader of the format.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "engine/dtype.hpp"
#include "engine/tensor.hpp"
#include "model/host_array.hpp"

namespace mf::model {

// The name init_weights_from (train/load_model.cpp) spells a tensor with.
using SafeTensor = HostArray;

struct SafeTensors {
  std::vector<std::string> order;  // file order
  std::map<std::string, HostArray> tensors;
  std::map<std::string, std::string> metadata;

  // Appends `tensor` under `name` (non-empty, not "__metadata__", not taken).
  void add(const std::string& name, HostArray tensor);
  void add(const std::string& name, DType dtype, const Shape& shape, const void* data);
  const HostArray& at(const std::string& name) const;  // throws naming the file and tensor
  std::string source = "<memory>";
};

// Writes atomically (temporary file in the same folder, then rename).
void write_safetensors(const std::filesystem::path& path, const SafeTensors& st);
// Reads and validates (offsets in bounds, sizes match shapes, no holes or overlaps).
SafeTensors read_safetensors(const std::filesystem::path& path);

std::string safetensors_dtype_name(DType t);  // "F32", ...

}  // namespace mf::model
