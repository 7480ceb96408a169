#include "train/stop_request.hpp"

#include "engine/error.hpp"

namespace mf::train {

namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
bool g_installed = false;

extern "C" void on_stop_signal(int sig) {
  g_stop_signal = sig;
  std::signal(sig, SIG_DFL);  // a second Ctrl-C ends the process at once
}

}  // namespace

StopRequest::StopRequest() {
  MF_CHECK(!g_installed, "internal error: a second StopRequest while one is active");
  g_installed = true;
  g_stop_signal = 0;
  old_int_ = std::signal(SIGINT, on_stop_signal);
  old_term_ = std::signal(SIGTERM, on_stop_signal);
}

StopRequest::~StopRequest() {
  std::signal(SIGINT, old_int_);
  std::signal(SIGTERM, old_term_);
  g_installed = false;
}

int StopRequest::signal() const { return g_stop_signal; }

void StopRequest::request() { g_stop_signal = SIGINT; }

}  // namespace mf::train
