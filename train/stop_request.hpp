// Stopping a training run cleanly: SIGINT or SIGTERM (or the trainer itself,
// for --stop-after-steps) asks the loop to stop after the current step; the
// trainer then writes a checkpoint and exits 0. A second signal ends the
// process at once (the default handler is restored by the first).
#pragma once

#include <csignal>

namespace mf::train {

// Installs the handlers for its lifetime; at most one exists at a time.
class StopRequest {
 public:
  StopRequest();
  ~StopRequest();
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;

  // The signal that asked to stop (SIGINT, SIGTERM), 0 when none has.
  int signal() const;
  bool requested() const { return signal() != 0; }
  // Asks to stop as SIGINT would, without a signal.
  void request();

 private:
  void (*old_int_)(int);
  void (*old_term_)(int);
};

}  // namespace mf::train
