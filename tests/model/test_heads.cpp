// model.heads: the auto rule, a model without the leak head
// (parameters, loss, outputs, metrics, JSON, file vote), old configurations
// without the key, and the PyTorch oracle of the class-only training step.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "kernels/ops.hpp"
#include "model/checkpoint.hpp"
#include "model/heads.hpp"
#include "model/metrics.hpp"
#include "model/run_config.hpp"
#include "model/torch_layout.hpp"
#include "model/train_step.hpp"
#include "tests/model/step_fixture.hpp"
#include "tests/support/testing.hpp"

using namespace mf;
using namespace mf::model;
using testing::error_of;

namespace {

io::DatasetInfo info_with(std::vector<std::string> class_names, bool leak_in_file) {
  io::DatasetInfo i;
  i.class_names = std::move(class_names);
  i.num_classes = int(i.class_names.size());
  i.leak_in_file = leak_in_file;
  return i;
}

// Every key anywhere in a JSON value that mentions "leak".
std::vector<std::string> leak_keys(const nlohmann::json& j) {
  std::vector<std::string> out;
  std::function<void(const nlohmann::json&, const std::string&)> walk = [&](const nlohmann::json& v,
                                                                            const std::string& at) {
    if (v.is_object()) {
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (it.key().find("leak") != std::string::npos) out.push_back(at + "/" + it.key());
        walk(it.value(), at + "/" + it.key());
      }
    } else if (v.is_array()) {
      for (std::size_t i = 0; i < v.size(); ++i) walk(v[i], at + "/" + std::to_string(i));
    }
  };
  walk(j, "");
  return out;
}

ModelConfig class_only(int classes = 3) {
  ModelConfig m = testing::small_model(classes);
  m.leak_head = false;
  return m;
}

}  // namespace

TEST_CASE("model.heads = auto: class+leak with a leak dataset or a class named normal, class otherwise") {
  RunConfig cfg;
  CHECK(cfg.heads == Heads::automatic);
  const std::vector<std::string> digits{"zero", "one", "two"};
  CHECK(resolve_heads(cfg, info_with(digits, false)) == Heads::class_only);
  CHECK(resolve_heads(cfg, info_with({"class_0", "class_1"}, false)) == Heads::class_only);  // no class_names attribute
  CHECK(resolve_heads(cfg, info_with(digits, true)) == Heads::class_and_leak);              // /leak present
  CHECK(resolve_heads(cfg, info_with({"normal", "leak_low"}, false)) == Heads::class_and_leak);
  CHECK(resolve_heads(cfg, info_with({"pump", "Normal"}, false)) == Heads::class_and_leak);  // any case, any position
  CHECK(resolve_heads(cfg, info_with({"abnormal", "normality"}, false)) == Heads::class_only);
  RunConfig named = cfg;
  named.normal_class = 1;  // the user names the no-leak class: a leak head is wanted
  CHECK(resolve_heads(named, info_with(digits, false)) == Heads::class_and_leak);
  // An explicit value wins over the data.
  RunConfig explicit_class = cfg;
  explicit_class.heads = Heads::class_only;
  CHECK(resolve_heads(explicit_class, info_with({"normal", "leak"}, true)) == Heads::class_only);
  RunConfig explicit_both = cfg;
  explicit_both.heads = Heads::class_and_leak;
  CHECK(resolve_heads(explicit_both, info_with(digits, false)) == Heads::class_and_leak);
  // has_leak_head reads a resolved value only.
  CHECK(error_of([&] { (void)has_leak_head(cfg); }).find("model.heads") != std::string::npos);
  CHECK_FALSE(has_leak_head(explicit_class));
  CHECK(has_leak_head(explicit_both));
}

TEST_CASE("model.heads is parsed like every choice key; a leak eval.metric with class heads is an error") {
  RunConfig c;
  c.train_path = "t.h5";
  CHECK(error_of([&] { apply_override(c, "model.heads=both"); }) ==
        "model.heads: expected one of auto, class, class+leak, found 'both'");
  CHECK(c.heads == Heads::automatic);  // unchanged by the refused word
  apply_override(c, "model.heads=class");
  CHECK(error_of([&] { validate(c); }) == "<no error>");
  apply_override(c, "eval.metric=val.file.leak_auc");
  const std::string e = error_of([&] { validate(c); });
  CHECK(e.find("eval.metric: expected one of val.loss") != std::string::npos);
  CHECK(e.find("no leak head") != std::string::npos);
  CHECK(e.find("leak_auc, ") == std::string::npos);  // the offered names have no leak metric
  apply_override(c, "model.heads=class+leak");
  CHECK(error_of([&] { validate(c); }) == "<no error>");
  CHECK(metric_names(false).size() + 2 == metric_names().size());
  for (const auto& n : metric_names(false)) CHECK_FALSE(is_leak_metric(n));
  bool listed = false;
  for (const auto& k : config_keys())
    if (k.key == "model.heads") listed = k.accepted == "one of auto, class, class+leak" && !k.help.empty();
  CHECK(listed);
}

TEST_CASE("a saved configuration without model.heads (every run before the key) reads as class+leak") {
  RunConfig saved;
  saved.train_path = "t.h5";
  saved.heads = Heads::class_and_leak;
  std::string text = to_toml(saved);
  const auto at = text.find("\nheads = ");
  REQUIRE(at != std::string::npos);
  CHECK(text.substr(at, text.find('\n', at + 1) - at).find("class+leak") != std::string::npos);
  text.erase(at, text.find('\n', at + 1) - at);  // the line gone: what earlier melforge wrote
  CHECK(load_saved_config(text, "old").heads == Heads::class_and_leak);
  RunConfig plain;
  load_toml_string(plain, text, "old");
  CHECK(plain.heads == Heads::automatic);  // plain loading keeps the default: only saved configurations read as class+leak
  saved.heads = Heads::class_only;
  CHECK(load_saved_config(to_toml(saved), "new").heads == Heads::class_only);
  saved.heads = Heads::automatic;  // a trainer that never resolved it trained both heads
  CHECK(load_saved_config(to_toml(saved), "unresolved").heads == Heads::class_and_leak);

  // A checkpoint as earlier melforge wrote it: its config lacks the key, its
  // master has the leak head's parameters. The model rebuilt from it has the
  // same layout, so the weights load and evaluate as before.
  namespace fs = std::filesystem;
  const fs::path path = fs::temp_directory_path() / ("melforge_heads_old_" + std::to_string(::getpid()) + ".h5");
  TrainConfig tc;
  tc.model = testing::small_model(3);  // both heads, the only model earlier melforge built
  tc.seed = 3;
  TrainStep before(tc, Device::cpu());
  Checkpoint c;
  c.put("master", before.params().master());
  c.strings["config"] = text;
  write_checkpoint(path, c);
  const Checkpoint back = read_checkpoint(path);
  fs::remove(path);
  const RunConfig loaded = load_saved_config(back.get_string("config"), path.string());
  TrainConfig again = tc;
  again.model.leak_head = has_leak_head(loaded);
  TrainStep after(again, Device::cpu());
  REQUIRE(back.array("master").shape == Shape{after.params().size()});
  back.read_into("master", after.params().master());
  after.params().refresh_work();
  const auto b = testing::band_batch(9, 16, 12, 3, 77);
  const auto t = testing::to_tensors(b, 9, 16, 12);
  const EvalOutput x = before.forward_eval(t.x, nullptr), y = after.forward_eval(t.x, nullptr);
  CHECK(x.probs.to_floats() == y.probs.to_floats());
  CHECK(x.leak_prob.to_floats() == y.leak_prob.to_floats());
}

TEST_CASE("class heads: no leak parameters; PyTorch names without leak_head.*") {
  const ModelConfig both = testing::small_model(3), cls = class_only(3);
  ParamBuffer a(both, DType::f32, Device::cpu()), b(cls, DType::f32, Device::cpu());
  for (const auto& p : b.params()) CHECK(p.name.find("leak") == std::string::npos);
  CHECK(a.params().size() == b.params().size() + 2);
  CHECK(a.count() == b.count() + both.dense + 1);
  CHECK(b.head_weight(b.master()).shape() == Shape{3, both.dense});
  CHECK(b.head_bias(b.master()).shape() == Shape{3});
  CHECK(a.head_weight(a.master()).shape() == Shape{4, both.dense});
  CHECK(cls.head_outputs() == 3);
  CHECK(cls.str().find("heads class)") != std::string::npos);
  for (const auto& p : b.params()) {
    CHECK(p.decay == (p.kind != ParamKind::bias));
    CHECK(p.offset % 8 == 0);
  }
  b.init(5);
  for (const auto& n : export_torch(b, b.master())) CHECK(n.name.find("leak") == std::string::npos);
  CHECK_THROWS_AS(b.info("leak_head.weight"), Error);
}

TEST_CASE("class-only loss (CPU twin): the class columns of the two-head loss, no leak term, leak not read") {
  const std::int64_t B = 37;
  const int C = 4;
  const auto zf = testing::random_floats(std::size_t(B * (C + 1)), 5, -3, 3);
  std::vector<float> labels, leak, zc;
  for (std::int64_t i = 0; i < B; ++i) {
    labels.push_back(float((i * 3) % C));
    leak.push_back(float(i % 2));
    for (int c = 0; c < C; ++c) zc.push_back(zf[std::size_t(i * (C + 1) + c)]);
  }
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    kernels::ClassLeakLossArgs d;
    d.batch = B;
    d.classes = C;
    d.label_smoothing = 0.1f;
    d.class_loss_weight = 0.9f;
    d.leak_loss_weight = 1.7f;
    d.grad_scale = 0.5f;
    const float scale = 8.f;
    const Tensor lab = Tensor::from_floats(labels, {B}, DType::i32), lk = Tensor::from_floats(leak, {B});
    const Tensor cw = Tensor::from_floats(std::vector<float>{1, 2, 0.5f, 1.5f}, {C});
    const Tensor both = Tensor::from_floats(zf, {B, C + 1}, t), cls = Tensor::from_floats(zc, {B, C}, t);
    Tensor d2 = Tensor::empty({B, C + 1}, t), d1 = Tensor::empty({B, C}, t);
    Tensor s2 = Tensor::zeros({kernels::kLossSums}, DType::f32), s1 = Tensor::zeros({kernels::kLossSums}, DType::f32);
    Tensor c2 = Tensor::zeros({kernels::kLossCounts + C * C}, DType::i32);
    Tensor c1 = Tensor::zeros({kernels::kLossCounts + C * C}, DType::i32);
    Tensor l2 = Tensor::zeros({1}, DType::f32), l1 = Tensor::zeros({1}, DType::f32);
    ops::class_leak_loss(both, lab, d, d2, s2, c2, &lk, &cw, nullptr, nullptr, &scale, &l2);
    d.leak_head = false;
    ops::class_leak_loss(cls, lab, d, d1, s1, c1, nullptr, &cw, nullptr, nullptr, &scale,
                         &l1);  // no leak targets at all
    const auto g2 = d2.to_floats(), g1 = d1.to_floats();
    bool same = true;
    for (std::int64_t i = 0; i < B; ++i)
      for (int c = 0; c < C; ++c) same = same && g1[std::size_t(i * C + c)] == g2[std::size_t(i * (C + 1) + c)];
    CHECK_MESSAGE(same, dtype_name(t));
    const auto a = s2.to_floats(), b = s1.to_floats();
    CHECK(b[0] == a[0]);  // class loss
    CHECK(b[1] == 0.f);   // no leak loss
    CHECK(b[2] == doctest::Approx(0.9 * a[0]).epsilon(1e-6));
    CHECK(b[3] == 1.f);
    CHECK(l1.to_floats()[0] == b[2]);
    const auto k2 = c2.to_floats(), k1 = c1.to_floats();
    CHECK(k1[0] == B);
    CHECK(k1[1] == k2[1]);
    CHECK(k1[2] == 0);  // no leak correct count
    for (int i = 0; i < C * C; ++i) CHECK(k1[std::size_t(kernels::kLossCounts + i)] == k2[std::size_t(kernels::kLossCounts + i)]);
    // The logits' width must match the heads.
    d.leak_head = true;
    CHECK(error_of([&] { ops::class_leak_loss(cls, lab, d, d1, s1, c1, &lk, &cw, nullptr, nullptr, &scale,
                                              nullptr); }).find("leak_loss") !=
          std::string::npos);
  }
  // head_probs: the same class probabilities, no leak output.
  const Tensor both = Tensor::from_floats(zf, {B, C + 1}), cls = Tensor::from_floats(zc, {B, C});
  Tensor p2 = Tensor::empty({B, C}, DType::f32), p1 = Tensor::empty({B, C}, DType::f32);
  Tensor lp = Tensor::empty({B}, DType::f32);
  ops::head_probs(both, p2, &lp);
  ops::head_probs(cls, p1, nullptr);
  CHECK(p1.to_floats() == p2.to_floats());
}

TEST_CASE("class heads: the training step learns, forward_eval has no leak output, metrics no leak terms") {
  TrainConfig cfg;
  cfg.model = class_only(4);
  cfg.model.in_mels = 16;
  cfg.model.in_frames = 16;
  cfg.micro_batch = 16;
  cfg.accum_steps = 2;
  cfg.optim.lr = 3e-3f;
  cfg.optim.total_steps = 60;
  cfg.seed = 2;
  TrainStep ts(cfg, Device::cpu());
  StepMetrics first, last;
  for (int s = 0; s < 60; ++s) {
    const auto b = testing::band_batch(32, 16, 16, 4, 500 + std::uint64_t(s));
    const auto t = testing::to_tensors(b, 32, 16, 16);
    ts.step(t.x, t.labels, t.leak, nullptr);
    if (s == 0) first = ts.read_metrics(nullptr);
    if (s % 20 == 19) last = ts.read_metrics(nullptr);
  }
  CHECK_FALSE(last.has_leak);
  CHECK(last.leak_loss == 0);
  CHECK(last.leak_correct == 0);
  CHECK(last.loss == doctest::Approx(last.class_loss));
  CHECK(last.loss < 0.5 * first.loss);
  const auto v = testing::band_batch(128, 16, 16, 4, 4242);
  const auto t = testing::to_tensors(v, 128, 16, 16);
  const EvalOutput e = ts.forward_eval(t.x, nullptr);
  CHECK_FALSE(e.leak_prob.defined());
  const auto probs = e.probs.to_floats();
  int correct = 0;
  for (int i = 0; i < 128; ++i) {
    int arg = 0;
    for (int c = 1; c < 4; ++c)
      if (probs[std::size_t(i * 4 + c)] > probs[std::size_t(i * 4 + arg)]) arg = c;
    correct += arg == int(v.labels[std::size_t(i)]);
  }
  MESSAGE("class heads: loss " << first.loss << " -> " << last.loss << ", held-out accuracy " << correct / 128.0);
  CHECK(correct >= 0.9 * 128);
}

TEST_CASE("class heads: metrics, file vote and JSON have no leak anywhere; a leak metric is a clear error") {
  // 3 files x 2 long x 2 short segments, 2 classes.
  const std::int64_t F = 3, L = 2, S = 2, N = F * L * S;
  const int C = 2;
  SegmentOutputs so;
  so.classes = C;
  so.has_leak = false;
  for (std::int64_t i = 0; i < N; ++i) {
    const float p = (i % 3 == 0) ? 0.8f : 0.3f;
    so.class_probs.push_back(1 - p);
    so.class_probs.push_back(p);
    so.labels.push_back(std::int32_t((i / (L * S)) % 2));
  }
  const ClassMetrics seg = segment_metrics(so, 0.5);
  CHECK_FALSE(seg.has_leak);
  CHECK(seg.count == N);
  CHECK(std::isnan(seg.leak_auc));
  const ClassMetrics direct = compute_metrics(so.labels, std::vector<std::int32_t>(std::size_t(N), 1), C);
  CHECK_FALSE(direct.has_leak);
  CHECK(direct.accuracy == doctest::Approx(4.0 / 12));
  // mean_loss: CE alone.
  double ce = 0;
  for (std::int64_t i = 0; i < N; ++i) ce -= std::log(double(so.class_probs[std::size_t(i * C + so.labels[std::size_t(i)])]));
  CHECK(mean_loss(so, 1.0, 5.0) == doctest::Approx(ce / double(N)));

  const Tensor cls = Tensor::from_floats(so.class_probs, {N, C});
  const FileVote v = vote_files(cls, Tensor(), F, L, S, 0.5, false);
  CHECK_FALSE(v.has_leak);
  CHECK(v.leak.empty());
  CHECK(v.leak_prob.empty());
  // The class vote equals the two-head vote's.
  const FileVote w = vote_files(cls, Tensor::from_floats(std::vector<float>(std::size_t(N), 0.7f), {N}), F, L, S, 0.5,
                                false);
  CHECK(v.klass == w.klass);
  CHECK(v.probs == w.probs);
  const std::vector<std::int32_t> fl{0, 1, 0};
  const ClassMetrics file = file_metrics(v, fl, {}, 0.5);
  CHECK_FALSE(file.has_leak);

  EvalResult r;
  r.loss = mean_loss(so, 1.0, 1.0);
  r.segment = seg;
  r.file = file;
  r.has_files = true;
  r.segments_per_s = 1200;
  r.files_per_s = 300;
  CHECK_FALSE(r.has_leak());
  const nlohmann::json j = to_json(r, {"yes", "no"});
  CHECK(leak_keys(j).empty());
  CHECK(j.dump().find("leak") == std::string::npos);
  CHECK(j.contains("files_per_s"));
  CHECK(j.contains("segments_per_s"));
  CHECK_FALSE(j.contains("vote_files_per_s"));
  CHECK(std::isfinite(metric_value(r, "val.file.macro_f1")));
  const std::string e = error_of([&] { (void)metric_value(r, "val.file.leak_auc"); });
  CHECK(e.find("val.file.leak_auc") != std::string::npos);
  CHECK(e.find("model.heads = class") != std::string::npos);

  // With the leak head the same JSON has its "leak" objects.
  SegmentOutputs both = so;
  both.has_leak = true;
  both.leak_probs.assign(std::size_t(N), 0.6f);
  for (std::int64_t i = 0; i < N; ++i) both.leak_labels.push_back(std::int32_t(i % 2));
  EvalResult rb;
  rb.segment = segment_metrics(both, 0.5);
  CHECK(rb.has_leak());
  CHECK(to_json(rb).contains(nlohmann::json::json_pointer("/segment/leak/roc_auc")));
}

TEST_CASE("PyTorch oracle, class heads: 1 and 5 AdamW steps of the CPU backend match torch (fp32 vs float64)") {
  // The two-head oracle's run with the class head alone: PyTorch's
  // LeakCNN(leak_head=False), CrossEntropyLoss only.
  testing::check_steps_against_torch(class_only(3), "heads");
}
