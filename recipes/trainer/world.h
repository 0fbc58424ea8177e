// recipes/trainer/world.h — where a run's ranks come from: the launcher's
// environment read once, the communicators (threads, UCX processes, or NCCL
// with a UCX world beside it for host traffic) and each rank's device.
//
//   under a launcher (RANK or SLURM_PROCID set, e.g. by tools/gtprun; not with
//     parallel.backend=local): this process is one rank; on CPU the world is
//     UCX, on CUDA NCCL for tensors plus UCX for host-memory control traffic
//     on one rendezvous store, the GPU local_rank % GPUs;
//   otherwise: parallel.world_size ranks as threads of this process
//     (comm/local) on CPU, or a single rank on one GPU.
// On CPU the BLAS threads are split between the ranks of this machine.
#pragma once

#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/kernels/ops.h"
#include "recipes/trainer/config.pb.h"

namespace gtp::recipes {

// One rank's view of the run. Not owned; valid for the body's call.
struct RankWorld {
  comm::Communicator& world;  // tensors (NCCL on GPUs)
  comm::Communicator& host;   // host-memory control traffic: `world` itself on host backends
  const kernels::Exec& exec;  // this rank's device, allocator, stream, BLAS (and cuDNN)
};

// True when this process is one rank of a launcher's world.
bool UnderLauncher(const proto::Recipe& recipe);

// The ranks the recipe runs on: parallel.world_size, or under a launcher its
// WORLD_SIZE (parallel.world_size 1 means "as many as started"; another value
// must match: InvalidArgument naming both).
absl::StatusOr<int> WorldSize(const proto::Recipe& recipe);

// Makes this process's ranks and runs `body` on each (threads: concurrently;
// returns the first error of any rank). FailedPrecondition naming the
// setting when train.device=cuda finds no GPU, cuDNN fails to start
// (train.attention=flash avoids it), or several ranks would share this
// process's GPU. Blocks.
absl::Status RunOnRanks(const proto::Recipe& recipe,
                        const std::function<absl::Status(const RankWorld&)>& body);

}  // namespace gtp::recipes
