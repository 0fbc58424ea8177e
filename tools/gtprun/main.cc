// gtprun — launch N local ranks of a program, torchrun-style.
//
//   gtprun --nproc 4 -- <program> <args...>
//   gtprun --nnodes 2 --node_rank 0 --master_addr node0 --master_port 29500 --nproc 8 -- <program> ...
//
// Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR
// (default 127.0.0.1) and MASTER_PORT (a free port unless --master_port is
// given); its output lines are prefixed "[rank k] ". When a rank fails, the
// others get SIGTERM and, after --grace_period, SIGKILL; gtprun then exits
// with the failed rank's exit code (128 + signal when it was killed) and
// names it on stderr. SIGINT/SIGTERM sent to gtprun go to every rank,
// SIGHUP as SIGTERM (UCX keeps SIGHUP for itself); if gtprun dies (even by
// SIGKILL) every rank gets SIGTERM.
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "core/cli.h"
#include "tools/gtprun/launcher.h"

ABSL_FLAG(int, nproc, 1, "Number of ranks to start on this machine.");
ABSL_FLAG(int, nnodes, 1,
          "Machines of the run (torchrun's --nnodes): run gtprun on each with the same --nnodes, "
          "--nproc, --master_addr and --master_port.");
ABSL_FLAG(int, node_rank, 0, "This machine's index in [0, --nnodes): its ranks are node_rank·nproc and up.");
ABSL_FLAG(std::string, master_addr, "127.0.0.1", "Address of the rendezvous store (rank 0).");
ABSL_FLAG(int, master_port, 0, "Port of the rendezvous store; 0 picks a free one.");
ABSL_FLAG(absl::Duration, grace_period, absl::Seconds(5),
          "After a rank fails, how long the others get between SIGTERM and SIGKILL.");
ABSL_FLAG(int, gpus, -1,
          "GPUs on this machine (-1: CUDA_VISIBLE_DEVICES, else /proc/driver/nvidia/gpus). With "
          "fewer GPUs than ranks the ranks share them: NCCL runs each rank as its own host over "
          "its socket transport on loopback (a correctness run; its speed means nothing).");
ABSL_FLAG(bool, stop_on_failure, true,
          "Stop the other ranks when one fails (else let them finish or fail on their own).");

int main(int argc, char** argv) {
  gtp::SetUsage("gtprun --nproc N [flags] -- <program> [args...]");
  std::vector<char*> rest = gtp::ParseCommandLine(argc, argv);
  gtp::gtprun::LaunchOptions o;
  o.nproc = absl::GetFlag(FLAGS_nproc);
  o.nnodes = absl::GetFlag(FLAGS_nnodes);
  o.node_rank = absl::GetFlag(FLAGS_node_rank);
  o.master_addr = absl::GetFlag(FLAGS_master_addr);
  o.master_port = absl::GetFlag(FLAGS_master_port);
  o.grace_period = absl::GetFlag(FLAGS_grace_period);
  o.stop_on_failure = absl::GetFlag(FLAGS_stop_on_failure);
  o.gpus = absl::GetFlag(FLAGS_gpus);
  if (o.gpus < -1) {
    std::fprintf(stderr, "gtprun: --gpus must be -1 (detect) or >= 0, got %d\n", o.gpus);
    return 2;
  }
  if (o.gpus < 0) o.gpus = gtp::gtprun::CountGpus();
  for (size_t i = 1; i < rest.size(); ++i) o.command.push_back(rest[i]);
  if (o.command.empty()) {
    std::fprintf(stderr, "gtprun: no program given\nusage: %s\n",
                 absl::ProgramUsageMessage().data());
    return 2;
  }

  // Bad flags are refused before the banner, the ranks or the port.
  if (absl::Status st = gtp::gtprun::CheckOptions(o); !st.ok()) {
    std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
    return 2;
  }

  // Forward Ctrl-C and friends: block them and read them from a signalfd.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGHUP);
  sigprocmask(SIG_BLOCK, &sigs, nullptr);
  o.signal_fd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);

  std::fprintf(stderr, "gtprun: %d rank(s) of '%s', master %s:%s, grace %s, stop_on_failure=%d\n",
               o.nproc, absl::StrJoin(o.command, " ").c_str(), o.master_addr.c_str(),
               o.master_port ? std::to_string(o.master_port).c_str() : "auto",
               absl::FormatDuration(o.grace_period).c_str(), o.stop_on_failure ? 1 : 0);
  if (gtp::gtprun::SharesGpus(o.nproc, o.gpus)) {
    std::fprintf(stderr,
                 "gtprun: %d ranks share %d GPU(s): NCCL runs each rank as its own host over its "
                 "socket transport on loopback (per-rank NCCL_HOSTID; P2P, SHM, IB off). This is a "
                 "CORRECTNESS run: the kernels, streams and failure paths are NCCL's, the speed is "
                 "a socket's and means nothing.\n",
                 o.nproc, o.gpus);
  }
  auto result = gtp::gtprun::Launch(o);
  if (!result.ok()) {
    std::fprintf(stderr, "%s\n", std::string(result.status().message()).c_str());
    return 2;
  }
  return result->exit_code();
}
