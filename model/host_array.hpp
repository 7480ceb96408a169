// HostArray: a named file's array on the host, in any dtype: what a checkpoint
// (model/checkpoint.hpp, /arrays/<name>) and a safetensors file
// (model/safetensors.hpp) hold per name. The bytes are the elements in
// row-major order, little-endian as on every host melforge runs on, f16 and
// bf16 as their 16-bit patterns: the files' own encodings, so loading and
// saving copy bytes and never round.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "engine/dtype.hpp"
#include "engine/error.hpp"
#include "engine/tensor.hpp"

namespace mf::model {

struct HostArray {
  DType dtype = DType::f32;
  Shape shape;
  std::vector<unsigned char> bytes;  // numel() * dtype_size(dtype)

  HostArray() = default;
  // A copy of the numel(shape) elements of `dtype` at `data` (read only when
  // there is at least one element).
  HostArray(DType dtype, Shape shape, const void* data);
  // `values` (numel(shape) of them) stored as `dtype`: f32, f16 or bf16,
  // rounded to nearest even (engine/float_convert.hpp).
  static HostArray from_floats(std::span<const float> values, Shape shape, DType dtype);

  std::int64_t numel() const { return shape_numel(shape); }

  // Every element as f32, from f32, f16 or bf16 (exact). Any other dtype
  // throws mf::Error "<what> is <dtype>, expected a float type", e.g. with
  // what = "model.safetensors: tensor 'fc.weight'".
  std::vector<float> to_floats(std::string_view what) const;

  // Every element as T, whose dtype must be the array's (else mf::Error
  // "<what> is <dtype>, expected <T's dtype>"). A copy: no alignment or
  // aliasing assumption on `bytes`.
  template <class T> std::vector<T> values(std::string_view what) const {
    MF_CHECK(dtype == dtype_of_v<T>, "{} is {}, expected {}", what, dtype_name(dtype), dtype_name(dtype_of_v<T>));
    std::vector<T> out(bytes.size() / sizeof(T));
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
    return out;
  }
};

}  // namespace mf::model
