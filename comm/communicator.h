// comm/communicator.h — the collective-communication interface of gtp.
//
// A Communicator is one process group: `size()` ranks numbered 0..size-1,
// this process (or thread) being `rank()`. Backends implement it in their own
// targets so users link only what they use:
//   //comm/local  ranks are threads of one process (hermetic tests)
//   //comm/ucx    ranks are processes; host memory; UCX transports
//   //comm/nccl   ranks are processes with one GPU each; device memory
//
// Every collective is asynchronous: it validates its arguments, enqueues the
// operation and returns a Work. Buffers must stay valid and unmodified until
// the Work completes. A Work's Wait() returns once the results may be used:
// for host backends the memory holds the final values; for NCCL, work later
// enqueued on the communicator's compute stream is ordered after the
// collective (Wait does not block the host; Synchronize does).
//
// Errors come back as Status, never as a hang: a peer that dies, never
// arrives or disagrees on the call (op, count, dtype) ends the wait with an
// error naming the group (`name()`), the op and the peer, after at most the
// communicator's timeout. After an error the communicator is unusable.
//
// Collectives on one communicator must be issued in the same order on every
// rank. A Communicator object is used by one thread at a time; different
// communicators (e.g. the tp and dp groups) may be driven concurrently.
// Accessors (rank, size, name, backend, timeout) never block. Every
// collective call returns without waiting for peers, except Split, which
// blocks. A Work may be waited on from any one thread.
//
// Argument errors this rank can see alone (negative count, root out of range,
// a reduction on fp8/u8, in-place all_to_all, a tag outside [0, 2^24)) come
// back from the call itself as InvalidArgument; disagreements between ranks
// come back from Wait. Destroying a communicator whose peers still wait for it
// makes them fail (they do not hang); a Work may outlive its communicator.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/dtype.h"

namespace gtp::comm {

// kMean divides the sum by the group size. Floating reductions of bf16/f16
// accumulate in f32 and round once; fp8 and u8 support gather-type
// collectives only (all_gather, broadcast, all_to_all(v), send/recv).
enum class ReduceOp { kSum, kMean, kMax, kMin };

const char* ReduceOpName(ReduceOp op);

// Handle on one asynchronous operation.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation completes (see the file comment for what
  // "complete" means per backend), fails, or `timeout` passes
  // (DeadlineExceeded naming group, op and the peers not heard from).
  // InfiniteDuration means "the communicator's own timeout".
  virtual absl::Status Wait(absl::Duration timeout = absl::InfiniteDuration()) = 0;
  // Non-blocking: true once Wait would return immediately.
  virtual bool Test() = 0;
  // Blocks the host until the data is final in memory (== Wait for host
  // backends; stream synchronisation for NCCL).
  virtual absl::Status Synchronize() { return Wait(); }
};
using WorkPtr = std::unique_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Human-readable group name for errors and logs, e.g. "world" or "tp[0,1]".
  virtual std::string name() const = 0;
  // "local", "ucx" or "nccl".
  virtual std::string backend() const = 0;
  // How long Work::Wait() (with its default argument) and the blocking calls
  // (Split) wait for peers before failing with DeadlineExceeded.
  virtual absl::Duration timeout() const = 0;

  // recv[r·count, (r+1)·count) = send of rank r. recv holds size()·count.
  virtual absl::StatusOr<WorkPtr> AllGather(const void* send, void* recv, int64_t count,
                                            DType dtype) = 0;
  // recv (count elements) = op over ranks r of send[rank()·count, (rank()+1)·count).
  // send holds size()·count; recv may be send + rank()·count (in place).
  virtual absl::StatusOr<WorkPtr> ReduceScatter(const void* send, void* recv, int64_t count,
                                                DType dtype, ReduceOp op) = 0;
  // recv = op over ranks of send (count elements; send == recv allowed).
  virtual absl::StatusOr<WorkPtr> AllReduce(const void* send, void* recv, int64_t count,
                                            DType dtype, ReduceOp op) = 0;
  // buf on every rank = buf of `root`.
  virtual absl::StatusOr<WorkPtr> Broadcast(void* buf, int64_t count, DType dtype, int root) = 0;
  // recv[r·count ...] = send of rank r at [rank()·count ...]; both size()·count.
  virtual absl::StatusOr<WorkPtr> AllToAll(const void* send, void* recv, int64_t count,
                                           DType dtype) = 0;
  // Variable-size all-to-all; counts/displacements in elements, size() each.
  // send_counts[r] on this rank must equal recv_counts[this] on rank r.
  virtual absl::StatusOr<WorkPtr> AllToAllV(const void* send, const std::vector<int64_t>& send_counts,
                                            const std::vector<int64_t>& send_displs, void* recv,
                                            const std::vector<int64_t>& recv_counts,
                                            const std::vector<int64_t>& recv_displs,
                                            DType dtype) = 0;
  // Point-to-point. When p2p_pairs_by_tag(), a send matches the recv on
  // `peer` with the same tag and messages with one (peer, tag) arrive in
  // order. Otherwise (NCCL) the tag is only checked for range: the k-th send
  // from a to b matches b's k-th recv from a, in the order posted, so code
  // that runs on every backend posts each (sender, receiver) pair's sends and
  // recvs in the same order on both sides (tests model it on threads:
  // comm/local LocalOptions::p2p_pair_by_order).
  virtual absl::StatusOr<WorkPtr> Send(const void* buf, int64_t count, DType dtype, int peer,
                                       int tag = 0) = 0;
  virtual absl::StatusOr<WorkPtr> Recv(void* buf, int64_t count, DType dtype, int peer,
                                       int tag = 0) = 0;
  virtual absl::StatusOr<WorkPtr> Barrier() = 0;
  // Whether Send/Recv pair by tag (above); false: by order per peer pair.
  virtual bool p2p_pairs_by_tag() const { return true; }

  // Sets up the point-to-point connections with `peers` (both directions)
  // before their first Send/Recv. Blocking; collective over the ranks named:
  // when rank a names b, b names a and both call it at the same point of
  // their programs. Call it once, before any Send/Recv, wherever the two
  // sides' first batches of point-to-point calls differ (a pipeline stage
  // that sends two micro-batches and receives one gradient in one batch
  // while its neighbour receives one micro-batch): NCCL connects a pair
  // lazily inside the first grouped call that uses it and pairs the two
  // sides' connection messages by count, so such first batches fail
  // ("Message truncated") or deadlock. Host backends connect eagerly: the
  // default checks the peers and returns. InvalidArgument for a peer out of
  // range, this rank, or a repeated peer.
  virtual absl::Status ConnectPeers(const std::vector<int>& peers);

  // Collective over this communicator: every rank passes the same `groups`
  // (lists of ranks of this communicator; disjoint; order within a list gives
  // the new ranks) and the same `name` prefix. Returns this rank's
  // sub-communicator, or nullptr when this rank is in no group. Blocks until
  // the sub-communicators are established.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Split(
      const std::vector<std::vector<int>>& groups, const std::string& name) = 0;
};

// Convenience: issue and wait. Returns the first error.
absl::Status Run(absl::StatusOr<WorkPtr> work);

}  // namespace gtp::comm
