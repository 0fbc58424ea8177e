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
// Ranks sharing GPUs (a correctness run of several NCCL ranks on fewer GPUs):
// when `gpus` (detected by CountGpus unless given) is at least 1 and fewer
// than nproc, each rank also gets the environment under which NCCL treats it
// as a host of its own and connects the ranks through its socket transport
// on loopback (NCCL refuses two ranks on one device of one host): a
// per-rank NCCL_HOSTID, NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1,
// NCCL_IB_DISABLE=1, NCCL_NET=Socket, NCCL_SOCKET_IFNAME=lo and
// NCCL_NVLS_ENABLE=0 (a variable already in the environment is kept, except
// NCCL_HOSTID, which gets the rank appended). The kernels, streams and
// failure paths are NCCL's own; the speed is a socket's. Off where every rank
// has a GPU of its own.
//
// Launch blocks until every rank has exited. It is thread-safe as far as
// fork() is: it builds each rank's argv and environment before forking and
// only calls async-signal-safe functions in the child. It does not change
// signal dispositions; callers that want Ctrl-C forwarded pass a signalfd.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gtp::gtprun {

struct LaunchOptions {
  int nproc = 1;       // ranks on this machine
  // Several machines, torchrun-style: every machine runs gtprun with the same
  // nnodes, master_addr (node 0's address) and master_port, and its own
  // node_rank; this machine's ranks are node_rank·nproc … node_rank·nproc +
  // nproc − 1 of nnodes·nproc.
  int nnodes = 1;
  int node_rank = 0;
  std::vector<std::string> command;  // program (searched in PATH) and its arguments
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free port on master_addr
  absl::Duration grace_period = absl::Seconds(5);
  bool stop_on_failure = true;
  std::vector<std::pair<std::string, std::string>> extra_env;  // set for every rank
  int out_fd = 1;      // where prefixed stdout lines go
  int err_fd = 2;      // where prefixed stderr lines and gtprun's own messages go
  int signal_fd = -1;  // optional signalfd; a signal read from it is forwarded
  int gpus = -1;       // GPUs on this host; -1: CountGpus()
};

// GPUs the ranks can see: the entries of CUDA_VISIBLE_DEVICES when it is
// set, else the devices under /proc/driver/nvidia/gpus (0 without a driver).
// Needs no CUDA library.
int CountGpus();

// True when `nproc` ranks on `gpus` GPUs share them (1 ≤ gpus < nproc).
inline bool SharesGpus(int nproc, int gpus) { return gpus >= 1 && gpus < nproc; }

// The NCCL settings a rank gets when ranks share GPUs (see the file comment),
// given the inherited environment `env`; `run_id` tells this launch's host ids
// from another's.
std::vector<std::pair<std::string, std::string>> SharedGpuEnv(
    const std::map<std::string, std::string>& env, int rank, const std::string& run_id);

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
  std::vector<int> suspended;          // ranks seen stopped by a signal (SIGSTOP…), in order
  // 0 when every rank succeeded; else the first failed rank's exit code, or
  // 128 + its signal (128 + the forwarded signal when interrupted).
  int exit_code() const;
};

// InvalidArgument naming the flag (--nproc, --node_rank, --master_port,
// --grace_period) and the values that work when `options` cannot launch;
// nothing else is checked (the program is resolved by Launch).
absl::Status CheckOptions(const LaunchOptions& options);

// Errors only for what prevents launching (no such program, fork failure,
// bad options: CheckOptions); rank failures are reported in the result.
absl::StatusOr<LaunchResult> Launch(const LaunchOptions& options);

// A TCP socket bound to a free port on every address (as the rendezvous
// store binds) and listening; close-on-exec. Launch hands it to rank 0 as
// GTP_STORE_FD, so the port is never free between being picked and rank 0
// serving on it (picking a port and closing it let another process — NCCL's
// own loopback sockets, another gtprun — take it first).
struct ListeningSocket {
  int fd = -1;
  int port = 0;
};
absl::StatusOr<ListeningSocket> ListenOnFreePort();

}  // namespace gtp::gtprun
