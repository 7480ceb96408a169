#include "model/host_array.hpp"

#include "engine/float_convert.hpp"

namespace mf::model {

HostArray::HostArray(DType dtype_, Shape shape_, const void* data) : dtype(dtype_), shape(std::move(shape_)) {
  bytes.resize(std::size_t(shape_numel(shape)) * dtype_size(dtype));
  if (!bytes.empty()) std::memcpy(bytes.data(), data, bytes.size());
}

HostArray HostArray::from_floats(std::span<const float> values, Shape shape, DType dtype) {
  MF_CHECK(std::int64_t(values.size()) == shape_numel(shape), "HostArray::from_floats: {} values for shape {}",
           values.size(), shape_str(shape));
  MF_CHECK(dtype_is_float(dtype), "HostArray::from_floats: expected f32, f16 or bf16, found {}", dtype_name(dtype));
  HostArray a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  a.bytes.resize(values.size() * dtype_size(dtype));
  if (!values.empty())
    convert_floats(values.data(), DType::f32, a.bytes.data(), dtype, std::int64_t(values.size()), false);
  return a;
}

std::vector<float> HostArray::to_floats(std::string_view what) const {
  MF_CHECK(dtype_is_float(dtype), "{} is {}, expected a float type", what, dtype_name(dtype));
  std::vector<float> out(bytes.size() / dtype_size(dtype));
  if (!out.empty()) convert_floats(bytes.data(), dtype, out.data(), DType::f32, std::int64_t(out.size()), false);
  return out;
}

}  // namespace mf::model
