// Line charts as SVG, self-written (no plotting dependency), and the curves
// of a run (`melforge plot RUN_DIR`): loss, accuracy and throughput from
// metrics.jsonl.
#pragma once

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

namespace mf::train {

struct Series {
  std::string name;
  std::vector<double> x, y;
  bool markers = false;  // dots at the points (sparse series such as evaluations)
};

struct Chart {
  std::string title, xlabel, ylabel;
  std::vector<Series> series;
  double ymin_hint = NAN, ymax_hint = NAN;  // include these in the y range when set
  int width = 720, height = 420;
};

std::string render_svg(const Chart& c);

// "Nice" tick values covering [lo, hi] (steps of 1, 2 or 5 times a power of ten).
std::vector<double> nice_ticks(double lo, double hi, int target = 6);

// Writes loss.svg, accuracy.svg and throughput.svg into run_dir (or out_dir
// when given) from run_dir/metrics.jsonl; returns the paths written.
std::vector<std::filesystem::path> plot_run(const std::filesystem::path& run_dir,
                                            const std::filesystem::path& out_dir = {});

}  // namespace mf::train
