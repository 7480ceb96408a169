// The ONNX export's contract on the library side (onnx/export_model.hpp): the
// graph's inputs, outputs and metadata for each kind of model, and the
// errors: a description and weights that disagree, a layer with no mapping
// and a front-end that does not fit name what is wrong and return nothing.
// Outputs equal to melforge's own are checked with ONNX Runtime in
// tests/onnx/test_onnx_export.py.
#include <doctest/doctest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>

#include "model/param_buffer.hpp"
#include "model/torch_layout.hpp"
#include "onnx/export_model.hpp"
#include "tests/model/cnn_stacks.hpp"
#include "tests/model/step_fixture.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using mf::testing::error_of;
using mf::testing::small_model;  // LeakCNN 16 x 12, channels 4/8, dense 16, 3 classes

namespace {

onnx_export::ExportRequest request(const model::ModelConfig& m) {
  model::ParamBuffer pb(m, DType::f32, Device::cpu());
  pb.init(3);
  onnx_export::ExportRequest r;
  r.model = m;
  r.weights = model::export_torch(pb, pb.master());
  for (int c = 0; c < m.classes; ++c) r.class_names.push_back("class" + std::to_string(c));
  r.version = "test";
  r.source = "test.h5";
  return r;
}

audio::FrontendParams frontend(std::int64_t mels, std::int64_t frames) {
  audio::FrontendParams p;
  p.n_mels = mels;
  p.frames = frames;
  p.long_segments = 1;
  p.short_segments = 2;
  return p;
}

::onnx::ModelProto parsed(const onnx_export::ExportedModel& e) {
  ::onnx::ModelProto mp;
  REQUIRE(mp.ParseFromString(e.bytes));
  return mp;
}

std::vector<std::string> value_names(const google::protobuf::RepeatedPtrField<::onnx::ValueInfoProto>& v) {
  std::vector<std::string> out;
  for (const auto& x : v) out.push_back(x.name());
  return out;
}

std::string meta(const ::onnx::ModelProto& mp, const std::string& key) {
  for (const auto& p : mp.metadata_props())
    if (p.key() == key) return p.value();
  return "<none>";
}

}  // namespace

TEST_CASE("onnx export: inputs, outputs and metadata of each kind of model") {
  SUBCASE("LeakCNN with the leak head: class_probs and leak_prob, frames fixed") {
    const auto mp = parsed(onnx_export::export_onnx(request(small_model())));
    CHECK(mp.opset_import(0).version() == onnx_export::kOpset);
    CHECK(value_names(mp.graph().input()) == std::vector<std::string>{"logmel"});
    CHECK(value_names(mp.graph().output()) == std::vector<std::string>{"class_probs", "leak_prob"});
    const auto& dims = mp.graph().input(0).type().tensor_type().shape().dim();
    CHECK(dims[0].dim_param() == "batch");
    CHECK(dims[1].dim_value() == 16);
    CHECK(dims[2].dim_value() == 12);
    CHECK(meta(mp, "class_names") == R"(["class0","class1","class2"])");
    CHECK(meta(mp, "melforge.model") == "LeakCNN");
    CHECK(meta(mp, "batch_norm") == "folded into the preceding conv");
    CHECK(meta(mp, "frontend") == "<none>");
  }
  SUBCASE("a stack ending in attentive pooling: dynamic frames") {
    const auto mp = parsed(onnx_export::export_onnx(request(mf::testing::stack_a())));
    CHECK(mp.graph().input(0).type().tensor_type().shape().dim(2).dim_param() == "frames");
    CHECK(meta(mp, "melforge.model") == "CnnStack");
    CHECK(meta(mp, "input_shape") == R"({"frames":"dynamic","n_mels":16})");
  }
  SUBCASE("a metric-loss model: the embedding is the output") {
    model::ModelConfig m = small_model();
    m.loss = model::LossType::aam_softmax;
    m.embedding = 6;
    m.leak_head = false;
    const auto mp = parsed(onnx_export::export_onnx(request(m)));
    CHECK(value_names(mp.graph().output()) == std::vector<std::string>{"embedding"});
    CHECK(mp.graph().output(0).type().tensor_type().shape().dim(1).dim_value() == 6);
    onnx_export::ExportRequest r = request(m);
    r.frontend = frontend(16, 12);
    r.with_frontend = true;
    CHECK(value_names(parsed(onnx_export::export_onnx(r)).graph().output()) ==
          std::vector<std::string>{"embedding", "file_embedding"});
  }
  SUBCASE("with the front-end: a waveform in, a segments axis out, per-file outputs, the front-end in the metadata") {
    onnx_export::ExportRequest r = request(small_model());
    r.frontend = frontend(16, 12);
    r.with_frontend = true;
    const auto mp = parsed(onnx_export::export_onnx(r));
    CHECK(value_names(mp.graph().input()) == std::vector<std::string>{"waveform"});
    const auto& out = mp.graph().output(0).type().tensor_type().shape();
    CHECK(out.dim_size() == 3);
    CHECK(out.dim(1).dim_value() == 2);  // long * short segments
    CHECK(meta(mp, "frontend").find(R"("n_mels":16)") != std::string::npos);
    // Then the per-file outputs of predict --audio: the vote's decisions as int64.
    CHECK(value_names(mp.graph().output()) == std::vector<std::string>{"class_probs", "leak_prob", "file_probs",
                                                                        "file_class", "file_leak_prob", "file_leak"});
    CHECK(mp.graph().output(3).type().tensor_type().elem_type() == ::onnx::TensorProto::INT64);
    CHECK(meta(mp, "file_leak_threshold") == "0.5");
  }
}

TEST_CASE("onnx export: errors name the tensor, layer or parameter, and return no model") {
  SUBCASE("a missing tensor") {
    onnx_export::ExportRequest r = request(small_model());
    const auto it = std::find_if(r.weights.begin(), r.weights.end(), [](const auto& a) { return a.name == "fc.weight"; });
    REQUIRE(it != r.weights.end());
    r.weights.erase(it);
    CHECK(error_of([&] { onnx_export::export_onnx(r); }) == "ONNX export: the model has no tensor 'fc.weight'");
  }
  SUBCASE("a tensor of another shape") {
    onnx_export::ExportRequest r = request(mf::testing::stack_a());
    r.weights[0].shape[0] += 1;
    const std::string e = error_of([&] { onnx_export::export_onnx(r); });
    CHECK_MESSAGE(e.find("'" + r.weights[0].name + "'") != std::string::npos, e);
  }
  SUBCASE("a layer type with no ONNX mapping") {
    model::ModelConfig m = mf::testing::stack_a();
    onnx_export::ExportRequest r = request(m);
    r.model.layers[1].type = model::LayerType(99);
    const std::string e = error_of([&] { onnx_export::export_onnx(r); });
    CHECK_MESSAGE(e.find("ONNX export: model.layers[1] has a layer type (99) with no ONNX mapping") == 0, e);
  }
  SUBCASE("--with-frontend without a front-end, or one of other mels") {
    onnx_export::ExportRequest r = request(small_model());
    r.with_frontend = true;
    CHECK(error_of([&] { onnx_export::export_onnx(r); }).find("does not record the front-end") != std::string::npos);
    r.frontend = frontend(20, 12);
    CHECK(error_of([&] { onnx_export::export_onnx(r); }) ==
          "ONNX export --with-frontend: the front-end makes 20 mels x 12 frames, but the model takes 16 x 12");
  }
}
