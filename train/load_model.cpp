#include "train/load_model.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "engine/error.hpp"
#include "engine/log.hpp"
#include "model/checkpoint.hpp"
#include "model/safetensors.hpp"
#include "model/torch_layout.hpp"
#include "train/run_checkpoint.hpp"
#include "train/run_setup.hpp"

namespace fs = std::filesystem;

namespace mf::train {

namespace {

// The source's parameters in PyTorch's names, shapes and layouts: a
// checkpoint's master weights (its own model rebuilt from its configuration,
// which may have other classes) or every tensor of a .safetensors file; the
// layers of a CNN stack must be this run's (same names and shapes can come
// from another stride or pool).
std::vector<model::NamedArray> source_arrays(const model::TrainStep& ts, const fs::path& path) {
  if (path.extension() == ".h5") {
    const model::Checkpoint c = model::read_checkpoint(path);
    check_same_layers(c, ts, "--init-from");
    const model::RunConfig saved = checkpoint_config(c);
    // checkpoint_model checked /arrays/master against the model it describes.
    model::ParamBuffer src(checkpoint_model(c, saved), DType::f32, Device::cpu());
    c.read_into("master", src.master());
    return model::export_torch(src, src.master());
  }
  const model::SafeTensors st = model::read_safetensors(path);
  const auto kind = st.metadata.find("model"), args = st.metadata.find("model_args");
  if (kind != st.metadata.end() && kind->second == "CnnStack" && args != st.metadata.end()) {
    const nlohmann::json desc = nlohmann::json::parse(args->second, nullptr, /*allow_exceptions=*/false);
    MF_CHECK(desc.is_object() && desc.contains("layers"),
             "--init-from {}: metadata model_args is not a CNN stack description", path.string());
    check_same_layers(desc["layers"], ts, "--init-from", path.string());
  }
  std::vector<model::NamedArray> out;
  for (const std::string& name : st.order) {
    const model::HostArray& t = st.at(name);
    out.push_back({name, t.shape, t.to_floats(fmt::format("{}: tensor '{}'", path.string(), name))});
  }
  return out;
}

}  // namespace

InitFromReport init_weights_from(model::TrainStep& ts, const fs::path& path) {
  model::ParamBuffer& pb = ts.params();
  const std::vector<model::NamedArray> source = source_arrays(ts, path);
  // The master as initialised from the seed: what a head that is not loaded keeps.
  Tensor host = pb.master().to(Device::cpu());
  if (pb.device().is_cuda()) MF_CUDA_CHECK(cudaDeviceSynchronize());
  InitFromReport report;
  std::vector<bool> used(source.size(), false);
  for (const model::ParamInfo& p : pb.params()) {
    const auto it = std::find_if(source.begin(), source.end(), [&](const auto& a) { return a.name == p.name; });
    const bool found = it != source.end();
    if (found) used[std::size_t(it - source.begin())] = true;
    if (found && it->shape == p.torch_shape) {
      const std::vector<float> ours = model::from_torch_layout(pb.config(), p, it->values);
      std::copy(ours.begin(), ours.end(), host.data<float>() + p.offset);
      report.loaded.push_back(p.name);
      continue;
    }
    // A head follows the classes (or the loss): a new one starts from the
    // seed. The trunk must be the source's.
    const std::string why = found ? fmt::format("shape {} there, {} here", shape_str(it->shape),
                                                shape_str(p.torch_shape))
                                  : std::string("absent there");
    MF_CHECK(p.head, "--init-from {}: trunk parameter '{}' is {} (its model's layers differ from this run's: "
             "model.arch, model.layers or model.channels/pools/kernel/dense/embedding, or the input size); only "
             "the heads (class_head, leak_head, loss.*) may differ", path.string(), p.name,
             found ? fmt::format("{} there and {} here", shape_str(it->shape), shape_str(p.torch_shape))
                   : std::string("absent there"));
    report.reinitialised.push_back(fmt::format("{} ({})", p.name, why));
  }
  for (std::size_t i = 0; i < source.size(); ++i)
    if (!used[i]) report.unused.push_back(source[i].name);
  pb.master().copy_from(host);
  pb.refresh_work();
  // refresh_work ran on the legacy default stream; the step runs on a
  // non-blocking stream that does not wait for it.
  if (pb.device().is_cuda()) MF_CUDA_CHECK(cudaDeviceSynchronize());
  return report;
}

LoadedModel load_model(const fs::path& checkpoint, const std::string& device, const std::string& precision,
                       cudaStream_t stream) {
  const model::Checkpoint c = model::read_checkpoint(checkpoint);
  LoadedModel lm;
  lm.source = c.source;
  lm.cfg = checkpoint_config(c);
  try {
    model::validate(lm.cfg);  // every integer narrowed below (and by the callers) is then in range
  } catch (const Error& e) {
    MF_THROW("checkpoint {}: /strings/config: {}", c.source, e.message());
  }
  const Device dev = parse_device(device);
  set_current(dev);
  if (precision.empty())
    lm.precision = checkpoint_precision(c);
  else
    lm.precision = resolve_precision(precision == "auto" ? std::nullopt
                                                         : std::optional(model::parse_precision(precision)),
                                     dev);
  lm.model = checkpoint_model(c, lm.cfg);
  lm.class_names = checkpoint_class_names(c, lm.model.classes);
  lm.normal_class = int(c.get_int_in("normal_class", 0, lm.model.classes - 1));
  lm.step = c.get_int("step");
  model::RunConfig inf = lm.cfg;
  // The training buffers are not used (forward_eval sizes its own); the
  // prototypical losses need a micro-batch of whole class groups to build.
  inf.batch_size = inf.per_class >= 2 ? 2 * inf.per_class : 1;
  inf.grad_accum = 1;
  lm.ts = std::make_unique<model::TrainStep>(step_config(inf, lm.model, lm.precision, 1), dev, stream);
  check_same_model(c, *lm.ts, "checkpoint");
  Tensor master = Tensor::empty({lm.ts->params().size()}, DType::f32);
  c.read_into("master", master);
  lm.ts->params().master().copy_from(master, stream);
  lm.ts->params().refresh_work(stream);
  if (dev.is_cuda()) MF_CUDA_CHECK(cudaStreamSynchronize(stream));
  return lm;
}

std::shared_ptr<const io::Dataset> open_model_data(const LoadedModel& lm, const std::string& path,
                                                   const std::string& what) {
  io::DatasetNames names = eval_dataset_names(lm.cfg);
  // A classifier's data has the checkpoint's classes, matched by name; an
  // embedding model's is other speakers (scored by trials), as many as the
  // file has. Neither takes its class count from the training configuration.
  names.num_classes = 0;
  names.classes_from = "checkpoint " + lm.source;
  // The normal class is the checkpoint's (/ints/normal_class, an index into
  // its classes), whatever its saved data.normal_class says.
  names.normal_class = lm.model.loss == model::LossType::softmax ? lm.normal_class : -1;
  names.normal_class_from = fmt::format("/ints/normal_class of {}", lm.source);
  if (lm.model.loss == model::LossType::softmax) names.classes = lm.class_names;
  auto ds = io::Dataset::open(path, names);  // its errors name the file
  const auto& info = ds->info();
  MF_CHECK(info.n_mels == lm.model.in_mels && (info.ragged() || lm.model.takes_frames(info.frames)),
           "{}: segments are {}x{}, the model takes {}x{}", what, info.n_mels, info.frames, lm.model.in_mels,
           lm.model.in_frames);
  check_whole_utterance_eval(lm.model, info, what);
  if (!names.classes.empty() && info.classes_present.size() < info.class_names.size())
    log_info("{}: {} of the model's {} classes ({}), matched by name", what, info.classes_present.size(),
             info.class_names.size(), fmt::join(info.classes_present, ", "));
  return ds;
}

io::ReaderConfig inference_reader(const LoadedModel& lm, std::int64_t batch_size) {
  io::ReaderConfig rc;
  rc.batch_size = batch_size;
  rc.shuffle = false;
  rc.last_batch = io::LastBatch::pad;
  rc.threads = int(lm.cfg.reader_threads);
  rc.device = lm.ts->device();
  rc.dtype = model::activation_dtype(lm.precision);
  rc.resident = io::Residency::automatic;
  return rc;
}

}  // namespace mf::train
