#include "train/plot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>

#include "engine/error.hpp"
#include "train/run_log.hpp"

namespace fs = std::filesystem;

namespace mf::train {

namespace {
std::string xml_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += ch;
    }
  }
  return o;
}

std::string tick_label(double v, double step) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e6 || a < 1e-3) return fmt::format("{:.2g}", v);
  if (a >= 1000 && step >= 1000) return fmt::format("{:g}k", v / 1000);
  const int decimals = step >= 1 ? 0 : int(std::ceil(-std::log10(step)));
  return fmt::format("{:.{}f}", v, decimals);
}

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"};
}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / std::max(1, target - 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  // Counted by an integer index: `v += step` stalls (an endless loop) when the
  // step is below half the spacing of doubles near v (a range tiny next to its magnitude).
  const double k0 = std::ceil(lo / step - 1e-9), k1 = std::floor(hi / step + 1e-9);
  const std::int64_t n = k1 >= k0 ? std::min<std::int64_t>(std::int64_t(k1 - k0), 1000) + 1 : 0;
  std::vector<double> t;
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = (k0 + double(i)) * step;
    t.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  }
  return t;
}

std::string render_svg(const Chart& c) {
  const double L = 72, R = 190, T = 40, B = 52;
  const double W = c.width, H = c.height, pw = W - L - R, ph = H - T - B;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const Series& s : c.series)
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      x0 = std::min(x0, s.x[i]);
      x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, s.y[i]);
      y1 = std::max(y1, s.y[i]);
    }
  if (std::isfinite(c.ymin_hint)) y0 = std::min(y0, c.ymin_hint);
  if (std::isfinite(c.ymax_hint)) y1 = std::max(y1, c.ymax_hint);
  const bool empty = !std::isfinite(x0);
  if (empty) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 <= x0) x0 -= 0.5, x1 += 0.5;
  if (y1 <= y0) {
    const double d = std::max(std::fabs(y0) * 0.05, 1e-6);
    y0 -= d;
    y1 += d;
  }
  // The y range snaps outward to whole tick steps so the grid frames the data.
  {
    const auto t0 = nice_ticks(y0, y1);
    if (t0.size() > 1) {
      const double st = t0[1] - t0[0];
      y0 = std::floor(y0 / st + 1e-9) * st;
      y1 = std::ceil(y1 / st - 1e-9) * st;
    }
  }
  const auto xt = nice_ticks(x0, x1), yt = nice_ticks(y0, y1);
  auto X = [&](double v) { return L + (v - x0) / (x1 - x0) * pw; };
  auto Y = [&](double v) { return T + ph - (v - y0) / (y1 - y0) * ph; };

  std::string o = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      c.width, c.height);
  o += fmt::format("<text x=\"{}\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">{}</text>\n", L + pw / 2,
                   xml_escape(c.title));
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1, ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;
  for (double v : xt) {
    if (v < x0 - 1e-12 || v > x1 + 1e-12) continue;
    o += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#e5e5e5\"/>\n", X(v), T,
                     T + ph);
    o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", X(v), T + ph + 16,
                     tick_label(v, xstep));
  }
  for (double v : yt) {
    if (v < y0 - 1e-12 || v > y1 + 1e-12) continue;
    o += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#e5e5e5\"/>\n", L, Y(v),
                     L + pw);
    o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", L - 6, Y(v) + 4,
                     tick_label(v, ystep));
  }
  o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n", L, T, pw, ph);
  o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", L + pw / 2, H - 12,
                   xml_escape(c.xlabel));
  o += fmt::format("<text transform=\"translate(16 {:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                   T + ph / 2, xml_escape(c.ylabel));
  for (std::size_t k = 0; k < c.series.size(); ++k) {
    const Series& s = c.series[k];
    const char* color = kColors[k % (sizeof(kColors) / sizeof(kColors[0]))];
    std::string pts;
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) pts += fmt::format("{:.1f},{:.1f} ", X(s.x[i]), Y(s.y[i]));
    if (!pts.empty())
      o += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\" points=\"{}\"/>\n", color, pts);
    if (s.markers)
      for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
        if (std::isfinite(s.x[i]) && std::isfinite(s.y[i]))
          o += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", X(s.x[i]), Y(s.y[i]), color);
    const double ly = T + 14 + 20.0 * double(k);
    o += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\" stroke-width=\"3\"/>\n",
                     L + pw + 12, ly, L + pw + 34, color);
    o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", L + pw + 40, ly + 4, xml_escape(s.name));
  }
  if (empty)
    o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" fill=\"#888\">no data yet</text>\n",
                     L + pw / 2, T + ph / 2);
  o += "</svg>\n";
  return o;
}

namespace {
double get(const nlohmann::json& j, std::initializer_list<const char*> path) {
  const nlohmann::json* p = &j;
  for (const char* k : path) {
    if (!p->is_object() || !p->contains(k)) return NAN;
    p = &(*p)[k];
  }
  return p->is_number() ? p->get<double>() : NAN;
}

void add_point(Series& s, double x, double y) {
  if (!std::isfinite(y)) return;
  s.x.push_back(x);
  s.y.push_back(y);
}

void drop_empty(Chart& c) {
  c.series.erase(std::remove_if(c.series.begin(), c.series.end(), [](const Series& s) { return s.x.empty(); }),
                 c.series.end());
}
}  // namespace

std::vector<fs::path> plot_run(const fs::path& run_dir, const fs::path& out_dir) {
  const fs::path log = run_dir / "metrics.jsonl";
  MF_CHECK(fs::exists(log), "{}: no metrics.jsonl (is it a melforge run directory?)", run_dir.string());
  const auto lines = read_jsonl(log);
  Series train_loss{"train loss", {}, {}, false}, val_loss{"val loss", {}, {}, true};
  Series train_acc{"train accuracy", {}, {}, false}, seg_acc{"val segment accuracy", {}, {}, true},
      file_acc{"val file accuracy", {}, {}, true}, file_f1{"val file macro F1", {}, {}, true},
      seg_f1{"val segment macro F1", {}, {}, true};
  Series sps{"samples/s", {}, {}, false};
  // An embedding model validates by trials: its error rates (fractions).
  Series val_eer{"val EER", {}, {}, true}, val_dcf{"val minDCF(0.05)", {}, {}, true};
  for (const auto& j : lines) {
    const std::string type = j.value("type", "");
    const double step = get(j, {"step"});
    if (type == "train") {
      add_point(train_loss, step, get(j, {"loss"}));
      add_point(train_acc, step, get(j, {"accuracy"}));
      add_point(sps, step, get(j, {"samples_per_s"}));
    } else if (type == "eval" && j.value("split", "val") == "val") {
      add_point(val_loss, step, get(j, {"loss"}));
      add_point(seg_acc, step, get(j, {"segment", "accuracy"}));
      add_point(seg_f1, step, get(j, {"segment", "macro_f1"}));
      add_point(file_acc, step, get(j, {"file", "accuracy"}));
      add_point(file_f1, step, get(j, {"file", "macro_f1"}));
      add_point(val_eer, step, get(j, {"verification", "eer"}));
      add_point(val_dcf, step, get(j, {"verification", "min_dcf_0.05"}));
    }
  }
  const fs::path dir = out_dir.empty() ? run_dir : out_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string name = run_dir.filename().empty() ? run_dir.parent_path().filename().string()
                                                      : run_dir.filename().string();
  Chart loss{fmt::format("{}: loss", name), "optimizer step", "loss", {train_loss, val_loss}};
  loss.ymin_hint = 0;
  Chart acc{fmt::format("{}: accuracy", name), "optimizer step", "accuracy / F1",
            {train_acc, seg_acc, seg_f1, file_acc, file_f1}};
  acc.ymax_hint = 1;
  Chart thr{fmt::format("{}: throughput", name), "optimizer step", "training samples/s", {sps}};
  thr.ymin_hint = 0;
  Chart eer{fmt::format("{}: verification", name), "optimizer step", "EER / minDCF (fractions)", {val_eer, val_dcf}};
  eer.ymin_hint = 0;
  std::vector<std::pair<Chart, const char*>> charts{{loss, "loss.svg"}, {acc, "accuracy.svg"}, {thr, "throughput.svg"}};
  if (!val_eer.x.empty()) charts.emplace_back(eer, "eer.svg");  // an embedding model's run
  std::vector<fs::path> out;
  for (auto& [chart, file] : charts) {
    drop_empty(chart);
    const fs::path p = dir / file;
    std::ofstream f(p, std::ios::trunc);
    MF_CHECK(f.is_open(), "cannot write {}", p.string());
    f << render_svg(chart);
    out.push_back(p);
  }
  return out;
}

}  // namespace mf::train
