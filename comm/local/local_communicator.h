// comm/local/local_communicator.h — ranks as threads of one process.
//
// The in-process backend exists so that every parallel layout can be tested
// hermetically and fast (DESIGN.md §2). It follows the Communicator contract
// exactly, including its failure behaviour:
//   - Determinism: reductions combine ranks in rank order 0, 1, ..., n-1
//     (bf16/f16 in f32, rounded once), so results are bit-reproducible and
//     equal the sequential reference.
//   - Every call returns at once. When the last rank of a collective issues
//     it (or both sides of a send/recv are posted), the operation is queued
//     on the world's communication thread (one per CreateLocalWorld, shared
//     by its sub-groups), which performs the copies and reductions, so
//     communication overlaps the ranks' compute and progress never depends
//     on anyone calling Wait. Wait blocks until that thread is done. The
//     thread exits once the world's communicators and Works are all gone.
//   - Ranks that disagree on a call (op, count, dtype, reduce op, root, split
//     groups, all_to_allv counts) get InvalidArgument on every rank; a rank
//     that does not arrive within the timeout makes every waiting rank fail
//     with DeadlineExceeded naming the missing ranks; destroying a
//     communicator while peers wait for it fails them with Unavailable.
//
// Usage (tests):
//   GTP_CHECK_OK(gtp::comm::RunRanks(4, [](gtp::comm::Communicator& c) {
//     float x = c.rank();
//     return gtp::comm::Run(c.AllReduce(&x, &x, 1, DType::kF32, ReduceOp::kSum));
//   }));
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "comm/communicator.h"

namespace gtp::comm {

struct LocalOptions {
  // Group name used in errors; sub-groups are named "<prefix>[ranks]".
  std::string name = "world";
  // Default wait for peers (Communicator::timeout()).
  absl::Duration timeout = absl::Seconds(30);
  // Pair point-to-point messages the way NCCL does: per (sender, receiver)
  // in the order posted. A CPU model for code that must also run over NCCL:
  // the paired send and recv must agree on count, dtype AND tag, or both
  // fail (InvalidArgument naming both tags) — code whose two sides post in
  // different orders is caught here, where NCCL would deliver into the
  // wrong buffer. Off: by tag (Communicator::p2p_pairs_by_tag). Sub-groups
  // inherit it.
  bool p2p_pair_by_order = false;
};

// Creates `size` communicators sharing one group; element r is rank r. Each
// is then driven by its own thread. Non-blocking; thread-safe.
std::vector<std::unique_ptr<Communicator>> CreateLocalWorld(int size,
                                                            const LocalOptions& options = {});

// Runs fn(rank's communicator) on `size` threads and joins them. Returns OK
// when every rank returned OK, else an error listing each failed rank
// ("rank 2: INVALID_ARGUMENT: ..."). A rank whose fn fails (or throws)
// destroys its communicator on the way out, so peers waiting for it fail
// promptly instead of hanging. Blocks; thread-safe.
absl::Status RunRanks(int size, const std::function<absl::Status(Communicator&)>& fn,
                      const LocalOptions& options = {});

// Overload for functions returning void (e.g. bodies using gtest EXPECTs).
template <typename F, typename = std::enable_if_t<
                          std::is_void_v<std::invoke_result_t<F, Communicator&>>>>
absl::Status RunRanks(int size, F&& fn, const LocalOptions& options = {}) {
  return RunRanks(
      size,
      std::function<absl::Status(Communicator&)>([&fn](Communicator& c) {
        fn(c);
        return absl::OkStatus();
      }),
      options);
}

}  // namespace gtp::comm
