// GraphBuilder: the one place melforge's ONNX exporter touches ONNX's protobuf
// classes (onnx::GraphProto from Debian's libonnx-dev) to add nodes and
// constants. Everything it adds is float32 or int64; names are checked to be
// unique, so a mistake in the exporter is an mf::Error here, not a file that
// ONNX Runtime refuses later.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace mf::onnx_export {

// An ONNX node attribute: int, float, ints or string.
struct Attr {
  std::string name;
  std::variant<std::int64_t, float, std::vector<std::int64_t>, std::string> value;
};

class GraphBuilder {
 public:
  explicit GraphBuilder(onnx::GraphProto& graph) : g_(graph) {}

  // A float32 initializer (a constant of the graph) of `shape`; returns its name.
  std::string floats(const std::string& name, const std::vector<std::int64_t>& shape, std::span<const float> values);
  // A 1-D int64 initializer (shapes, axes, slice bounds); returns its name.
  std::string ints(const std::string& name, const std::vector<std::int64_t>& values);
  // A 0-D (scalar) initializer.
  std::string scalar(const std::string& name, float value);
  std::string scalar_int(const std::string& name, std::int64_t value);
  // Adds node `op` (default ONNX domain) reading `inputs` ("" for an omitted
  // optional input) and writing one output named `out`; returns `out`.
  std::string node(const std::string& op, const std::vector<std::string>& inputs, const std::string& out,
                   const std::vector<Attr>& attrs = {});

  // Graph inputs and outputs: float32 tensors (or `elem_type`, an
  // onnx::TensorProto::DataType); a dimension < 0 is dynamic and named by the
  // matching entry of `dim_names`.
  void input(const std::string& name, const std::vector<std::int64_t>& dims, const std::vector<std::string>& dim_names);
  void output(const std::string& name, const std::vector<std::int64_t>& dims, const std::vector<std::string>& dim_names,
              int elem_type = onnx::TensorProto::FLOAT);

 private:
  void claim(const std::string& name);  // throws when `name` is already a value of the graph
  // A new initializer called `name` of ONNX element type `data_type` (claimed).
  onnx::TensorProto* initializer(const std::string& name, int data_type);
  onnx::GraphProto& g_;
  std::set<std::string> names_;
};

}  // namespace mf::onnx_export
