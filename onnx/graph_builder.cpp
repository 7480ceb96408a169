#include "onnx/graph_builder.hpp"

#include <cstring>

#include "engine/error.hpp"

namespace mf::onnx_export {

namespace {

void set_value_info(onnx::ValueInfoProto* v, const std::string& name, const std::vector<std::int64_t>& dims,
                    const std::vector<std::string>& dim_names, int elem_type = onnx::TensorProto::FLOAT) {
  MF_CHECK(dim_names.size() == dims.size() || dim_names.empty(), "ONNX export: {}: {} dimensions but {} names", name,
           dims.size(), dim_names.size());
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  auto* shape = t->mutable_shape();
  for (std::size_t i = 0; i < dims.size(); ++i) {
    auto* d = shape->add_dim();
    if (dims[i] >= 0) d->set_dim_value(dims[i]);
    else d->set_dim_param(dim_names.at(i));
  }
}

}  // namespace

void GraphBuilder::claim(const std::string& name) {
  MF_CHECK(!name.empty(), "ONNX export: a value without a name");
  MF_CHECK(names_.insert(name).second, "ONNX export: the value name '{}' is used twice", name);
}

onnx::TensorProto* GraphBuilder::initializer(const std::string& name, int data_type) {
  claim(name);
  auto* t = g_.add_initializer();
  t->set_name(name);
  t->set_data_type(data_type);
  return t;
}

std::string GraphBuilder::floats(const std::string& name, const std::vector<std::int64_t>& shape,
                                 std::span<const float> values) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  MF_CHECK(n == std::int64_t(values.size()), "ONNX export: {}: {} values for a shape of {} elements", name,
           values.size(), n);
  auto* t = initializer(name, onnx::TensorProto::FLOAT);
  for (auto d : shape) t->add_dims(d);
  // raw_data: little-endian float32, the layout every runtime reads fastest.
  t->set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  return name;
}

std::string GraphBuilder::ints(const std::string& name, const std::vector<std::int64_t>& values) {
  auto* t = initializer(name, onnx::TensorProto::INT64);
  t->add_dims(std::int64_t(values.size()));
  for (auto v : values) t->add_int64_data(v);
  return name;
}

std::string GraphBuilder::scalar(const std::string& name, float value) {
  auto* t = initializer(name, onnx::TensorProto::FLOAT);
  t->add_float_data(value);
  return name;
}

std::string GraphBuilder::scalar_int(const std::string& name, std::int64_t value) {
  auto* t = initializer(name, onnx::TensorProto::INT64);
  t->add_int64_data(value);
  return name;
}

std::string GraphBuilder::node(const std::string& op, const std::vector<std::string>& inputs, const std::string& out,
                               const std::vector<Attr>& attrs) {
  for (const auto& in : inputs)
    MF_CHECK(in.empty() || names_.count(in), "ONNX export: node '{}' ({}) reads '{}', which nothing writes", out, op,
             in);
  claim(out);
  auto* n = g_.add_node();
  n->set_op_type(op);
  n->set_name(out);
  for (const auto& in : inputs) n->add_input(in);
  n->add_output(out);
  for (const auto& a : attrs) {
    auto* p = n->add_attribute();
    p->set_name(a.name);
    if (const auto* i = std::get_if<std::int64_t>(&a.value)) {
      p->set_type(onnx::AttributeProto::INT);
      p->set_i(*i);
    } else if (const auto* f = std::get_if<float>(&a.value)) {
      p->set_type(onnx::AttributeProto::FLOAT);
      p->set_f(*f);
    } else if (const auto* v = std::get_if<std::vector<std::int64_t>>(&a.value)) {
      p->set_type(onnx::AttributeProto::INTS);
      for (auto x : *v) p->add_ints(x);
    } else {
      p->set_type(onnx::AttributeProto::STRING);
      p->set_s(std::get<std::string>(a.value));
    }
  }
  return out;
}

void GraphBuilder::input(const std::string& name, const std::vector<std::int64_t>& dims,
                         const std::vector<std::string>& dim_names) {
  claim(name);
  set_value_info(g_.add_input(), name, dims, dim_names);
}

void GraphBuilder::output(const std::string& name, const std::vector<std::int64_t>& dims,
                          const std::vector<std::string>& dim_names, int elem_type) {
  MF_CHECK(names_.count(name), "ONNX export: the graph output '{}' is not computed", name);
  set_value_info(g_.add_output(), name, dims, dim_names, elem_type);
}

}  // namespace mf::onnx_export
