// `melforge export`: a checkpoint's model for other runtimes. safetensors
// (PyTorch's names and layouts, for bench/leakcnn_torch.py and
// bench/cnn_stack_torch.py) or ONNX (onnx/export_model.hpp: the graph, its
// weights and the optional log-mel front-end, for ONNX Runtime and others).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "engine/atomic_file.hpp"
#include "engine/error.hpp"
#include "model/safetensors.hpp"
#include "model/torch_layout.hpp"
#include "onnx/export_model.hpp"
#include "tools/build_info.hpp"
#include "tools/cli_help.hpp"
#include "tools/commands.hpp"
#include "train/load_model.hpp"
#include "train/predict_audio.hpp"
#include "train/run_setup.hpp"

namespace mf::cli {

namespace {

using nlohmann::json;

struct ExportArgs {
  std::string checkpoint, format = "safetensors", out, dtype = "f32";
  bool with_frontend = false;
  double threshold = -1;  // < 0: the checkpoint's eval.threshold
  std::vector<std::string> sets;
};

void export_safetensors(const ExportArgs& a, const train::LoadedModel& lm) {
  const auto arrays = model::export_torch(lm.ts->params(), lm.ts->params().master());
  const DType t = parse_dtype(a.dtype);
  model::SafeTensors st;
  for (const auto& na : arrays) st.add(na.name, model::HostArray::from_floats(na.values, na.shape, t));
  const model::ModelConfig& m = lm.model;
  // model_args: LeakCNN's constructor arguments (bench/leakcnn_torch.py), or
  // a CNN stack's description (bench/cnn_stack_torch.py's CnnStack(desc)).
  const bool stack = m.arch == model::Arch::cnn;
  st.metadata = {{"format", "pt"},
                 {"producer", fmt::format("melforge {}", build_info::version())},
                 {"model", stack ? "CnnStack" : "LeakCNN"},
                 {"model_args", stack ? model::cnn_description_json(m)
                                      : json{{"in_mels", m.in_mels}, {"in_frames", m.in_frames},
                                             {"channels", m.channels}, {"pools", m.pools}, {"kernel", m.kernel},
                                             {"dense", m.dense}, {"dropout", m.dropout}, {"classes", m.classes},
                                             {"leak_head", m.leak_head}}
                                            .dump()},
                 {"class_names", json(lm.class_names).dump()},
                 {"step", std::to_string(lm.step)},
                 {"source", a.checkpoint}};
  model::write_safetensors(a.out, st);
  fmt::print("melforge export: {} tensors ({} parameters, {}) from {} (step {}) to {}\n", arrays.size(),
             lm.ts->params().count(), a.dtype, a.checkpoint, lm.step, a.out);
}

void export_onnx(const ExportArgs& a, const train::LoadedModel& lm) {
  MF_CHECK(a.dtype == "f32", "export --format onnx: --dtype {}: the ONNX model is float32 (use --dtype f32)", a.dtype);
  onnx_export::ExportRequest r;
  r.model = lm.model;
  r.weights = model::export_torch(lm.ts->params(), lm.ts->params().master());
  r.class_names = lm.class_names;
  r.with_frontend = a.with_frontend;
  r.threshold = float(a.threshold >= 0 ? a.threshold : lm.cfg.threshold);
  if (a.with_frontend)
    r.frontend = train::predict_frontend(lm.cfg, a.sets, lm.model.in_mels, lm.model.in_frames);
  else if (lm.cfg.fe_sample_rate > 0)
    r.frontend = train::frontend_of(lm.cfg);
  r.version = std::string(build_info::version());
  r.source = a.checkpoint;
  r.step = lm.step;
  const onnx_export::ExportedModel m = onnx_export::export_onnx(r);
  write_text_atomic(a.out, m.bytes);
  fmt::print("melforge export: ONNX opset {}, {} nodes, {} constants ({} parameters) from {} (step {}) to {}\n",
             onnx_export::kOpset, m.nodes, m.initializers, lm.ts->params().count(), a.checkpoint, lm.step, a.out);
  for (const auto& in : m.inputs) fmt::print("  input   {}\n", in);
  for (const auto& out : m.outputs) fmt::print("  output  {}\n", out);
}

}  // namespace

void register_export(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "export", "Export a checkpoint's model: .safetensors for PyTorch (state_dict names) or .onnx for ONNX Runtime "
                "and other runtimes (docs/onnx.md); writes --out");
  static ExportArgs a;
  cmd->add_option("--checkpoint", a.checkpoint, "Checkpoint (.h5) written by melforge train")
      ->required()
      ->type_name("PATH");
  checked_one_of(cmd->add_option("--format", a.format, "File format (default: onnx when --out ends in .onnx)")
                     ->capture_default_str(),
                 {"safetensors", "onnx"});
  cmd->add_option("--out", a.out, "Output file (e.g. model.safetensors or model.onnx)")->required()->type_name("PATH");
  checked_one_of(cmd->add_option("--dtype", a.dtype, "Element type of the written tensors (onnx: f32)")
                     ->capture_default_str(),
                 {"f32", "bf16", "f16"});
  cmd->add_flag("--with-frontend", a.with_frontend,
                "onnx: the model takes 16 kHz (frontend.sample_rate) mono waveforms and computes the log-mels the "
                "model was trained on itself");
  cmd->add_option("--threshold", a.threshold,
                  "onnx --with-frontend: the file leak vote's threshold (default: the checkpoint's eval.threshold)")
      ->check(leak_threshold_check());
  cmd->add_option("--set", a.sets,
                  "onnx --with-frontend: frontend.KEY=VALUE when the checkpoint does not record its front-end")
      ->type_name("KEY=VALUE");
  cmd->callback([cmd] {
    // An --out that ends in .onnx is an ONNX file unless --format says otherwise.
    if (cmd->count("--format") == 0 && a.out.ends_with(".onnx")) a.format = "onnx";
    MF_CHECK(!a.with_frontend || a.format == "onnx", "export: --with-frontend goes with --format onnx");
    MF_CHECK(a.with_frontend || (a.sets.empty() && a.threshold < 0),
             "export: --set frontend.* and --threshold describe the waveform model: give them with --with-frontend");
    train::LoadedModel lm = train::load_model(a.checkpoint, "cpu", "fp32");
    if (a.format == "onnx") export_onnx(a, lm);
    else export_safetensors(a, lm);
  });
}

}  // namespace mf::cli
