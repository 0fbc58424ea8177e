// comm/nccl/internal/nccl_state.h — what one NCCL communicator, its Works and
// its watchdog share: the raw communicator and its streams, the queued
// point-to-point batch, the pending-call list the watchdog follows, and the
// failure (first error wins, the dead rank named from the heartbeats).
// Private to comm/nccl: nccl_communicator.cc builds the Communicator on it.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "comm/nccl/nccl_communicator.h"
#include "comm/store/liveness.h"
#include "comm/store/tcp_store.h"
#include "core/cuda_runtime.h"
#include "core/dtype.h"

namespace gtp::comm::nccl_internal {

// A completion event, shared by a Work and the watchdog.
// `captured`: recorded while the compute stream was being captured into a
// CUDA graph — a node of that graph, not an event the host can query; its
// collective runs (and is ordered) at each launch of the graph.
struct Done {
  CudaEventPtr event;
  bool captured = false;
};

absl::StatusOr<std::shared_ptr<Done>> NewDone();

// Queued point-to-point calls, launched together.
struct P2PItem {
  bool is_send;
  void* buf;
  int64_t count;
  DType dtype;
  int peer, tag;
};
struct Batch {
  std::vector<P2PItem> items;
  std::shared_ptr<Done> done;  // set once launched
};

// Enqueues NCCL calls on the comm stream; `deadline` bounds settling them.
using EnqueueFn = std::function<absl::Status(ncclComm_t, cudaStream_t, absl::Time deadline)>;

// Everything a communicator, its Works and its watchdog share.
//
// Locking: mu_ serialises enqueueing (NCCL calls from the user's thread);
// wd_mu_ guards the failure, the pending list and the watchdog. Aborting
// takes only wd_mu_, so the watchdog can abort a call that blocks inside
// NCCL while holding mu_.
class State {
 public:
  // Starts the watchdog (and, with options.exit_after_failure, the deadman).
  State(ncclComm_t comm, int rank, int size, int device, std::string name, cudaStream_t compute,
        Stream comm_stream, Event ready, const NcclOptions& options,
        std::shared_ptr<KeyValueStore> store, std::shared_ptr<TcpStoreServer> store_host,
        std::shared_ptr<Liveness> liveness);
  // Stops the threads, lets queued work finish (bounded), then destroys the
  // communicator (aborts it when work is still queued).
  ~State();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  const std::string& name() const { return name_; }
  const NcclOptions& options() const { return options_; }
  cudaStream_t compute() const { return compute_; }
  std::shared_ptr<KeyValueStore> store() const { return store_; }
  std::shared_ptr<TcpStoreServer> store_host() const { return store_host_; }
  std::shared_ptr<Liveness> liveness() const { return liveness_; }

  std::string Prefix() const { return absl::StrCat("group ", name_, " (nccl): "); }

  // Orders the comm stream after the compute stream, runs `fn` (which
  // enqueues on the comm stream), and records a completion event the
  // watchdog follows. Flushes queued p2p first.
  absl::StatusOr<std::shared_ptr<Done>> Enqueue(const std::string& label, const EnqueueFn& fn);

  // Queues a p2p call; returns its batch.
  absl::StatusOr<std::shared_ptr<Batch>> QueueP2P(const P2PItem& item);

  // Launches the queued p2p calls as one NCCL group.
  absl::Status FlushP2P();

  // The communicator's failure (OK while it works). Once it failed, waits
  // for the diagnosis of who is gone (a few heartbeat periods) first.
  absl::Status Failure();

  // Makes the compute stream wait for `d`. Never blocks the host.
  absl::Status OrderCompute(const Done& d);

  // Polls `d` until it completed, failed, or `timeout` passed (then aborts).
  absl::Status Block(const Done& d, const std::string& label, absl::Duration timeout);

  // A captured collective reads as complete: Wait then only orders the
  // compute stream after it (a dependency inside the graph).
  bool Query(const Done& d);

  // Runs `fn` with the raw communicator on a helper thread (Split), aborting
  // the communicator when it takes longer than the timeout.
  // `fn` must own what it touches: it may outlive the call when stuck.
  absl::Status WithComm(std::function<absl::Status(ncclComm_t)> fn, const std::string& what);

  // Fails the communicator for good (the first error wins) and aborts the
  // NCCL communicator so that its kernels and blocked calls return.
  absl::Status Fail(absl::Status st);

 private:
  struct Pending {
    std::shared_ptr<Done> done;
    absl::Time start;
    std::string label;
    bool recorded;  // the completion event has been recorded
  };

  absl::StatusOr<std::shared_ptr<Done>> EnqueueLocked(const std::string& label, const EnqueueFn& fn)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first failure wins; NCCL never says which peer is gone, so the
  // liveness heartbeats name it (appended to the message by a helper thread
  // within a few heartbeat periods; Failure waits for it).
  absl::Status FailLocked(absl::Status st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(wd_mu_);
  // The watchdog: retires completed calls, fails the communicator on an
  // asynchronous NCCL error or a call older than the timeout.
  void Watch();
  // The exit_after_failure guard (NcclOptions): unless the communicator is
  // destroyed first, ends the process once the grace period has passed.
  void Reap(const std::string& what);
  // The watchdog's own guard (with exit_after_failure); nccl_state.cc says why.
  void Deadman();
  // Before Reap or Deadman end the process: when it serves the rendezvous
  // store, waits (at most one more exit_after_failure) until it is the
  // store's last client, so that peers still diagnosing read the heartbeats
  // instead of a closed store (which they would blame on this rank).
  void LingerAsStoreHost();

  const ncclComm_t comm_;
  const int rank_, size_, device_;
  const std::string name_;
  cudaStream_t compute_;
  Stream comm_stream_;
  Event ready_;
  const NcclOptions options_;
  std::shared_ptr<KeyValueStore> store_;
  std::shared_ptr<TcpStoreServer> store_host_;  // the store this process serves (rank 0), or null
  std::shared_ptr<Liveness> liveness_;  // the world's heartbeats (null: no diagnosis)
  std::atomic<bool> aborted_{false};

  absl::Mutex mu_;
  std::shared_ptr<Batch> batch_ ABSL_GUARDED_BY(mu_);

  absl::Mutex wd_mu_ ABSL_ACQUIRED_AFTER(mu_);
  bool stop_ ABSL_GUARDED_BY(wd_mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(wd_mu_);
  std::deque<Pending> pending_ ABSL_GUARDED_BY(wd_mu_);
  bool diagnosing_ ABSL_GUARDED_BY(wd_mu_) = false;
  std::thread watchdog_;
  std::atomic<int64_t> watch_beat_ns_{0};  // the watchdog's last round (Deadman)
  std::thread deadman_;
  std::thread diagnosis_;
  absl::Mutex reaper_mu_;
  bool reaper_stop_ ABSL_GUARDED_BY(reaper_mu_) = false;
  bool deadman_stop_ ABSL_GUARDED_BY(reaper_mu_) = false;
  std::thread reaper_;
};

}  // namespace gtp::comm::nccl_internal
