// tools/gtprun/launcher.h — start N local ranks of one program, torchrun-style.
//
// Launch() forks `nproc` copies of a command with RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (a free port
// is chosen when none is given), prefixes every line each rank writes with
// "[rank k] " (stdout to stdout, stderr to stderr), and waits for all of
// them. When a rank fails (non-zero exit or a signal) and stop_on_failure is
// set, the other ranks get SIGTERM, then SIGKILL once the grace period has
// passed; each rank runs in its own process group, so its children go too.
// The result names the first rank that failed and how.
//
// Launch blocks until every rank has exited. It is thread-safe as far as
// fork() is: it builds each rank's argv and environment before forking and
// only calls async-signal-safe functions in the child. It does not change
// signal dispositions; callers that want Ctrl-C forwarded pass a signalfd.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gtp::gtprun {

struct LaunchOptions {
  int nproc = 1;
  std::vector<std::string> command;  // program (searched in PATH) and its arguments
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free port on master_addr
  absl::Duration grace_period = absl::Seconds(5);
  bool stop_on_failure = true;
  std::vector<std::pair<std::string, std::string>> extra_env;  // set for every rank
  int out_fd = 1;      // where prefixed stdout lines go
  int err_fd = 2;      // where prefixed stderr lines and gtprun's own messages go
  int signal_fd = -1;  // optional signalfd; a signal read from it is forwarded
};

struct RankExit {
  int rank = 0;
  pid_t pid = 0;
  bool signaled = false;   // killed by a signal (else exited)
  int status = 0;          // exit code, or the signal number
  bool stopped = false;    // the signal was gtprun stopping it after another failure
  bool ok() const { return !signaled && status == 0; }
  // "exit status 3", "signal 11 (Segmentation fault)".
  std::string Describe() const;
};

struct LaunchResult {
  int master_port = 0;
  std::vector<RankExit> ranks;         // by rank
  std::optional<int> first_failure;    // rank that failed first
  int interrupted_by = 0;              // signal forwarded from signal_fd, if any
  // 0 when every rank succeeded; else the first failed rank's exit code, or
  // 128 + its signal (128 + the forwarded signal when interrupted).
  int exit_code() const;
};

// Errors only for what prevents launching (no such program, fork failure,
// bad options); rank failures are reported in the result.
absl::StatusOr<LaunchResult> Launch(const LaunchOptions& options);

// Picks a TCP port that is free on `addr` right now.
absl::StatusOr<int> PickFreePort(const std::string& addr);

}  // namespace gtp::gtprun
