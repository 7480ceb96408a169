#include "engine/dtype.hpp"

#include "engine/error.hpp"

namespace mf {

DType parse_dtype(std::string_view name) {
  if (name == "f32" || name == "fp32" || name == "float32" || name == "float") return DType::f32;
  if (name == "f16" || name == "fp16" || name == "float16" || name == "half") return DType::f16;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "i32" || name == "int32") return DType::i32;
  if (name == "u8" || name == "uint8") return DType::u8;
  MF_THROW("unknown dtype '{}': expected one of f32, f16, bf16, i32, u8", name);
}

}  // namespace mf
