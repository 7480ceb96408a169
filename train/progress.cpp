#include "train/progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>

namespace mf::train {

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  const auto s = std::int64_t(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::string progress_line(const ProgressState& s) {
  std::string o = fmt::format("epoch {}/{} step {}/{} (global {})", s.epoch, s.epochs, s.step_in_epoch,
                              s.steps_per_epoch, s.global_step);
  if (std::isfinite(s.loss)) o += fmt::format(" loss {:.4f}", s.loss);
  if (std::isfinite(s.accuracy)) o += fmt::format(" acc {:.3f}", s.accuracy);
  if (s.lr > 0) o += fmt::format(" lr {:.2e}", s.lr);
  if (s.samples_per_s > 0) o += fmt::format(" | {:.0f} samples/s", s.samples_per_s);
  if (s.eta_s >= 0) o += fmt::format(" | ETA {}", format_duration(s.eta_s));
  if (s.gpu)
    o += fmt::format(" | GPU {:.0f}% {:.1f}/{:.1f} GiB", s.gpu_util_pct, s.gpu_mem_gib, s.gpu_mem_total_gib);
  return o;
}

Progress::Progress(model::ProgressMode mode, std::FILE* stream) : out_(stream) {
  if (!stream) {  // silent: another process of the job reports
    mode_ = Mode::off;
    return;
  }
  switch (mode) {
    case model::ProgressMode::off: mode_ = Mode::off; break;
    case model::ProgressMode::plain: mode_ = Mode::plain; break;
    case model::ProgressMode::tty: mode_ = Mode::tty; break;
    case model::ProgressMode::automatic: mode_ = ::isatty(::fileno(stream)) ? Mode::tty : Mode::plain; break;
  }
}

Progress::~Progress() { finish(); }

void Progress::draw(const ProgressState& s) {
  // \r and "erase line" redraw in place; the line is cut to a typical width
  // so it never wraps (a wrapped line cannot be redrawn).
  std::string line = progress_line(s);
  if (line.size() > 150) line.resize(150);
  std::fprintf(out_, "\r\033[2K%s", line.c_str());
  std::fflush(out_);
  line_open_ = true;
  last_draw_ = std::chrono::steady_clock::now();
}

void Progress::tick(const ProgressState& s) {
  if (mode_ != Mode::tty) return;
  if (std::chrono::steady_clock::now() - last_draw_ < std::chrono::milliseconds(125)) return;
  draw(s);
}

void Progress::log(const ProgressState& s) {
  if (mode_ == Mode::tty) {
    draw(s);
  } else if (mode_ == Mode::plain) {
    std::fprintf(out_, "%s\n", progress_line(s).c_str());
    std::fflush(out_);
  }
}

void Progress::message(const std::string& text) {
  if (!out_) return;
  if (mode_ == Mode::tty && line_open_) std::fprintf(out_, "\r\033[2K");
  line_open_ = false;
  std::fprintf(out_, "%s\n", text.c_str());
  std::fflush(out_);
  last_draw_ = {};
}

void Progress::finish() {
  if (!out_) return;
  if (mode_ == Mode::tty && line_open_) std::fprintf(out_, "\n");
  line_open_ = false;
  std::fflush(out_);
}

}  // namespace mf::train
