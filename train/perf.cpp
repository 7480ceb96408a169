#include "train/perf.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace mf::train {

const std::vector<PeakTflops>& peak_table() {
  // Dense (non-sparse) numbers from the vendors' datasheets. Order matters:
  // the first entry whose key occurs in the device name wins, so specific
  // variants come before the generic name.
  static const std::vector<PeakTflops> t = {
      {"H100 PCIe", 756.0, 51.0},
      {"H100 NVL", 835.0, 60.0},
      {"H100", 989.4, 66.9},  // SXM5 ("NVIDIA H100 80GB HBM3")
      {"H200 NVL", 835.0, 60.0},
      {"H200", 989.4, 66.9},  // SXM
      {"GH200", 989.4, 66.9},
      {"B200", 2250.0, 75.0},
      {"A100", 312.0, 19.5},
      {"A10", 125.0, 31.2},
      {"A30", 165.0, 10.3},
      {"L40S", 362.05, 91.6},
      {"L40", 181.05, 90.5},
      {"L4", 121.0, 30.3},
      {"RTX 6000 Ada", 364.25, 91.1},
      {"RTX 5090", 209.5, 104.8},
      {"RTX 4090", 165.2, 82.6},
      {"RTX 3090", 71.0, 35.6},
  };
  return t;
}

std::optional<PeakTflops> peak_tflops(std::string_view device_name) {
  auto lower = [](std::string_view s) {
    std::string o(s);
    for (char& ch : o) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    return o;
  };
  const std::string name = lower(device_name);
  for (const PeakTflops& p : peak_table()) {
    const std::string key = lower(p.device);
    // Whole-token match: "L4" must not match "L40S", "A10" not "A100".
    std::size_t pos = 0;
    while ((pos = name.find(key, pos)) != std::string::npos) {
      const std::size_t end = pos + key.size();
      const bool left = pos == 0 || !std::isalnum(static_cast<unsigned char>(name[pos - 1]));
      const bool right = end == name.size() || !std::isalnum(static_cast<unsigned char>(name[end]));
      if (left && right) return p;
      ++pos;
    }
  }
  return std::nullopt;
}

ModelFlops leakcnn_flops(std::int64_t n_mels, std::int64_t frames, const std::vector<std::int64_t>& channels,
                         const std::vector<std::int64_t>& pools, std::int64_t kernel, std::int64_t dense,
                         std::int64_t head_outputs) {
  double h = double(n_mels), w = double(frames), cin = 1, fwd = 0, first_dx = 0;
  for (std::size_t i = 0; i < channels.size(); ++i) {
    const double conv = 2.0 * h * w * cin * double(channels[i]) * double(kernel * kernel);
    if (i == 0) first_dx = conv;
    fwd += conv;
    const double p = i < pools.size() ? double(pools[i]) : 1.0;
    h = double(std::int64_t(h / p));
    w = double(std::int64_t(w / p));
    cin = double(channels[i]);
  }
  const double flat = h * w * cin;
  fwd += 2.0 * flat * double(dense) + 2.0 * double(dense) * double(head_outputs);
  return {fwd, 3.0 * fwd - first_dx};
}

ModelFlops model_flops(const model::ModelConfig& m) {
  if (m.arch == model::Arch::leakcnn) {
    const std::vector<std::int64_t> ch(m.channels.begin(), m.channels.end()), po(m.pools.begin(), m.pools.end());
    return leakcnn_flops(m.in_mels, m.in_frames, ch, po, m.kernel, m.dense, m.head_outputs());
  }
  const std::vector<model::ActShape> shapes = model::cnn_shapes(m.layers, m.in_mels, m.in_frames);
  model::ActShape in{true, m.in_mels, m.in_frames, 1};
  double fwd = 0, first_dx = 0;
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const model::CnnLayer& l = m.layers[i];
    const model::ActShape& out = shapes[i];
    const double oh = double((in.h - 1) / l.stride + 1), ow = double((in.w - 1) / l.stride + 1);
    double f = 0;
    switch (l.type) {
      case model::LayerType::conv: f = 2.0 * oh * ow * in.c * l.cout * l.k * l.k; break;
      case model::LayerType::residual:
        f = 2.0 * oh * ow * l.cout * 9.0 * (in.c + l.cout);
        if (model::residual_projects(l, in.c)) f += 2.0 * oh * ow * in.c * l.cout;
        if (l.se > 0) f += 4.0 * l.cout * model::se_hidden(l.cout, l.se);
        break;
      case model::LayerType::attentive_stats_pool:
        f = 2.0 * in.w * in.c * (l.attention > 0 ? l.attention : in.c);
        break;
      case model::LayerType::dense: f = 2.0 * double(in.features()) * l.units; break;
      case model::LayerType::global_avg_pool:
      case model::LayerType::dropout: break;
    }
    if (i == 0) first_dx = f;
    fwd += f;
    in = out;
  }
  fwd += 2.0 * double(in.features()) * m.head_outputs();
  return {fwd, 3.0 * fwd - first_dx};
}

Bottleneck classify_bottleneck(const PhaseTimes& t, const BottleneckContext& c) {
  Bottleneck b;
  const double wall = std::max(t.wall_ms, 1e-9);
  b.input_share = std::clamp(t.data_wait_ms / wall, 0.0, 1.0);
  b.compute_share = std::clamp(t.compute_ms() / wall, 0.0, 1.0);
  b.overhead_share = std::max(0.0, 1.0 - b.input_share - b.compute_share);
  // Every time in the line is per optimizer step, beside the step's wall time.
  const double steps = t.steps ? double(t.steps) : 1.0;
  const double ms_per_step = t.steps ? t.wall_ms / steps : 0.0;
  const std::string compute =
      t.step_ms > 0 ? fmt::format("{:.2f} ms/step in the step, forward ~{:.2f} (estimate)", t.step_ms / steps,
                                  t.forward_ms / steps)
                    : fmt::format("forward {:.2f} + backward {:.2f} + optimizer {:.2f} ms/step", t.forward_ms / steps,
                                  t.backward_ms / steps, t.optimizer_ms / steps);
  b.summary = fmt::format(
      "{:.0f}% of step time waiting for data, {:.0f}% computing ({}), {:.0f}% launch/sync/host overhead; "
      "{:.2f} ms/step in all",
      100 * b.input_share, 100 * b.compute_share, compute, 100 * b.overhead_share, ms_per_step);
  if (c.peak_tflops > 0 && c.achieved_tflops > 0)
    b.summary += fmt::format(", {:.1f} TFLOP/s = {:.0f}% of peak", c.achieved_tflops,
                             100 * c.achieved_tflops / c.peak_tflops);

  // The device busy nearly all the time wins over everything else: waiting
  // host threads then cost nothing.
  if (b.compute_share < 0.85 && b.input_share >= 0.25 && b.input_share >= b.overhead_share) {
    b.kind = "input-bound";
    if (c.on_gpu && !c.resident && c.fits_on_gpu)
      b.suggestion = "the dataset fits on the GPU: use --gpu-cache (reader.gpu_cache=on)";
    else if (c.reader_threads < c.cpu_cores)
      b.suggestion = fmt::format("raise reader.threads (now {}; {} cores) with --set reader.threads={}",
                                 c.reader_threads, c.cpu_cores, c.cpu_cores);
    else if (c.resident)
      b.suggestion = "batches are gathered from memory already: the gather itself is slow; raise --batch-size";
    else
      b.suggestion = "store /segments uncompressed and contiguous (gzip chunks cost CPU per batch), or use a "
                     "machine with more cores";
  } else if (b.compute_share >= 0.6) {
    b.kind = "compute-bound";
    if (!c.on_gpu)
      b.suggestion = "the CPU backend does the arithmetic: train on a GPU (--device cuda) for real speed";
    else if (c.precision == model::Precision::fp32)
      b.suggestion = "use --precision bf16 (tensor cores; FP32 master weights keep the accuracy)";
    else if (c.peak_tflops > 0 && c.achieved_tflops > 0 && c.achieved_tflops < 0.3 * c.peak_tflops)
      b.suggestion = fmt::format("the kernels reach {:.0f}% of peak: a larger --batch-size (now {}) keeps more SMs "
                                 "busy; profile the slowest phase with --profile-steps and ncu",
                                 100 * c.achieved_tflops / c.peak_tflops, c.batch_size);
    else
      b.suggestion = "the GPU is doing useful work most of the time: more speed needs a bigger GPU or a smaller model";
  } else {
    b.kind = "launch/sync-bound";
    if (c.on_gpu && !c.cuda_graphs)
      b.suggestion = "turn CUDA graphs on (train.cuda_graphs=true): one launch per step instead of dozens";
    else if (c.log_interval > 0 && c.log_interval < 10)
      b.suggestion = fmt::format("log.interval={} reads device counters (a sync) very often: raise it to 50+",
                                 c.log_interval);
    else
      b.suggestion = fmt::format("each step is too short to hide launch and host overhead: raise --batch-size "
                                 "(now {}) or use gradient accumulation",
                                 c.batch_size);
  }
  return b;
}

}  // namespace mf::train
