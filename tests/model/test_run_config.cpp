// RunConfig: TOML loading, --set overrides, validation messages, round trip.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "engine/error.hpp"
#include "tests/support/testing.hpp"
#include "model/run_config.hpp"

using namespace mf::model;

using mf::testing::error_of;

TEST_CASE("TOML sections set the keys they name, and only those") {
  RunConfig c;
  load_toml_string(c, R"(
[data]
train = "a.h5"
val = "b.h5"
[optim]
lr = 3e-4
weight_decay = 0      # an integer where a float is wanted is fine
[model]
channels = [16, 32]
pools = [2, 2]
[train]
fast_dev_run = true
)", "run.toml");
  CHECK(c.train_path == "a.h5");
  CHECK(c.val_path == "b.h5");
  CHECK(c.lr == doctest::Approx(3e-4));
  CHECK(c.weight_decay == 0.0);
  CHECK(c.channels == std::vector<std::int64_t>{16, 32});
  CHECK(c.fast_dev_run);
  CHECK(c.epochs == RunConfig{}.epochs);
  validate(c);
}

TEST_CASE("a renamed key still reads under its old name; to_toml writes the new one") {
  RunConfig c;
  load_toml_string(c, "[eval]\nval_every = 3\n", "old-run/config.toml");  // eval.every's name before
  CHECK(c.val_every == 3);
  apply_override(c, "eval.every=4");
  CHECK(c.val_every == 4);
  apply_override(c, "data.crop_frames=200");
  const std::string text = to_toml(c);
  CHECK(text.find("every = 4") != std::string::npos);
  CHECK(text.find("val_every") == std::string::npos);
  CHECK(text.find("crop_frames = 200") != std::string::npos);
}

TEST_CASE("unknown keys get a did-you-mean") {
  RunConfig c;
  CHECK(error_of([&] { load_toml_string(c, "[optim]\nlearning_rat = 1\n", "x.toml"); }).find("unknown") !=
        std::string::npos);
  const std::string e1 = error_of([&] { apply_override(c, "train.lr=0.1"); });
  CHECK(e1.find("unknown configuration key 'train.lr'") != std::string::npos);
  CHECK(e1.find("did you mean optim.lr?") != std::string::npos);
  const std::string e2 = error_of([&] { apply_override(c, "train.epoch=3"); });
  CHECK(e2.find("did you mean train.epochs?") != std::string::npos);
  const std::string e3 = error_of([&] { load_toml_string(c, "[optim]\nshedule = 'linear'\n", "x.toml"); });
  CHECK(e3.find("x.toml: unknown configuration key 'optim.shedule'; did you mean optim.schedule?") !=
        std::string::npos);
  CHECK(error_of([&] { load_toml_string(c, "lr = 1\n", "x.toml"); }).find("did you mean optim.lr?") !=
        std::string::npos);
}

TEST_CASE("wrong types name the key and the expected type") {
  RunConfig c;
  const std::string e = error_of([&] { load_toml_string(c, "[train]\nepochs = \"ten\"\n", "r.toml"); });
  CHECK(e == "r.toml: train.epochs: expected integer (an integer > 0), found a string");
  const std::string e2 = error_of([&] { apply_override(c, "train.batch_size=1.5"); });
  CHECK(e2.find("train.batch_size: expected integer") != std::string::npos);
  const std::string e3 = error_of([&] { apply_override(c, "optim.lr=fast"); });
  CHECK(e3.find("optim.lr: expected float (a finite number > 0), found 'fast'") != std::string::npos);
  const std::string e4 = error_of([&] { load_toml_string(c, "[model]\nchannels = [1, 2.5]\n", "r.toml"); });
  CHECK(e4.find("model.channels: expected integer list") != std::string::npos);
  CHECK(error_of([&] { load_toml_string(c, "[train\n", "bad.toml"); }).find("bad.toml:1") != std::string::npos);
  CHECK(error_of([&] { apply_override(c, "novalue"); }).find("key=value") != std::string::npos);
}

TEST_CASE("train.batch_size takes auto (held as 0) in TOML, --set and flags, and writes it back as auto") {
  RunConfig c;
  CHECK(c.batch_size == 0);  // the default
  apply_override(c, "train.batch_size=64");
  CHECK(c.batch_size == 64);
  apply_override(c, "train.batch_size=auto");
  CHECK(c.batch_size == 0);
  set_key(c, "train.batch_size", "32");
  load_toml_string(c, "[train]\nbatch_size = \"auto\"\n", "r.toml");
  CHECK(c.batch_size == 0);
  const std::string text = to_toml(c);
  CHECK(text.find("batch_size = 'auto'") != std::string::npos);
  RunConfig back;
  back.batch_size = 7;
  load_toml_string(back, text, "resolved.toml");
  CHECK(back.batch_size == 0);
  CHECK(error_of([&] { apply_override(c, "train.batch_size=automatic"); }).find("train.batch_size") !=
        std::string::npos);
}

TEST_CASE("string keys must be UTF-8 text (config.toml is TOML): other bytes are an error naming the key") {
  RunConfig c;
  set_key(c, "data.train", "donn\xc3\xa9" "es/train.h5");  // UTF-8: fine
  CHECK_NOTHROW(validate(c));
  const std::pair<const char*, const char*> cases[] = {{"x\xee\xa3" "d.h5", "byte 0xEE at index 1"},
                                                      {"x\xc3.h5", "byte 0xC3 at index 1"},
                                                      {"\xed\xa0\x80.h5", "byte 0xED at index 0"},
                                                      {"\xc0\xaf.h5", "byte 0xC0 at index 0"}};
  for (const auto& [bad, where] : cases) {
    CAPTURE(bad);
    set_key(c, "data.train", bad);
    CHECK(error_of([&] { validate(c); }) ==
          fmt::format("data.train: expected UTF-8 text, found bytes that are not UTF-8 ({})", where));
  }
}

TEST_CASE("impossible values name the key and what is accepted") {
  auto check = [](const std::string& set, const std::string& want) {
    RunConfig c;
    c.train_path = "t.h5";
    c.val_path = "v.h5";
    // A choice key refuses an unknown word where it is read; the rest at validate.
    std::string e = error_of([&] { apply_override(c, set); });
    if (e == "<no error>") e = error_of([&] { validate(c); });
    CHECK_MESSAGE(e.find(want) != std::string::npos, set, " -> ", e);
  };
  check("train.batch_size=-1", "train.batch_size: expected auto or an integer > 0, found -1");
  check("optim.lr=-1", "optim.lr: expected a finite number > 0, found -1");
  check("train.precision=fp8", "train.precision: expected one of auto, fp32, bf16, fp16, found 'fp8'");
  check("train.device=tpu", "train.device: expected auto, cpu, cuda or cuda:N, found 'tpu'");
  check("eval.threshold=1.0", "eval.threshold: expected a number in (0, 1), found 1");
  check("model.pools=[2, 2]", "model.pools: expected a list of 3 integers >= 1");
  check("run.profile_steps=5:3", "run.profile_steps: expected empty or A:B with 0 <= A < B, found '5:3'");
  check("eval.metric=val.f1", "eval.metric: expected one of val.loss");
  check("model.dropout=1", "model.dropout: expected a number in [0, 1), found 1");
  RunConfig c;
  CHECK(error_of([&] { validate(c); }).find("data.train: a training set is required") != std::string::npos);
}

TEST_CASE("--set takes paths verbatim and parses numbers, booleans and lists") {
  RunConfig c;
  apply_override(c, "data.train=/x/y z.h5");
  apply_override(c, "train.cuda_graphs=false");
  apply_override(c, "model.channels=[8,16,32]");
  apply_override(c, "optim.lr = 2e-3");
  apply_override(c, "run.profile_steps=10:20");
  CHECK(c.train_path == "/x/y z.h5");
  CHECK_FALSE(c.cuda_graphs);
  CHECK(c.channels == std::vector<std::int64_t>{8, 16, 32});
  CHECK(c.lr == doctest::Approx(2e-3));
  CHECK(c.profile_begin() == 10);
  CHECK(c.profile_end() == 20);
}

TEST_CASE("the resolved TOML reloads to the same configuration") {
  RunConfig a;
  a.train_path = "tr.h5";
  a.val_path = "va.h5";
  a.lr = 1.2345e-4;
  a.eps = 1e-8;
  a.channels = {4, 8};
  a.pools = {2, 1};
  a.fast_dev_run = true;
  a.metric = "val.loss";
  const std::string text = to_toml(a);
  RunConfig b;
  load_toml_string(b, text, "resolved");
  CHECK(to_toml(b) == text);
  CHECK(b.lr == a.lr);
  CHECK(b.eps == a.eps);
  CHECK(b.pools == a.pools);
  CHECK_FALSE(b.metric_higher_is_better());
  CHECK(text.find("[optim]") != std::string::npos);
  // Every key is written.
  for (const auto& k : config_keys()) CHECK(text.find(k.key.substr(k.key.find('.') + 1) + " = ") != std::string::npos);
}

TEST_CASE("integers narrowed by the trainer are range-checked; huge integers convert to floats") {
  auto check = [](const std::string& set, const std::string& want) {
    RunConfig c;
    c.train_path = "t.h5";
    // A choice key refuses an unknown word where it is read; the rest at validate.
    std::string e = error_of([&] { apply_override(c, set); });
    if (e == "<no error>") e = error_of([&] { validate(c); });
    CHECK_MESSAGE(e.find(want) != std::string::npos, set, " -> ", e);
  };
  check("optim.warmup_steps=2147483648", "optim.warmup_steps: expected an integer in [0, 2147483647], found 2147483648");
  check("optim.loss_scale_window=4294967297",
        "optim.loss_scale_window: expected an integer in [1, 2147483647], found 4294967297");
  check("model.dense=2147483648", "model.dense: expected an integer in [1, 2147483647], found 2147483648");
  check("model.kernel=4294967297", "model.kernel: expected an odd integer in [1, 2147483647], found 4294967297");
  check("model.channels=[8, 4294967304, 8]", "model.channels: expected a non-empty list of integers in [1, 2147483647]");
  check("model.num_classes=4294967298", "model.num_classes: expected 0 (from the data) or an integer in [2, 2147483647]");
  check("train.batch_size=9223372036854775807", "train.batch_size: expected auto or an integer in [1, 2147483647]");
  check("data.normal_class=4294967296", "data.normal_class: expected an integer in [-1, 2147483647], found 4294967296");
  // Issue 21: a huge reader.threads ended in std::terminate when the system refused a thread.
  check("reader.threads=100000", "reader.threads: expected an integer in [1, 256], found 100000");
  check("reader.threads=0", "reader.threads: expected an integer in [1, 256], found 0");
  RunConfig ok;
  ok.train_path = "t.h5";
  apply_override(ok, "model.dense=2147483647");
  CHECK(error_of([&] { validate(ok); }) == "<no error>");
  // Above 2^53 an integer has no exact double: it still reads (rounded), not as an empty value.
  RunConfig c;
  apply_override(c, "optim.loss_scale=9007199254740993");
  CHECK(c.initial_loss_scale == doctest::Approx(9007199254740992.0));
  load_toml_string(c, "[optim]\nloss_scale = 9223372036854775807\n", "r.toml");
  CHECK(c.initial_loss_scale == doctest::Approx(9223372036854775807.0));
}

TEST_CASE("train.freeze: a string list from TOML, --set (quoted or bare words) and back; empty entries refused") {
  RunConfig c;
  CHECK(c.freeze.empty());
  apply_override(c, "train.freeze=[blocks.0, fc]");
  CHECK(c.freeze == std::vector<std::string>{"blocks.0", "fc"});
  apply_override(c, "train.freeze=[\"layers.3\", 'class_head.weight']");
  CHECK(c.freeze == std::vector<std::string>{"layers.3", "class_head.weight"});
  apply_override(c, "train.freeze=fc");
  CHECK(c.freeze == std::vector<std::string>{"fc"});
  apply_override(c, "train.freeze=[]");
  CHECK(c.freeze.empty());
  CHECK(error_of([&] { apply_override(c, "train.freeze=[a,,b]"); }).find("train.freeze: expected string list") !=
        std::string::npos);
  CHECK(error_of([&] { apply_override(c, "train.freeze=[a b]"); }).find("train.freeze: expected string list") !=
        std::string::npos);
  c.freeze = {"blocks", "fc.weight"};
  c.train_path = "tr.h5";
  const std::string text = to_toml(c);
  CHECK(text.find("\nfreeze = [") != std::string::npos);
  RunConfig b;
  load_toml_string(b, text, "resolved");
  CHECK(b.freeze == c.freeze);
  RunConfig bad;
  const std::string wrong_type = error_of([&] { load_toml_string(bad, "[train]\nfreeze = [1]\n", "t"); });
  CHECK(wrong_type.find("train.freeze: expected string list") != std::string::npos);
  bad.freeze = {""};
  bad.train_path = "tr.h5";
  CHECK(error_of([&] { validate(bad); }).find("train.freeze: expected a list of non-empty") != std::string::npos);
}
