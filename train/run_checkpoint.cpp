#include "train/run_checkpoint.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "engine/error.hpp"
#include "engine/log.hpp"
#include "engine/nvtx.hpp"
#include "model/param_buffer.hpp"
#include "train/run_setup.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace mf::train {

namespace {

std::string params_json(const model::ParamBuffer& pb) {
  json j = json::array();
  for (const auto& p : pb.params())
    j.push_back({{"name", p.name}, {"offset", p.offset}, {"numel", p.numel}, {"shape", p.shape},
                 {"torch_shape", p.torch_shape}});
  return j.dump();
}

// A layer list as JSON (model/cnn_layers.hpp's cnn_layer_json), dropout's
// probability left out: a checkpoint's weights fit a run with another p.
json layers_json(const std::vector<model::CnnLayer>& layers) {
  json j = json::array();
  for (const model::CnnLayer& l : layers) j.push_back(json::parse(model::cnn_layer_json(l)));
  return j;
}

json without_dropout_p(json layers) {
  for (json& l : layers)
    if (l.is_object() && l.value("type", "") == "dropout") l.erase("p");
  return layers;
}

// The layers a saved configuration describes: model.layers, a preset's, or
// null for LeakCNN.
json saved_layers(const model::RunConfig& saved) {
  if (saved.arch == model::Arch::leakcnn) return nullptr;
  return layers_json(saved.arch_preset.empty() ? saved.layers : model::cnn_preset(saved.arch_preset));
}

}  // namespace

model::Checkpoint make_run_checkpoint(model::TrainStep& ts, const model::RunConfig& cfg, const RunState& s,
                                      const io::ReaderState& rs, const std::vector<std::string>& class_names,
                                      int normal_class, cudaStream_t stream) {
  MF_NVTX_RANGE("checkpoint");
  if (ts.device().is_cuda()) MF_CUDA_CHECK(cudaStreamSynchronize(stream));
  model::ParamBuffer& pb = ts.params();
  model::Checkpoint c;
  c.put("master", pb.master());
  c.put("adam_m", pb.m());
  c.put("adam_v", pb.v());
  if (pb.work_dtype() != DType::f32) c.put("weights", pb.work());
  const kernels::AdamWState st = ts.optimizer_state(stream);
  c.put("adamw_state", DType::u8, {std::int64_t(sizeof(st))}, &st);
  const model::ModelConfig& mc = ts.config().model;
  c.ints = {{"step", s.step},
            {"epoch", s.epoch},
            {"step_in_epoch", s.step_in_epoch},
            {"reader_epoch", rs.epoch},
            {"reader_position", rs.position},
            {"seed", cfg.seed},
            {"samples", s.samples},
            {"best_step", s.best.step},
            {"bad_evals", s.best.bad_evals},
            {"in_mels", mc.in_mels},
            {"in_frames", mc.in_frames},
            {"classes", mc.classes},
            {"normal_class", normal_class},
            {"adamw_iteration", st.iteration},
            {"adamw_step", st.step},
            {"adamw_skipped_steps", st.skipped_steps}};
  c.floats = {{"best_metric", s.best.value},
              {"loss_scale", st.loss_scale},
              {"lr", st.lr},
              {"elapsed_s", s.elapsed_s}};
  c.strings = {{"config", model::to_toml(cfg)},
               {"precision", std::string(model::precision_name(ts.config().precision))},
               {"class_names", json(class_names).dump()},
               {"params", params_json(pb)},
               {"rng", fmt::format("seed={}; init and dropout derive from (seed, optimizer iteration), shuffling "
                                   "from (seed, epoch): no other generator state",
                                   cfg.seed)},
               {"melforge", "0.1.0"}};
  return c;
}

void restore_run_checkpoint(model::TrainStep& ts, const model::Checkpoint& c, cudaStream_t stream) {
  model::ParamBuffer& pb = ts.params();
  const std::int64_t n = pb.size();
  Tensor master = Tensor::empty({n}, DType::f32), m = Tensor::empty({n}, DType::f32), v = Tensor::empty({n}, DType::f32);
  c.read_into("master", master);
  c.read_into("adam_m", m);
  c.read_into("adam_v", v);
  const auto& a = c.array("adamw_state");
  kernels::AdamWState st;
  MF_CHECK(a.bytes.size() == sizeof(st), "checkpoint {}: adamw_state has {} bytes, this melforge expects {}", c.source,
           a.bytes.size(), sizeof(st));
  std::memcpy(&st, a.bytes.data(), sizeof(st));
  ts.load_state(master, m, v, st, stream);
}

RunState run_state_of(const model::Checkpoint& c) {
  RunState s;
  // Each range-checked: a damaged value is an error naming the entry, not a
  // failure later in the reader or the schedule.
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max(), kMaxInt = std::numeric_limits<int>::max();
  s.step = c.get_int_in("step", 0, kMax);
  s.epoch = c.get_int_in("epoch", 0, kMaxInt);
  s.step_in_epoch = c.get_int_in("step_in_epoch", 0, kMax);
  s.samples = c.get_int_in("samples", 0, kMax);
  s.best.value = c.get_float("best_metric");
  s.best.step = c.get_int_in("best_step", -1, kMax);
  s.best.bad_evals = c.get_int_in("bad_evals", 0, kMax);
  s.elapsed_s = c.get_float("elapsed_s");
  return s;
}

std::optional<model::FoundCheckpoint> find_resume_checkpoint(const model::RunConfig& cfg, const fs::path& ckpt_dir) {
  std::optional<model::FoundCheckpoint> resume;
  if (cfg.resume == "auto") {
    std::vector<std::string> skipped;  // each message names its file
    resume = model::newest_good_checkpoint(ckpt_dir, &skipped);
    MF_CHECK(resume || skipped.empty(),
             "--resume auto: none of the {} checkpoint(s) in {} reads; the newest: {}. Move them away to start a new "
             "run there, or resume from a good copy with --resume PATH", skipped.size(), ckpt_dir.string(),
             skipped.empty() ? "" : skipped.front());
    if (!resume) log_info("--resume auto: no checkpoint in {}, starting a new run", ckpt_dir.string());
  } else if (!cfg.resume.empty()) {
    fs::path p(cfg.resume);
    if (fs::is_directory(p)) {
      resume = model::newest_good_checkpoint(fs::exists(p / "checkpoints") ? p / "checkpoints" : p);
      MF_CHECK(resume.has_value(), "--resume {}: no readable checkpoint there", cfg.resume);
    } else {
      resume = model::FoundCheckpoint{p, model::read_checkpoint(p)};
    }
  }
  if (!resume && !cfg.fast_dev_run) {
    model::CheckpointDir existing(ckpt_dir, 1);
    MF_CHECK(existing.list().empty() && !fs::exists(existing.best_path()),
             "run.out {} already holds checkpoints of an earlier run: continue it with --resume auto, or choose "
             "another --out",
             cfg.out);
  }
  return resume;
}

model::RunConfig resumed_config(const model::FoundCheckpoint& found, const model::RunConfig& given,
                                const std::vector<std::string>& given_keys) {
  model::RunConfig cfg = checkpoint_config(found.checkpoint);
  for (const std::string& key : given_keys) model::copy_key(cfg, given, key);
  cfg.out = given.out;  // where the checkpoint was found
  cfg.resume = given.resume;
  return cfg;
}

std::vector<std::string> resume_differences(const model::RunConfig& saved, const model::RunConfig& now) {
  model::RunConfig a = saved, b = now;
  a.resume = b.resume = "";  // how a process started, not a setting of the run (saved by earlier melforge)
  a.out = b.out;             // the run's directory, which may have moved
  return model::config_differences(a, b);
}

void check_same_model(const model::Checkpoint& c, const model::TrainStep& ts, const std::string& what) {
  const model::ModelConfig& mc = ts.config().model;
  const std::int64_t mels = c.get_int("in_mels"), frames = c.get_int("in_frames"), classes = c.get_int("classes");
  MF_CHECK(mels == mc.in_mels && frames == mc.in_frames && classes == mc.classes,
           "{} {}: its model takes {}x{} inputs and {} classes (/ints/in_mels, /ints/in_frames, /ints/classes), this "
           "run's data {}x{} and {} classes", what, c.source, mels, frames, classes, mc.in_mels, mc.in_frames,
           mc.classes);
  const Shape& held = c.array("master").shape;
  MF_CHECK(held == Shape{ts.params().size()},
           "{} {}: /arrays/master holds {} values, this run's model has {} parameters ({} differ?)", what, c.source,
           held.size() == 1 ? fmt::format("{}", held[0]) : "shape " + shape_str(held), ts.params().size(),
           mc.arch == model::Arch::cnn ? "model.arch/layers" : "model.channels/pools/kernel/dense");
  check_same_layers(c, ts, what);
}

void check_same_layers(const model::Checkpoint& c, const model::TrainStep& ts, const std::string& what) {
  // LeakCNN against LeakCNN: the parameters' shapes say enough (unchanged).
  const model::RunConfig saved = checkpoint_config(c);
  if (ts.config().model.arch == model::Arch::cnn || saved.arch == model::Arch::cnn)
    check_same_layers(saved_layers(saved), ts, what, c.source);
}

void check_same_layers(const json& layers, const model::TrainStep& ts, const std::string& what,
                       const std::string& source) {
  const model::ModelConfig& mc = ts.config().model;
  const json ours = mc.arch == model::Arch::cnn ? without_dropout_p(layers_json(mc.layers)) : json(nullptr);
  const json theirs = without_dropout_p(layers);
  if (ours == theirs) return;
  MF_CHECK(ours.is_array() && theirs.is_array(), "{} {}: its model is {}, the configured model is {} (model.arch)",
           what, source, theirs.is_array() ? "a CNN stack" : "LeakCNN", ours.is_array() ? "a CNN stack" : "LeakCNN");
  MF_CHECK(ours.size() == theirs.size(), "{} {}: its model has {} layers, the configured model {} (model.layers)",
           what, source, theirs.size(), ours.size());
  for (std::size_t i = 0; i < ours.size(); ++i)
    MF_CHECK(ours[i] == theirs[i], "{} {}: model.layers[{}] is {} there, {} in this run's configuration", what,
             source, i, theirs[i].dump(), ours[i].dump());
}

// What a checkpoint says about its model, each value checked: a damaged or
// hand-edited file gets an error naming it, the entry, what was expected and
// what was found (never a narrowed integer or a JSON library's message).
model::Precision checkpoint_precision(const model::Checkpoint& c) {
  const std::string& p = c.get_string("precision");
  try {
    return model::parse_precision(p);
  } catch (const Error&) {
    MF_THROW("checkpoint {}: /strings/precision: expected fp32, bf16 or fp16, found '{}'", c.source, p);
  }
}

model::RunConfig checkpoint_config(const model::Checkpoint& c) {
  return model::load_saved_config(c.get_string("config"), c.source + ":/strings/config");
}

model::ModelConfig checkpoint_model(const model::Checkpoint& c, const model::RunConfig& cfg) {
  // The input and class counts are checked against plausible bounds, then the
  // parameter count they imply against /arrays/master, before anything is
  // sized from them: a damaged /ints/in_frames must not become a terabyte
  // allocation (a CNN stack's parameters need not depend on the input size).
  const std::int64_t mels = c.get_int_in("in_mels", 1, kMaxCheckpointInputSide);
  const std::int64_t frames = c.get_int_in("in_frames", 1, kMaxCheckpointInputSide);
  MF_CHECK(mels * frames <= kMaxCheckpointInputValues,
           "checkpoint {}: /ints/in_mels = {} and /ints/in_frames = {} make segments of {} values: expected at most "
           "{} (a damaged checkpoint?)", c.source, mels, frames, mels * frames, kMaxCheckpointInputValues);
  const int classes = int(c.get_int_in("classes", 1, kMaxCheckpointClasses));
  MF_CHECK(cfg.num_classes == 0 || cfg.num_classes == classes,
           "checkpoint {}: its /strings/config says model.num_classes = {}, its /ints/classes = {} (a damaged or "
           "edited checkpoint?)", c.source, cfg.num_classes, classes);
  model::ModelConfig mc;
  std::int64_t expected = 0;
  try {
    mc = model_config(cfg, mels, frames, classes);
    expected = model::param_layout(mc).size;
  } catch (const Error& e) {
    MF_THROW("checkpoint {}: the model of /ints/in_mels = {}, /ints/in_frames = {}, /ints/classes = {} and "
             "/strings/config is not valid: {}", c.source, mels, frames, classes, e.message());
  }
  const Shape& held = c.array("master").shape;
  MF_CHECK(held == Shape{expected},
           "checkpoint {}: /arrays/master holds {} values, but the model that /ints/in_mels = {}, /ints/in_frames = "
           "{}, /ints/classes = {} and /strings/config describe has {} parameters (a damaged checkpoint?)",
           c.source, held.size() == 1 ? fmt::format("{}", held[0]) : "shape " + shape_str(held), mels, frames,
           classes, expected);
  return mc;
}

std::vector<std::string> checkpoint_class_names(const model::Checkpoint& c, int classes) {
  const std::string& text = c.get_string("class_names");
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  const bool ok = j.is_array() && std::all_of(j.begin(), j.end(), [](const json& x) { return x.is_string(); });
  MF_CHECK(ok, "checkpoint {}: /strings/class_names: expected a JSON list of strings, found {}", c.source,
           j.is_discarded() ? "text that is not JSON" : fmt::format("a JSON {}", j.type_name()) +
                                                            (j.is_array() ? " holding a non-string" : ""));
  MF_CHECK(j.size() == std::size_t(classes), "checkpoint {}: /strings/class_names: expected {} names (/ints/classes), "
           "found {}", c.source, classes, j.size());
  return j.get<std::vector<std::string>>();
}

}  // namespace mf::train
