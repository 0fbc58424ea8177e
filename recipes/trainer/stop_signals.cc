#include "recipes/trainer/stop_signals.h"

#include <atomic>

namespace gtp::recipes {
namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_defer_signals{false};

void OnSignal(int sig) {
  if (!g_defer_signals.load()) {
    signal(sig, SIG_DFL);  // async-signal-safe, as is raise
    raise(sig);
    return;
  }
  g_stop_signal.store(sig);
}

}  // namespace

StopSignals::StopSignals() {
  g_stop_signal.store(0);
  g_defer_signals.store(false);
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, &old_term_);
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGHUP, &sa, &old_hup_);
}

StopSignals::~StopSignals() {
  g_defer_signals.store(false);
  sigaction(SIGTERM, &old_term_, nullptr);
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGHUP, &old_hup_, nullptr);
}

bool StopSignals::Requested() { return g_stop_signal.load() != 0; }
int StopSignals::Signal() { return g_stop_signal.load(); }
void StopSignals::Defer(bool on) { g_defer_signals.store(on); }

}  // namespace gtp::recipes
