// comm/ucx/ucx_communicator.h — collectives between processes over UCX (UCP
// tag API, host memory).
//
// One UCP context and worker per process, driven by a communication thread:
// collective calls build a small schedule (steps of sends/receives plus local
// reductions), hand it to that thread and return; the thread posts the
// messages, reduces, and completes the Work. The thread sleeps on the
// worker's event fd when idle.
//
// Algorithms: ring all-gather; ring reduce-scatter (bf16/f16 travel and
// accumulate as f32, rounded once at the owner); all-reduce = ring
// reduce-scatter + ring all-gather; binomial-tree broadcast; direct
// all-to-all(v); dissemination barrier. Split gives every sub-group its own
// tag space (a group id from the rendezvous store).
//
// Failure is loud: a peer whose endpoint fails, a message whose size or
// call signature disagrees with this rank's call, or a Wait that times out
// fails the group with an error naming group, op and peer, and tells the
// other members (an abort message) so they fail too instead of hanging.
// UCX itself is configured from the environment (UCX_TLS etc.).
//
// Usage (every rank, started by gtprun or srun):
//   GTP_ASSIGN_OR_RETURN(auto world, gtp::comm::CreateUcxWorldFromEnv({}));
//   GTP_RETURN_IF_ERROR(Run(world->AllReduce(x, x, n, DType::kF32, ReduceOp::kSum)));
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "comm/store/key_value_store.h"

namespace gtp::comm {

struct UcxOptions {
  std::string name = "world";  // group name in errors
  // Default wait for peers in collectives (Communicator::timeout()).
  absl::Duration timeout = absl::Seconds(60);
  // How long to wait for the store and for every rank's worker address.
  absl::Duration connect_timeout = absl::Seconds(60);
  // Namespace of this world's keys in the store (several worlds may share one).
  std::string store_prefix = "gtp/ucx";
  // Move data over shared memory and CMA between ranks on one host (6–10×
  // the all-gather bandwidth of the default here, docs/PERFORMANCE.md). The
  // price: UCX has no failure handling on those transports, so a rank that
  // dies during a transfer aborts its peers inside UCX (a backtrace) instead
  // of ending them with gtp's error naming the dead rank. Off by default; the
  // environment variable GTP_UCX_SHARED_MEMORY=1 turns it on for every world.
  bool shared_memory = false;
  // Tuning (0: the default, or the environment variable named). Threads
  // that reduce reduce-scatter pieces besides a thread blocked in Wait
  // (GTP_UCX_REDUCE_THREADS, default 1); the largest piece a ring step is cut
  // into (GTP_UCX_PIECE_KIB, default 1024).
  int reduce_threads = 0;
  int64_t piece_bytes = 0;
  // UCP workers, each with its own communication thread (GTP_UCX_LANES;
  // default: cores / (2 × LOCAL_WORLD_SIZE), between 1 and 4). A large
  // all-gather, reduce-scatter or all-reduce is cut into one part per lane,
  // so more than one thread per process copies and reduces: one thread
  // doing both directions of a ring step gets half of point-to-point
  // bandwidth. Results are the same bits whatever the lanes. Every rank
  // must use the same number.
  int lanes = 0;
};

// Creates this rank's world communicator: publishes its worker address in
// `store`, waits for every rank's, and connects. Blocks (at most
// connect_timeout). The communicator and every sub-communicator split from it
// keep `store` alive.
absl::StatusOr<std::unique_ptr<Communicator>> CreateUcxWorld(std::shared_ptr<KeyValueStore> store,
                                                             int rank, int size,
                                                             const UcxOptions& options = {});

// Reads the launch environment (comm/env/launch_env.h); rank 0 serves the
// TCP store on MASTER_PORT; every rank connects to MASTER_ADDR:MASTER_PORT
// and calls CreateUcxWorld. Blocks (at most about 2 × connect_timeout).
absl::StatusOr<std::unique_ptr<Communicator>> CreateUcxWorldFromEnv(const UcxOptions& options = {});

}  // namespace gtp::comm
