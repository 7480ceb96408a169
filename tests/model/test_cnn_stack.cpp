// The configuration-described CNN stack (model.arch = cnn) on the CPU backend:
// the [[model.layers]] schema and its errors, the presets, the parameter
// layout, the PyTorch oracle of whole stacks (forward in train and eval mode,
// then 5 AdamW steps with batch-norm running statistics, fp32 against torch in
// float64), determinism and bit-identical resume, and a residual model that
// learns the band patterns.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/error.hpp"
#include "engine/parallel.hpp"
#include "kernels/ops.hpp"
#include "model/cnn_stack.hpp"
#include "model/run_config.hpp"
#include "model/torch_layout.hpp"
#include "model/torch_layout_lab.hpp"
#include "model/train_step.hpp"
#include "tests/kernels/tolerance.hpp"
#include "tests/model/cnn_stacks.hpp"
#include "tests/model/step_fixture.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using namespace mf::model;
using mf::testing::layers_from;
using mf::testing::stack_a;
using mf::testing::stack_b;
using mf::testing::stack_c;

namespace {

void write_floats(const std::filesystem::path& p, const std::vector<float>& v) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * 4));
}

// The heads' logits [B, C(+1)] on features f, with pb's working weights.
std::vector<float> head_logits(ParamBuffer& pb, const Tensor& f) {
  Tensor logits = Tensor::zeros({f.size(0), pb.config().head_outputs()}, DType::f32);
  ops::dense_forward(f, pb.head_weight(pb.work()), pb.head_bias(pb.work()), false, logits);
  return logits.to_floats();
}

// tests/oracle/cnn_stack_steps.py on `m`: the forward of batch 0 in train and
// eval mode, then 5 AdamW steps (the LeakCNN oracle's configuration), the
// weights and running statistics after steps 1 and 5 against torch (float64).
void check_stack_against_torch(const ModelConfig& m, const std::string& name, double tol) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("melforge_cnn_oracle_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "init");
  fs::create_directories(dir / "forward");
  TrainConfig cfg;
  cfg.model = m;
  cfg.micro_batch = 8;
  cfg.optim.lr = 3e-3f;
  cfg.optim.weight_decay = 0.05f;
  cfg.optim.max_grad_norm = 0.5f;
  cfg.optim.schedule = kernels::LrSchedule::cosine;
  cfg.optim.warmup_steps = 2;
  cfg.optim.total_steps = 6;
  cfg.optim.min_lr = 1e-4f;
  cfg.class_weights = {1.0f, 2.0f, 0.5f};
  cfg.label_smoothing = 0.1f;
  cfg.leak_loss_weight = 0.7f;
  cfg.seed = 11;
  const int steps = 5;
  const std::int64_t B = cfg.micro_batch;
  TrainStep ts(cfg, Device::cpu());
  model::write_arrays((dir / "init").string(), model::export_torch(ts.params(), ts.params().master()));
  testing::write_oracle_config((dir / "config.txt").string(), cfg, steps, B, tol);
  std::ofstream(dir / "model.json") << cnn_description_json(m) << "\n";
  {
    std::ofstream d(dir / "decay.txt");
    for (const ParamInfo& p : ts.params().params())
      if (p.decay) d << p.name << "\n";
  }
  {  // forward of batch 0 with the init weights, on a copy (training mode updates statistics)
    const auto b = testing::band_batch(B, m.in_mels, m.in_frames, 3, 100);
    const auto t = testing::to_tensors(b, B, m.in_mels, m.in_frames);
    ParamBuffer pb(m, DType::f32, Device::cpu());
    pb.init(cfg.seed);
    CnnStack stack(m, B, DType::f32, Device::cpu());
    write_floats(dir / "forward" / "logits_eval.bin", head_logits(pb, stack.forward_eval(pb, t.x, nullptr)));
    const Tensor& f = stack.forward(pb, t.x, DropoutContext{}, nullptr);
    write_floats(dir / "forward" / "logits.bin", head_logits(pb, f));
  }
  for (int s = 0; s < steps; ++s) {
    const auto b = testing::band_batch(B, m.in_mels, m.in_frames, 3, 100 + std::uint64_t(s));
    {
      std::ofstream f(dir / ("batch" + std::to_string(s) + ".bin"), std::ios::binary);
      f.write(reinterpret_cast<const char*>(b.x.data()), std::streamsize(b.x.size() * 4));
      f.write(reinterpret_cast<const char*>(b.labels.data()), std::streamsize(b.labels.size() * 4));
      f.write(reinterpret_cast<const char*>(b.leak.data()), std::streamsize(b.leak.size() * 4));
    }
    const auto t = testing::to_tensors(b, B, m.in_mels, m.in_frames);
    ts.step(t.x, t.labels, t.leak, nullptr);
    const StepMetrics sm = ts.read_metrics(nullptr);
    MESSAGE(name << " step " << s + 1 << ": melforge loss " << sm.loss << " grad norm " << sm.grad_norm);
    if (s + 1 == 1 || s + 1 == steps) {
      const fs::path out = dir / ("after" + std::to_string(s + 1));
      fs::create_directories(out);
      model::write_arrays(out.string(), model::export_torch(ts.params(), ts.params().master()));
    }
  }
  CHECK(testing::run_oracle("cnn_stack_steps.py", dir.string()) == 0);
  fs::remove_all(dir);
}

std::vector<float> run_steps(const TrainConfig& cfg, int steps, std::uint64_t data_seed) {
  TrainStep ts(cfg, Device::cpu());
  const std::int64_t B = ts.batch();
  for (int s = 0; s < steps; ++s) {
    const auto b = testing::band_batch(B, cfg.model.in_mels, cfg.model.in_frames, 3, data_seed + std::uint64_t(s));
    const auto t = testing::to_tensors(b, B, cfg.model.in_mels, cfg.model.in_frames);
    ts.step(t.x, t.labels, t.leak, nullptr);
  }
  return ts.params().master().to_floats();
}

}  // namespace

TEST_CASE("model.layers: TOML tables and inline tables parse, defaults apply, and the config round-trips") {
  const ModelConfig a = stack_a();
  REQUIRE(a.layers.size() == 6);
  CHECK(a.layers[0].type == LayerType::conv);
  CHECK(a.layers[0].k == 3);
  CHECK(a.layers[0].batch_norm);
  CHECK_FALSE(a.layers[0].bias);  // no bias by default with batch norm
  CHECK(a.layers[3].bias);
  CHECK(a.layers[1].se == 4);
  CHECK(a.layers[4].stats);
  CHECK(a.layers[5].relu);
  const ModelConfig b = stack_b();
  CHECK_FALSE(b.layers[1].relu);
  RunConfig cfg;
  cfg.arch = Arch::cnn;
  cfg.layers = a.layers;
  RunConfig back;
  load_toml_string(back, to_toml(cfg), "written");
  CHECK(back.arch == Arch::cnn);
  CHECK(back.arch_preset.empty());
  CHECK(back.layers == a.layers);
  RunConfig over;
  apply_override(over, R"(model.layers=[{type="conv", cout=4}, {type="global_avg_pool"}])");
  CHECK(over.layers.size() == 2);
  CHECK(over.layers[0].cout == 4);
}

TEST_CASE("model.layers: errors name the layer, the key and what is accepted") {
  auto err = [](const std::string& text) {
    try {
      layers_from(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(err("[[model.layers]]\ntype = \"lstm\"\n").find("model.layers[0].type: expected one of conv, residual") !=
        std::string::npos);
  CHECK(err("[[model.layers]]\ntype = \"conv\"\ncout = 8\nunits = 3\n").find("model.layers[0].units: not a key of "
                                                                           "a conv layer") != std::string::npos);
  CHECK(err("[[model.layers]]\ntype = \"conv\"\ncout = 8\nk = 4\n").find("expected an odd kernel size, found 4") !=
        std::string::npos);
  CHECK(err("[[model.layers]]\ntype = \"conv\"\ncout = 8\nstride = 3\n").find("model.layers[0].stride: expected an "
                                                                            "integer in [1, 2], found 3") !=
        std::string::npos);
  CHECK(err("[[model.layers]]\ntype = \"conv\"\n").find("model.layers[0].cout") != std::string::npos);
  CHECK(err("[[model.layers]]\ntype = \"dense\"\nunits = \"many\"\n").find("model.layers[0].units: expected an "
                                                                         "integer") != std::string::npos);
  CHECK(err("[[model.layers]]\ntype = \"dropout\"\np = 1.5\n").find("[0, 1)") != std::string::npos);
  // Shapes: a spatial layer after a flat one, a pool that does not fit.
  ModelConfig m;
  m.arch = Arch::cnn;
  m.in_mels = 8;
  m.in_frames = 8;
  m.layers = layers_from("layers = [{type = \"global_avg_pool\"}, {type = \"conv\", cout = 4}]\n");
  CHECK_THROWS_WITH_AS(m.validate(), doctest::Contains("model.layers[1] (conv): needs a spatial input"), Error);
  m.layers = layers_from("layers = [{type = \"conv\", cout = 4, stride = 2, pool = 5}]\n");
  CHECK_THROWS_WITH_AS(m.validate(), doctest::Contains("pool 5 does not fit the conv output 4 x 4"), Error);
  // arch and layers must agree.
  RunConfig cfg;
  cfg.train_path = "t.h5";
  apply_override(cfg, "model.arch=cnn");
  CHECK_THROWS_WITH_AS(validate(cfg), doctest::Contains("model.arch = cnn needs its layers"), Error);
  apply_override(cfg, "model.arch=resnet34se-light");
  CHECK(cfg.arch == Arch::cnn);
  CHECK(cfg.arch_preset == "resnet34se-light");
  cfg.layers = stack_c().layers;
  CHECK_THROWS_WITH_AS(validate(cfg),
                       doctest::Contains("only model.arch = cnn takes layers; model.arch = resnet34se-light"), Error);
  // An unknown word is refused where it is read, naming the choices.
  CHECK_THROWS_WITH_AS(apply_override(cfg, "model.arch=resnet"),
                       doctest::Contains("model.arch: expected one of leakcnn, cnn, resnet34se-light, found 'resnet'"),
                       Error);
}

TEST_CASE("resnet34se-light: ResNetSE34L's stages, SE, attentive pooling and a 512-wide embedding") {
  ModelConfig m;
  m.arch = Arch::cnn;
  m.layers = cnn_preset("resnet34se-light");
  m.in_mels = 40;
  m.in_frames = 200;
  m.classes = 10;
  m.leak_head = false;
  m.validate();
  CHECK(m.layers.size() == 1 + 3 + 4 + 6 + 3 + 2);
  const auto shapes = cnn_shapes(m.layers, 40, 200);
  CHECK(shapes[0].h == 20);  // the stride-2 stem
  CHECK(shapes[0].w == 100);
  CHECK(shapes[16].c == 128);
  CHECK(shapes[16].h == 5);
  CHECK(m.features() == 512);
  ParamBuffer pb(m, DType::f32, Device::cpu());
  CHECK(pb.info("layers.4.conv1.weight").shape == Shape{32, 3, 3, 16});
  CHECK(pb.info("layers.4.downsample.0.weight").torch_shape == Shape{32, 16, 1, 1});
  CHECK(pb.info("layers.1.se.fc1.weight").shape == Shape{2, 16});
  CHECK(pb.info("layers.17.attention").torch_shape == Shape{128, 1});
  CHECK(pb.info("layers.18.fc.weight").shape == Shape{512, 128});
  // ~1.4M parameters like ResNetSE34L (trainable ones; running statistics excluded).
  std::int64_t trainable = 0;
  for (const ParamInfo& p : pb.params())
    if (param_trainable(p.kind)) trainable += p.numel;
  MESSAGE("resnet34se-light: " << trainable << " trainable parameters");
  CHECK(trainable > 1'300'000);
  CHECK(trainable < 1'600'000);
}

TEST_CASE("ParamBuffer of a stack: decayed weights first, then biases and batch norm, then running statistics") {
  const ModelConfig m = stack_a();
  ParamBuffer pb(m, DType::bf16, Device::cpu());
  int group = 0;
  for (const ParamInfo& p : pb.params()) {
    const int g = param_decays(p.kind) ? 0 : param_trainable(p.kind) ? 1 : 2;
    CHECK(g >= group);
    group = g;
    CHECK(p.decay == param_decays(p.kind));
    CHECK((p.decay ? p.offset + p.numel <= pb.decay_end() : p.offset >= pb.decay_end()));
  }
  CHECK(pb.info("layers.1.downsample.1.running_var").kind == ParamKind::running_var);
  CHECK(pb.info("layers.0.bn.weight").kind == ParamKind::norm_weight);
  CHECK(pb.head_weight(pb.master()).shape() == Shape{4, 16});
  pb.init(3);
  for (float v : pb.view(pb.master(), "layers.0.bn.weight").to_floats()) CHECK(v == 1.f);
  for (float v : pb.view(pb.master(), "layers.0.bn.running_var").to_floats()) CHECK(v == 1.f);
  for (float v : pb.view(pb.master(), "layers.0.bn.running_mean").to_floats()) CHECK(v == 0.f);
}

TEST_CASE("PyTorch oracle: stacks' forward (train and eval mode) and 5 AdamW steps match torch (fp32 vs float64)") {
  check_stack_against_torch(stack_a(), "a", 1e-5);
  check_stack_against_torch(stack_b(), "b", 1e-5);
  check_stack_against_torch(stack_c(), "c", 1e-5);
}

TEST_CASE("stack determinism: same seed gives identical bits for any thread count; resume is bit-identical") {
  TrainConfig cfg;
  cfg.model = stack_a();
  cfg.model.layers.push_back(CnnLayer{LayerType::dropout});
  cfg.model.layers.back().p = 0.25f;
  cfg.micro_batch = 6;
  cfg.accum_steps = 2;
  cfg.optim.max_grad_norm = 1.f;
  cfg.seed = 5;
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    cfg.precision = p;
    const auto a = run_steps(cfg, 4, 40);
    const int threads = cpu_threads();
    set_cpu_threads(1);
    const auto c = run_steps(cfg, 4, 40);
    set_cpu_threads(threads);
    CHECK(std::memcmp(a.data(), c.data(), a.size() * 4) == 0);
    // Resume after 2 steps from the master, moments and optimizer state (the
    // running statistics travel in the master).
    TrainStep first(cfg, Device::cpu());
    const std::int64_t B = first.batch();
    auto feed = [&](TrainStep& ts, int s) {
      const auto b = testing::band_batch(B, cfg.model.in_mels, cfg.model.in_frames, 3, 40 + std::uint64_t(s));
      const auto t = testing::to_tensors(b, B, cfg.model.in_mels, cfg.model.in_frames);
      ts.step(t.x, t.labels, t.leak, nullptr);
    };
    feed(first, 0);
    feed(first, 1);
    TrainStep resumed(cfg, Device::cpu());
    resumed.load_state(first.params().master(), first.params().m(), first.params().v(), first.optimizer_state());
    feed(resumed, 2);
    feed(resumed, 3);
    const auto r = resumed.params().master().to_floats();
    CHECK(std::memcmp(a.data(), r.data(), a.size() * 4) == 0);
  }
}

TEST_CASE("convergence: a small residual stack with batch norm and SE learns band patterns on the CPU") {
  TrainConfig cfg;
  cfg.model = stack_a();
  cfg.model.in_mels = 16;
  cfg.model.in_frames = 16;
  cfg.model.classes = 4;
  cfg.micro_batch = 32;
  cfg.optim.lr = 3e-3f;
  cfg.optim.weight_decay = 0.01f;
  cfg.optim.max_grad_norm = 1.f;
  cfg.optim.schedule = kernels::LrSchedule::cosine;
  cfg.optim.warmup_steps = 5;
  cfg.optim.total_steps = 60;
  cfg.seed = 1;
  TrainStep ts(cfg, Device::cpu());
  for (int s = 0; s < cfg.optim.total_steps; ++s) {
    const auto b = testing::band_batch(32, 16, 16, 4, 1000 + std::uint64_t(s));
    const auto t = testing::to_tensors(b, 32, 16, 16);
    ts.step(t.x, t.labels, t.leak, nullptr);
  }
  const auto v = testing::band_batch(256, 16, 16, 4, 999999);
  const auto t = testing::to_tensors(v, 256, 16, 16);
  const EvalOutput e = ts.forward_eval(t.x, nullptr);  // batch norm with the running statistics
  const auto probs = e.probs.to_floats();
  int correct = 0;
  for (int i = 0; i < 256; ++i) {
    int arg = 0;
    for (int c = 1; c < 4; ++c)
      if (probs[std::size_t(i * 4 + c)] > probs[std::size_t(i * 4 + arg)]) arg = c;
    correct += arg == int(v.labels[std::size_t(i)]);
  }
  MESSAGE("held-out accuracy " << correct / 256.0);
  CHECK(correct >= 0.95 * 256);
}

TEST_CASE("forward_eval: batch norm folded into the convs = the unfolded ops (fp32 1e-6, bf16/f16 their tolerance)") {
  // Running statistics and batch-norm affines far from the init (mean 0, var
  // 1, weight 1, bias 0), so a wrong fold cannot hide.
  for (const ModelConfig& m : {stack_a(), stack_b()})
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      CAPTURE(dtype_name(t));
      ParamBuffer pb(m, t, Device::cpu());
      pb.init(5);
      std::uint64_t seed = 1;
      for (const ParamInfo& p : pb.params()) {
        const auto ends = [&](const std::string& s) { return p.name.size() >= s.size() && p.name.ends_with(s); };
        const bool bn = p.name.find(".bn") != std::string::npos || p.name.find(".downsample.1.") != std::string::npos;
        float lo = 0.f, hi = 0.f;
        if (ends("running_mean")) lo = -0.5f, hi = 0.5f;
        else if (ends("running_var")) lo = 0.2f, hi = 2.f;
        else if (bn && ends(".weight")) lo = 0.5f, hi = 1.5f;
        else if (bn && ends(".bias")) lo = -0.3f, hi = 0.3f;
        else continue;
        const std::vector<float> v = testing::random_floats(std::size_t(p.numel), seed++, lo, hi);
        std::memcpy(pb.view(pb.master(), p.name).data<float>(), v.data(), v.size() * 4);
      }
      pb.refresh_work();
      const std::int64_t B = 3;
      const auto b = testing::band_batch(B, m.in_mels, m.in_frames, 3, 7);
      const auto x = testing::to_tensors(b, B, m.in_mels, m.in_frames).x;
      const Tensor xt = t == DType::f32 ? x : Tensor::from_floats(x.to_floats(), x.shape(), t, x.layout());
      CnnStack stack(m, B, t, Device::cpu());
      const std::vector<float> folded = stack.forward_eval(pb, xt, nullptr).to_floats();
      stack.set_fold_batch_norm(false);
      const std::vector<float> plain = stack.forward_eval(pb, xt, nullptr).to_floats();
      const double err = testing::rel_l2(folded, plain);
      MESSAGE(dtype_name(t) << ": folded vs unfolded rel L2 " << err);
      CHECK(err <= (t == DType::f32 ? 1e-6 : testing::rel_l2_tolerance(t)));
      CHECK(err > 0.0);  // the fold ran: the two paths round differently
    }
}
