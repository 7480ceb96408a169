// The training layer's reporting parts: bottleneck classification on synthetic
// timings, the peak table, the FLOP model, the system monitor, run logs, SVG
// plots, progress; and the checks load_model makes of a checkpoint.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "engine/error.hpp"
#include "model/checkpoint.hpp"
#include "model/param_buffer.hpp"
#include "model/run_config.hpp"
#include "train/perf.hpp"
#include "train/plot.hpp"
#include "train/progress.hpp"
#include "train/run_log.hpp"
#include "train/sysmon.hpp"
#include "train/load_model.hpp"
#include "train/run_checkpoint.hpp"
#include "train/run_setup.hpp"

namespace fs = std::filesystem;
using namespace mf::train;

TEST_CASE("bottleneck: input-bound suggests the GPU cache when the data fits") {
  PhaseTimes t;
  t.wall_ms = 1000;
  t.data_wait_ms = 610;
  t.forward_ms = 100;
  t.backward_ms = 200;
  t.optimizer_ms = 20;
  t.steps = 100;
  BottleneckContext c;
  c.on_gpu = true;
  c.fits_on_gpu = true;
  c.precision = mf::model::Precision::bf16;
  const Bottleneck b = classify_bottleneck(t, c);
  CHECK(b.kind == "input-bound");
  CHECK(b.input_share == doctest::Approx(0.61));
  CHECK(b.summary.find("61% of step time waiting for data") != std::string::npos);
  CHECK(b.suggestion.find("--gpu-cache") != std::string::npos);
  // Already resident and threads below the cores: raise the threads.
  c.fits_on_gpu = false;
  c.reader_threads = 2;
  c.cpu_cores = 16;
  CHECK(classify_bottleneck(t, c).suggestion.find("reader.threads=16") != std::string::npos);
}

TEST_CASE("bottleneck: compute-bound suggests bf16, then batch size, by the numbers") {
  PhaseTimes t;
  t.wall_ms = 1000;
  t.data_wait_ms = 10;
  t.forward_ms = 300;
  t.backward_ms = 550;
  t.optimizer_ms = 50;
  t.steps = 10;
  BottleneckContext c;
  c.on_gpu = true;
  c.precision = mf::model::Precision::fp32;
  Bottleneck b = classify_bottleneck(t, c);
  CHECK(b.kind == "compute-bound");
  CHECK(b.compute_share == doctest::Approx(0.9));
  CHECK(b.suggestion.find("--precision bf16") != std::string::npos);
  c.precision = mf::model::Precision::bf16;
  c.achieved_tflops = 100;
  c.peak_tflops = 989.4;
  c.batch_size = 512;
  b = classify_bottleneck(t, c);
  CHECK(b.summary.find("100.0 TFLOP/s = 10% of peak") != std::string::npos);
  CHECK(b.suggestion.find("--batch-size (now 512)") != std::string::npos);
  c.on_gpu = false;
  CHECK(classify_bottleneck(t, c).suggestion.find("--device cuda") != std::string::npos);
}

TEST_CASE("bottleneck: gaps between kernels are launch/sync-bound") {
  PhaseTimes t;
  t.wall_ms = 1000;
  t.data_wait_ms = 50;
  t.forward_ms = 100;
  t.backward_ms = 150;
  t.optimizer_ms = 50;
  t.steps = 500;
  BottleneckContext c;
  c.on_gpu = true;
  c.cuda_graphs = false;
  Bottleneck b = classify_bottleneck(t, c);
  CHECK(b.kind == "launch/sync-bound");
  CHECK(b.overhead_share == doctest::Approx(0.65));
  CHECK(b.suggestion.find("CUDA graphs") != std::string::npos);
  c.cuda_graphs = true;
  c.log_interval = 1;
  CHECK(classify_bottleneck(t, c).suggestion.find("log.interval=1") != std::string::npos);
  c.log_interval = 50;
  c.batch_size = 64;
  CHECK(classify_bottleneck(t, c).suggestion.find("--batch-size") != std::string::npos);
  CHECK(b.line().rfind("launch/sync-bound: ", 0) == 0);
}

TEST_CASE("peak table: names as CUDA reports them") {
  CHECK(peak_tflops("NVIDIA H100 80GB HBM3")->bf16 == doctest::Approx(989.4));
  CHECK(peak_tflops("NVIDIA H100 PCIe")->bf16 == doctest::Approx(756));
  CHECK(peak_tflops("NVIDIA H200")->bf16 == doctest::Approx(989.4));
  CHECK(peak_tflops("NVIDIA H200 NVL")->bf16 == doctest::Approx(835));
  CHECK(peak_tflops("NVIDIA A100-SXM4-80GB")->bf16 == doctest::Approx(312));
  CHECK(peak_tflops("NVIDIA L40S")->device == "L40S");
  CHECK(peak_tflops("NVIDIA L4")->device == "L4");
  CHECK(peak_tflops("NVIDIA GeForce RTX 4090")->bf16 == doctest::Approx(165.2));
  CHECK(peak_tflops("NVIDIA GeForce RTX 5090")->device == "RTX 5090");
  CHECK(peak_tflops("NVIDIA GH200 480GB")->device == "GH200");
  CHECK_FALSE(peak_tflops("Tesla K80").has_value());
  CHECK(peak_tflops("NVIDIA H100 80GB HBM3")->source == "vendor datasheet");
}

TEST_CASE("LeakCNN-64 FLOPs match the design guide's model") {
  const ModelFlops f = leakcnn_flops(64, 64, {32, 64, 128}, {2, 2, 2}, 3, 256, 4 + 1);  // 4 classes + leak
  CHECK(f.forward / 1e6 == doctest::Approx(82.1).epsilon(0.01));  // conv 77.9 + FC 4.2
  CHECK(f.train / 1e6 == doctest::Approx(244).epsilon(0.02));
}

TEST_CASE("system monitor: CPU and RSS from /proc; no NVML without a GPU index") {
  SystemMonitor m(-1);
  CHECK_FALSE(m.nvml_loaded());
  volatile double x = 0;
  for (int i = 0; i < 20000000; ++i) x = x + 1e-9 * i;
  const SystemSample s = m.sample();
  CHECK_FALSE(s.gpu_available);
  CHECK(s.rss_bytes > 1000000);
  CHECK(s.peak_rss_bytes >= s.rss_bytes);
  CHECK(s.cpu_pct > 1);
  CHECK(process_cpu_seconds() > 0);
  SystemMonitor g(0);  // NVML may be absent here: must not throw, and say why
  if (!g.nvml_loaded()) CHECK_FALSE(g.nvml_status().empty());
  (void)g.sample();
}

TEST_CASE("metrics.jsonl: resume drops lines after the checkpoint's step; torn lines are skipped") {
  const fs::path d = fs::temp_directory_path() / fmt::format("mf_jsonl_{}", ::getpid());
  fs::create_directories(d);
  {
    JsonlWriter w(d / "metrics.jsonl");
    for (int s = 10; s <= 50; s += 10) w.write({{"type", "train"}, {"step", s}, {"loss", 1.0 / s}});
  }
  std::ofstream(d / "metrics.jsonl", std::ios::app) << "{\"type\": \"tra";  // torn by a crash
  CHECK(read_jsonl(d / "metrics.jsonl").size() == 5);
  {
    JsonlWriter w(d / "metrics.jsonl", 30);
    w.write({{"type", "train"}, {"step", 40}, {"loss", 0.5}});
  }
  const auto lines = read_jsonl(d / "metrics.jsonl");
  REQUIRE(lines.size() == 4);
  CHECK(lines[2]["step"] == 30);
  CHECK(lines[3]["loss"] == 0.5);
  write_json_atomic(d / "report.json", {{"a", 1}});
  CHECK(read_jsonl(d / "report.json").empty());  // pretty JSON spans lines; the file exists
  CHECK(fs::exists(d / "report.json"));
  write_text_atomic(d / "config.toml", "[train]\nepochs = 3\n");
  write_text_atomic(d / "config.toml", "[train]\nepochs = 4\n");
  {
    std::ifstream in(d / "config.toml");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(text == "[train]\nepochs = 4\n");
  }
  for (const auto& e : fs::directory_iterator(d)) CHECK(e.path().filename().string().rfind(".tmp-", 0) != 0);
  // A failure is an error naming the file and the reason, never a silent empty file.
  CHECK_THROWS_WITH_AS(write_text_atomic(d / "missing" / "config.toml", "x"),
                       doctest::Contains("missing/.tmp-config.toml"), mf::Error);
  fs::remove_all(d);
}

TEST_CASE("plots: nice ticks and well-formed SVG from a run's metrics") {
  const auto u = nice_ticks(0, 1, 6);
  REQUIRE(u.size() == 6);
  for (std::size_t i = 0; i < 6; ++i) CHECK(u[i] == doctest::Approx(0.2 * double(i)));
  const auto t = nice_ticks(3, 987, 6);
  CHECK(t.front() == 200);
  CHECK(t.back() == 800);
  // A range far below the spacing of doubles at its magnitude: a few ticks, not an endless loop.
  const auto tiny = nice_ticks(1000.0, 1000.0 + 1e-13, 6);
  CHECK(tiny.size() <= 1001);
  Chart flat{"flat", "step", "loss", {Series{"loss", {1, 2}, {1000.0, 1000.0 + 1e-13}, false}}};
  CHECK(render_svg(flat).find("</svg>") != std::string::npos);
  const fs::path d = fs::temp_directory_path() / fmt::format("mf_plot_{}", ::getpid());
  fs::create_directories(d);
  {
    JsonlWriter w(d / "metrics.jsonl");
    for (int s = 1; s <= 40; ++s)
      w.write({{"type", "train"}, {"step", s}, {"loss", 2.0 / s}, {"samples_per_s", 1000 + s}, {"accuracy", 0.5}});
    for (int s = 10; s <= 40; s += 10)
      w.write({{"type", "eval"}, {"split", "val"}, {"step", s}, {"loss", 1.0 / s},
               {"segment", {{"accuracy", 0.6 + s / 100.0}}}, {"file", {{"accuracy", 0.7}, {"macro_f1", 0.65}}}});
  }
  const auto files = plot_run(d);
  REQUIRE(files.size() == 3);
  for (const auto& f : files) {
    std::ifstream in(f);
    const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(svg.rfind("<svg", 0) == 0);
    CHECK(svg.find("</svg>") != std::string::npos);
    CHECK(svg.find("<polyline") != std::string::npos);
  }
  std::ifstream acc(d / "accuracy.svg");
  const std::string a((std::istreambuf_iterator<char>(acc)), std::istreambuf_iterator<char>());
  CHECK(a.find("val file macro F1") != std::string::npos);
  CHECK_THROWS(plot_run(d / "nope"));
  fs::remove_all(d);
}

TEST_CASE("progress: the line, durations, plain mode prints per log") {
  ProgressState s;
  s.epoch = 2;
  s.epochs = 10;
  s.step_in_epoch = 50;
  s.steps_per_epoch = 100;
  s.global_step = 150;
  s.loss = 0.12345;
  s.samples_per_s = 12345.6;
  s.eta_s = 3725;
  s.gpu = true;
  s.gpu_util_pct = 97;
  s.gpu_mem_gib = 3.2;
  s.gpu_mem_total_gib = 79.6;
  CHECK(progress_line(s) ==
        "epoch 2/10 step 50/100 (global 150) loss 0.1235 | 12346 samples/s | ETA 1h02m | GPU 97% 3.2/79.6 GiB");
  CHECK(format_duration(185) == "3m05s");
  CHECK(format_duration(12.4) == "12s");
  std::FILE* f = std::tmpfile();
  {
    Progress p(mf::model::ProgressMode::automatic, f);  // not a terminal -> plain
    CHECK(p.mode() == Progress::Mode::plain);
    p.tick(s);
    p.log(s);
    p.message("eval: ok");
  }
  std::rewind(f);
  char buf[512] = {};
  const std::size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  const std::string out(buf, n);
  CHECK(out.find("epoch 2/10") != std::string::npos);
  CHECK(out.find("\r") == std::string::npos);
  CHECK(out.find("eval: ok\n") != std::string::npos);
}

// ---- what a checkpoint says about its model ---------------------------------------
// load_model (eval, predict, export) checks each value it takes from a
// checkpoint: the error names the file, the entry, what was expected and what
// was found, before any model is built.
TEST_CASE("load_model: out-of-range model entries of a checkpoint are errors naming the file and the entry") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("mf_load_model_{}", ::getpid());
  fs::create_directories(dir);
  const fs::path path = dir / "bad.h5";
  auto good = [] {
    mf::model::Checkpoint c;
    mf::model::RunConfig cfg;
    cfg.train_path = "train.h5";
    cfg.heads = mf::model::Heads::class_and_leak;  // a run records its heads resolved
    c.strings = {{"config", mf::model::to_toml(cfg)}, {"precision", "fp32"}, {"class_names", R"(["normal","leak"])"}};
    c.ints = {{"in_mels", 16}, {"in_frames", 32}, {"classes", 2}, {"normal_class", 0}, {"step", 1}};
    // The parameters of the model these entries describe (zeros: only the count matters here).
    const std::int64_t n = mf::model::param_layout(model_config(cfg, 16, 32, 2)).size;
    const std::vector<float> master(std::size_t(n), 0.f);
    c.put("master", std::span<const float>(master));
    return c;
  };
  struct Case {
    std::function<void(mf::model::Checkpoint&)> edit;
    std::string want;
  };
  const std::vector<Case> cases = {
      {[](auto& c) { c.ints["classes"] = 4294967298; },  // was narrowed to 2 by int(...)
       "/ints/classes: expected an integer in [1, 16777216], found 4294967298"},
      {[](auto& c) { c.ints["in_mels"] = -3; }, "/ints/in_mels: expected an integer in [1, 1048576], found -3"},
      {[](auto& c) { c.ints["in_frames"] = 0; }, "/ints/in_frames: expected an integer in [1, 1048576], found 0"},
      // A declared size is checked before anything is sized from it (export
      // once asked for 1 TB here).
      {[](auto& c) { c.ints["in_frames"] = 2147483647; },
       "/ints/in_frames: expected an integer in [1, 1048576], found 2147483647"},
      {[](auto& c) { c.ints["in_mels"] = 32, c.ints["in_frames"] = 1 << 20; },
       "/ints/in_mels = 32 and /ints/in_frames = 1048576 make segments of 33554432 values: expected at most 16777216"},
      {[](auto& c) { c.ints["in_frames"] = 64; },  // within bounds, but LeakCNN's fc then has other inputs
       "/arrays/master holds 355848 values, but the model that /ints/in_mels = 16, /ints/in_frames = 64, "
       "/ints/classes = 2 and /strings/config describe has 617992 parameters"},
      {[](auto& c) {
         mf::model::RunConfig cfg;
         cfg.train_path = "train.h5";
         cfg.heads = mf::model::Heads::class_and_leak;
         cfg.num_classes = 7;
         c.strings["config"] = mf::model::to_toml(cfg);
       },
       "its /strings/config says model.num_classes = 7, its /ints/classes = 2"},
      {[](auto& c) { c.ints["classes"] = 1000; }, "/ints/classes = 1000 and /strings/config is not valid: model: "
                                                  "classes (model.num_classes, or the data's) must be in [1, 256], found 1000"},
      {[](auto& c) { c.ints["normal_class"] = 2; }, "/ints/normal_class: expected an integer in [0, 1], found 2"},
      {[](auto& c) { c.strings["precision"] = ""; }, "/strings/precision: expected fp32, bf16 or fp16, found ''"},
      {[](auto& c) { c.strings["class_names"] = R"([["normal"],"leak"])"; },
       "/strings/class_names: expected a JSON list of strings, found a JSON array holding a non-string"},
      {[](auto& c) { c.strings["class_names"] = "normal,leak"; },
       "/strings/class_names: expected a JSON list of strings, found text that is not JSON"},
      {[](auto& c) { c.strings["class_names"] = R"(["normal"])"; },
       "/strings/class_names: expected 2 names (/ints/classes), found 1"},
      {[](auto& c) {
         mf::model::RunConfig cfg;
         cfg.train_path = "train.h5";
         cfg.heads = mf::model::Heads::class_and_leak;
         cfg.reader_threads = 100000;
         c.strings["config"] = mf::model::to_toml(cfg);
       },
       "/strings/config: reader.threads: expected an integer in [1, 256], found 100000"},
  };
  for (const Case& k : cases) {
    CAPTURE(k.want);
    mf::model::Checkpoint c = good();
    k.edit(c);
    mf::model::write_checkpoint(path, c);
    std::string msg = "(no error)";
    try {
      load_model(path, "cpu", "", nullptr);
    } catch (const mf::Error& e) {
      msg = e.what();
    }
    CAPTURE(msg);
    CHECK(msg.find("checkpoint " + path.string() + ": ") != std::string::npos);
    CHECK(msg.find(k.want) != std::string::npos);
  }
  fs::remove_all(dir);
}
