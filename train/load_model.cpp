#include "train/load_model.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
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

void init_weights_from(model::TrainStep& ts, const fs::path& path) {
  model::ParamBuffer& pb = ts.params();
  if (path.extension() == ".h5") {
    const model::Checkpoint c = model::read_checkpoint(path);
    check_same_model(c, ts, "--init-from");
    c.read_into("master", pb.master());
  } else {
    const model::SafeTensors st = model::read_safetensors(path);
    // A stack exported by melforge carries its description: the layers must
    // match (same names and shapes can come from another stride or pool).
    const auto kind = st.metadata.find("model"), args = st.metadata.find("model_args");
    if (kind != st.metadata.end() && kind->second == "CnnStack" && args != st.metadata.end()) {
      const nlohmann::json desc = nlohmann::json::parse(args->second, nullptr, /*allow_exceptions=*/false);
      MF_CHECK(desc.is_object() && desc.contains("layers"),
               "--init-from {}: metadata model_args is not a CNN stack description", path.string());
      check_same_layers(desc["layers"], ts, "--init-from", path.string());
    }
    std::vector<model::NamedArray> arrays;
    for (const auto& p : pb.params()) {
      const model::SafeTensor& t = st.at(p.name);
      MF_CHECK(t.shape == p.torch_shape, "{}: tensor '{}' has shape {}, the model expects {}", path.string(), p.name,
               shape_str(t.shape), shape_str(p.torch_shape));
      model::NamedArray a{p.name, t.shape, t.to_floats(fmt::format("{}: tensor '{}'", path.string(), p.name))};
      arrays.push_back(std::move(a));
    }
    model::import_torch(pb, pb.master(), arrays);
  }
  pb.refresh_work();
  // refresh_work ran on the legacy default stream; the step runs on a
  // non-blocking stream that does not wait for it.
  if (pb.device().is_cuda()) MF_CUDA_CHECK(cudaDeviceSynchronize());
}

LoadedModel load_model(const fs::path& checkpoint, const std::string& device, const std::string& precision,
                       cudaStream_t stream) {
  const model::Checkpoint c = model::read_checkpoint(checkpoint);
  LoadedModel lm;
  lm.cfg = model::load_saved_config(c.get_string("config"), checkpoint.string() + ":/strings/config");
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
  io::DatasetNames names = dataset_names(lm.cfg);
  // A classifier's data has the checkpoint's classes, matched by name; an
  // embedding model's is other speakers (scored by trials).
  if (lm.model.loss == model::LossType::softmax) names.classes = lm.class_names;
  auto ds = io::Dataset::open(path, names);  // its errors name the file
  const auto& info = ds->info();
  MF_CHECK(info.n_mels == lm.model.in_mels && info.frames == lm.model.in_frames,
           "{}: segments are {}x{}, the model takes {}x{}", what, info.n_mels, info.frames, lm.model.in_mels,
           lm.model.in_frames);
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
