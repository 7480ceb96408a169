#include "onnx/export_model.hpp"

#include <onnx/checker.h>
#include <onnx/shape_inference/implementation.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "engine/error.hpp"
#include "onnx/export_parts.hpp"

namespace mf::onnx_export {

namespace {

using json = nlohmann::json;
using I64s = std::vector<std::int64_t>;

// Whether the frames axis can be dynamic: a stack whose features do not
// depend on the frames (it ends in global or attentive pooling).
bool dynamic_frames(const model::ModelConfig& m) {
  return m.arch == model::Arch::cnn && m.takes_frames(m.in_frames + 1) && m.takes_frames(2 * m.in_frames);
}

// The log-mel model from `x` ([N, 1, mels, frames]) to the features the heads read.
Activation emit_features(GraphBuilder& g, const model::ModelConfig& m, const TorchWeights& w, Activation x) {
  if (m.arch == model::Arch::leakcnn) {
    x = emit_leakcnn_trunk(g, m, w, x);
  } else {
    for (std::size_t i = 0; i < m.layers.size(); ++i) x = emit_stack_layer(g, m.layers[i], int(i), w, x);
    x = flatten_nhwc(g, x, "features");
  }
  if (m.embedding > 0) x = emit_linear(g, "embedding", w, x, m.embedding, false);
  return x;
}

struct HeadOutputs {
  std::vector<std::string> names;                // computed values, [N*, K] or [N*]
  std::vector<std::int64_t> widths;              // K, or 0 for [N*]
};

HeadOutputs emit_heads(GraphBuilder& g, const model::ModelConfig& m, const TorchWeights& w, const Activation& f) {
  HeadOutputs h;
  if (m.class_head()) {
    const Activation logits = emit_linear(g, "class_head", w, f, m.classes, false);
    h.names.push_back(g.node("Softmax", {logits.name}, "class_probs.rows", {{"axis", std::int64_t(1)}}));
    h.widths.push_back(m.classes);
    if (m.leak_head) {
      const Activation leak = emit_linear(g, "leak_head", w, f, 1, false);
      const std::string p = g.node("Sigmoid", {leak.name}, "leak_prob.column");
      h.names.push_back(g.node("Squeeze", {p, g.ints("leak_prob.axis", {1})}, "leak_prob.rows"));
      h.widths.push_back(0);
    }
  }
  // The embedding: metric-loss models' (softmaxproto's too: `embed` and
  // `verify` read it beside its class head) and any embedding layer's.
  if (m.loss != model::LossType::softmax || m.embedding > 0) {
    h.names.push_back(g.node("Identity", {f.name}, "embedding.rows"));
    h.widths.push_back(f.c);
  }
  return h;
}

// The output's public name: "class_probs.rows" -> "class_probs".
std::string public_name(const std::string& rows) { return rows.substr(0, rows.find('.')); }

std::string dims_text(const I64s& dims, const std::vector<std::string>& names) {
  std::vector<std::string> d;
  for (std::size_t i = 0; i < dims.size(); ++i) d.push_back(dims[i] >= 0 ? std::to_string(dims[i]) : names[i]);
  return fmt::format("[{}]", fmt::join(d, ", "));
}

// Declares graph output `name` (computed already): the first dimension is the
// dynamic batch, the rest fixed; lists it in `out` as the export prints it.
void declare_output(GraphBuilder& g, ExportedModel& out, const std::string& name, const I64s& dims,
                    int elem_type = onnx::TensorProto::FLOAT) {
  std::vector<std::string> dn(dims.size(), "");
  dn[0] = "batch";
  g.output(name, dims, dn, elem_type);
  out.outputs.push_back(name + " " + dims_text(dims, dn) + (elem_type == onnx::TensorProto::INT64 ? " int64" : ""));
}

// Log-mel input: the heads' rows are the outputs.
void emit_logmel_model(GraphBuilder& g, const ExportRequest& r, const TorchWeights& w, ExportedModel& out) {
  const model::ModelConfig& m = r.model;
  const std::int64_t frames = dynamic_frames(m) ? -1 : m.in_frames;
  g.input("logmel", {-1, m.in_mels, frames}, {"batch", "", "frames"});
  out.inputs.push_back("logmel " + dims_text({-1, m.in_mels, frames}, {"batch", "", "frames"}));
  const HeadOutputs h = emit_heads(g, m, w, emit_features(g, m, w, emit_input(g, "logmel", m, frames)));
  for (std::size_t i = 0; i < h.names.size(); ++i) {
    const std::string name = g.node("Identity", {h.names[i]}, public_name(h.names[i]));
    declare_output(g, out, name, h.widths[i] ? I64s{-1, h.widths[i]} : I64s{-1});
  }
}

// Waveform input: the front-end, its frames cut into the segments the model
// was trained on (batch * segments rows), and the outputs per segment.
void emit_waveform_model(GraphBuilder& g, const ExportRequest& r, const TorchWeights& w, ExportedModel& out) {
  const model::ModelConfig& m = r.model;
  const audio::FrontendParams& p = *r.frontend;
  MF_CHECK(p.n_mels == m.in_mels && m.takes_frames(p.frames),
           "ONNX export --with-frontend: the front-end makes {} mels x {} frames, but the model takes {} x {}",
           p.n_mels, p.frames, m.in_mels, m.in_frames);
  g.input("waveform", {-1, -1}, {"batch", "samples"});
  out.inputs.push_back(fmt::format("waveform [batch, samples >= {}] at {} Hz", p.min_samples(), p.sample_rate));
  const std::string logmel = emit_frontend(g, p, "waveform");
  const std::int64_t S = p.segments(), T = p.frames;
  const std::string used = g.node("Slice", {logmel, g.ints("segments.start", {0}), g.ints("segments.end", {S * T}),
                                            g.ints("segments.axis", {2})},
                                  "segments.frames");
  const std::string split =
      g.node("Reshape", {used, g.ints("segments.split_shape", {0, m.in_mels, S, T})}, "segments.split");
  const std::string seg_major = g.node("Transpose", {split}, "segments.major", {{"perm", I64s{0, 2, 1, 3}}});
  const std::string rows =
      g.node("Reshape", {seg_major, g.ints("segments.rows_shape", {-1, m.in_mels, T})}, "segments");
  const HeadOutputs h = emit_heads(g, m, w, emit_features(g, m, w, emit_input(g, rows, m, T)));
  FileRows file_rows;
  FileShape file{p.long_segments, p.short_segments, m.classes, 0, r.threshold};
  for (std::size_t i = 0; i < h.names.size(); ++i) {
    const std::string pub = public_name(h.names[i]);
    const I64s shape = h.widths[i] ? I64s{-1, S, h.widths[i]} : I64s{-1, S};
    declare_output(g, out, g.node("Reshape", {h.names[i], g.ints(pub + ".shape", shape)}, pub), shape);
    if (pub == "class_probs") file_rows.class_probs = h.names[i];
    if (pub == "leak_prob") file_rows.leak_prob = h.names[i];
    if (pub == "embedding") file_rows.embedding = h.names[i], file.embedding = h.widths[i];
  }
  for (const GraphOutput& o : emit_file_outputs(g, file_rows, file))
    declare_output(g, out, o.name, o.dims, o.elem_type);
}

json frontend_json(const audio::FrontendParams& p) {
  return {{"sample_rate", p.sample_rate}, {"n_fft", p.n_fft}, {"hop_length", p.hop_length}, {"n_mels", p.n_mels},
          {"fmin", p.fmin}, {"fmax", p.fmax_hz()}, {"frames", p.frames}, {"long_segments", p.long_segments},
          {"short_segments", p.short_segments}, {"window", "hann (periodic)"}, {"center", "zeros"},
          {"mel", "slaney, norm slaney"}, {"power", 2.0}, {"db", "10*log10(max(S, 1e-10))"}};
}

void add_metadata(onnx::ModelProto& mp, const ExportRequest& r, const ExportedModel& out) {
  auto add = [&](const std::string& k, const std::string& v) {
    auto* e = mp.add_metadata_props();
    e->set_key(k);
    e->set_value(v);
  };
  add("melforge.version", r.version);
  add("melforge.checkpoint", r.source);
  add("melforge.step", std::to_string(r.step));
  add("melforge.model", r.model.arch == model::Arch::cnn ? "CnnStack" : "LeakCNN");
  add("melforge.model_config", r.model.str());
  add("class_names", json(r.class_names).dump());
  add("inputs", json(out.inputs).dump());
  add("outputs", json(out.outputs).dump());
  add("input_shape", json{{"n_mels", r.model.in_mels}, {"frames", dynamic_frames(r.model) ? json("dynamic")
                                                                                           : json(r.model.in_frames)}}
                         .dump());
  if (r.frontend) add("frontend", frontend_json(*r.frontend).dump());
  if (r.with_frontend && r.model.class_head() && r.model.leak_head)
    add("file_leak_threshold", fmt::format("{}", r.threshold));  // file_leak's (eval.threshold)
  add("batch_norm", "folded into the preceding conv");
}

// ONNX's own checks, as onnx.checker.check_model(full_check=True) runs them.
void check(onnx::ModelProto& mp) {
  try {
    onnx::checker::check_model(mp);
    onnx::ShapeInferenceOptions strict(/*check_type=*/true, /*error_mode=*/1, /*data_prop=*/false);
    onnx::shape_inference::InferShapes(mp, onnx::OpSchemaRegistry::Instance(), strict);
  } catch (const std::exception& e) {
    MF_THROW("ONNX export: the graph fails ONNX's checker (a melforge defect; nothing was written): {}", e.what());
  }
}

}  // namespace

ExportedModel export_onnx(const ExportRequest& r) {
  r.model.validate();
  MF_CHECK(!r.with_frontend || r.frontend,
           "ONNX export --with-frontend: the checkpoint does not record the front-end its training data was made "
           "with (data built outside melforge data build); give it with --set frontend.sample_rate=... etc.");
  if (r.frontend) r.frontend->validate();
  onnx::ModelProto mp;
  mp.set_ir_version(kIrVersion);
  mp.set_producer_name("melforge");
  mp.set_producer_version(r.version);
  mp.set_doc_string(fmt::format("melforge model exported from {} (step {})", r.source, r.step));
  auto* opset = mp.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  auto* graph = mp.mutable_graph();
  graph->set_name(r.model.arch == model::Arch::cnn ? "melforge_cnn_stack" : "melforge_leakcnn");
  GraphBuilder g(*graph);
  const TorchWeights w(r.weights);
  ExportedModel out;
  if (r.with_frontend) emit_waveform_model(g, r, w, out);
  else emit_logmel_model(g, r, w, out);
  add_metadata(mp, r, out);
  // One protobuf message holds at most 2 GiB; ONNX's external-data files are not written.
  MF_CHECK(mp.ByteSizeLong() < (std::size_t(1) << 31),
           "ONNX export: the model is {:.2f} GB; a single .onnx file holds at most 2 GB (ONNX's protobuf limit)",
           double(mp.ByteSizeLong()) / 1e9);
  check(mp);
  out.nodes = graph->node_size();
  out.initializers = graph->initializer_size();
  MF_CHECK(mp.SerializeToString(&out.bytes), "ONNX export: protobuf could not serialise the model");
  return out;
}

}  // namespace mf::onnx_export
