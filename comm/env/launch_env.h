// comm/env/launch_env.h — who am I: rank, world size and rendezvous address
// from the launcher's environment.
//
// Two conventions are read (DESIGN.md §2):
//   torchrun / gtprun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
//   Slurm (srun):      SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; MASTER_ADDR
//                      defaults to the first host of SLURM_STEP_NODELIST (or
//                      SLURM_JOB_NODELIST) and MASTER_PORT to
//                      29500 + SLURM_JOB_ID % 1000 when not set.
// RANK wins when both are present (torchrun inside a Slurm allocation).
// GTP_STORE_FD (gtprun, rank 0 only): an inherited listening socket on
// MASTER_PORT for the rendezvous store.
// Every missing or malformed variable is an InvalidArgument naming it.
// Pure functions of the environment; thread-safe; never block.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace gtp::comm {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;
  int master_port = 0;
  std::string source;  // "torchrun" or "slurm"
  // Rank 0 only: a socket gtprun already bound and listens on at
  // master_port (GTP_STORE_FD), for the rendezvous store to serve on; -1
  // when not given (the store binds master_port itself).
  int store_fd = -1;

  // e.g. "rank 2/4 (local 2) master 127.0.0.1:29500 via torchrun".
  std::string ToString() const;
};

using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// Reads the process environment.
absl::StatusOr<LaunchEnv> ReadLaunchEnv();
// Reads through `lookup` (tests).
absl::StatusOr<LaunchEnv> ReadLaunchEnv(const EnvLookup& lookup);

// The first host of a Slurm node list: "node[03-05,7],gpu1" -> "node03".
std::string FirstSlurmHost(const std::string& nodelist);

}  // namespace gtp::comm
