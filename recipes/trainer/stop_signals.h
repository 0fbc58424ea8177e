// recipes/trainer/stop_signals.h — SIGTERM, SIGINT and SIGHUP (a closed
// terminal) stop a training run at the next step boundary, with a checkpoint.
// (Under gtprun a rank gets SIGTERM for a SIGHUP: UCX keeps SIGHUP for its
// debug dump.)
//
// Until the run has state worth a checkpoint (the training loop, or an
// evaluation that can stop between micro-batches) a signal acts at once with
// its default action: start-up, the rendezvous (a rank waiting up to a minute
// for its peers) and loading end on Ctrl-C instead of ignoring it.
//
//   StopSignals signals;          // installs the handlers; restores them when it ends
//   ... set-up ...
//   StopSignals::Defer(true);     // from here a signal only asks the run to stop
//   for (...) { step; if (agree(StopSignals::Requested())) save and stop; }
//
// The one piece of process state of a trainer: a signal handler has nowhere
// else to write. One StopSignals at a time per process. Thread-safe reads.
#pragma once

#include <signal.h>

namespace gtp::recipes {

class StopSignals {
 public:
  // Clears any earlier request, defers nothing yet, installs the handlers.
  StopSignals();
  // Restores the handlers found; defers nothing.
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Whether a signal asks to stop (its number: Signal()). Async-signal-safe.
  static bool Requested();
  static int Signal();
  // true: a signal sets Requested(); false: it acts at once (default action).
  static void Defer(bool on);

 private:
  struct sigaction old_term_ {}, old_int_ {}, old_hup_ {};
};

}  // namespace gtp::recipes
