#include "comm/nccl/nccl_communicator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <atomic>
#include <cstring>
#include <deque>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "comm/env/launch_env.h"
#include "comm/internal/ops.h"
#include "comm/nccl/accumulate_kernels.h"
#include "comm/nccl/internal/nccl_calls.h"
#include "comm/store/liveness.h"
#include "comm/store/tcp_store.h"
#include "core/cuda_runtime.h"
#include "core/status.h"

namespace gtp::comm {

namespace {

using internal::OpDesc;
using internal::OpKind;
using nccl_internal::CheckDeviceBuffer;
using nccl_internal::Cuda;
using nccl_internal::F32Accumulate;
using nccl_internal::NcclOp;
using nccl_internal::NcclType;
using nccl_internal::Settle;
using nccl_internal::WithTimeout;

// A completion event, shared by a Work and the watchdog.
// `captured`: recorded while the compute stream was being captured into a
// CUDA graph — a node of that graph, not an event the host can query; its
// collective runs (and is ordered) at each launch of the graph.
struct Done {
  CudaEventPtr event;
  bool captured = false;
};

absl::StatusOr<std::shared_ptr<Done>> NewDone() {
  cudaEvent_t e = nullptr;
  GTP_RETURN_IF_ERROR(Cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
  auto d = std::make_shared<Done>();
  d->event.reset(e);
  return d;
}

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

// Everything a communicator, its Works and its watchdog share.
//
// Locking: mu_ serialises enqueueing (NCCL calls from the user's thread);
// wd_mu_ guards the failure, the pending list and the watchdog. Aborting
// takes only wd_mu_, so the watchdog can abort a call that blocks inside
// NCCL while holding mu_.
class State {
 public:
  State(ncclComm_t comm, int rank, int size, int device, std::string name, cudaStream_t compute,
        Stream comm_stream, Event ready, const NcclOptions& options,
        std::shared_ptr<KeyValueStore> store, std::shared_ptr<void> keepalive,
        std::shared_ptr<Liveness> liveness)
      : comm_(comm), rank_(rank), size_(size), device_(device), name_(std::move(name)),
        compute_(compute), comm_stream_(std::move(comm_stream)), ready_(std::move(ready)),
        options_(options), store_(std::move(store)), keepalive_(std::move(keepalive)),
        liveness_(std::move(liveness)) {
    watch_beat_ns_ = absl::GetCurrentTimeNanos();
    watchdog_ = std::thread([this] { Watch(); });
    if (options_.exit_after_failure > absl::ZeroDuration()) {
      deadman_ = std::thread([this] { Deadman(); });
    }
  }

  ~State() {
    // The deadman stays until the end: joining a watchdog stuck in CUDA, or
    // destroying a communicator whose peer is gone, can block too. Each
    // phase below starts it a fresh limit.
    watch_beat_ns_ = absl::GetCurrentTimeNanos();
    {
      absl::MutexLock l(&wd_mu_);
      stop_ = true;
    }
    watchdog_.join();
    if (diagnosis_.joinable()) diagnosis_.join();
    {
      absl::MutexLock l(&reaper_mu_);
      reaper_stop_ = true;
    }
    if (reaper_.joinable()) reaper_.join();
    if (!aborted_) {
      // Let queued work finish (bounded), then free the communicator.
      watch_beat_ns_ = absl::GetCurrentTimeNanos();
      cudaSetDevice(device_);
      absl::Time until = absl::Now() + std::min(options_.timeout, absl::Seconds(30));
      while (cudaStreamQuery(comm_stream_.get()) == cudaErrorNotReady && absl::Now() < until) {
        absl::SleepFor(absl::Microseconds(100));
      }
      if (cudaStreamQuery(comm_stream_.get()) == cudaErrorNotReady) {
        ncclCommAbort(comm_);
      } else {
        ncclCommDestroy(comm_);
      }
    }
    {
      absl::MutexLock l(&reaper_mu_);
      deadman_stop_ = true;
    }
    if (deadman_.joinable()) deadman_.join();
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  const std::string& name() const { return name_; }
  const NcclOptions& options() const { return options_; }
  cudaStream_t compute() const { return compute_; }
  std::shared_ptr<KeyValueStore> store() const { return store_; }
  std::shared_ptr<void> keepalive() const { return keepalive_; }
  std::shared_ptr<Liveness> liveness() const { return liveness_; }

  std::string Prefix() const { return absl::StrCat("group ", name_, " (nccl): "); }

  // Orders the comm stream after the compute stream, runs `fn` (which
  // enqueues on the comm stream), and records a completion event the
  // watchdog follows. Flushes queued p2p first.
  absl::StatusOr<std::shared_ptr<Done>> Enqueue(
      const std::string& label,
      const std::function<absl::Status(ncclComm_t, cudaStream_t, absl::Time)>& fn) {
    GTP_RETURN_IF_ERROR(FlushP2P());
    absl::MutexLock l(&mu_);
    return EnqueueLocked(label, fn);
  }

  // Queues a p2p call; returns its batch.
  absl::StatusOr<std::shared_ptr<Batch>> QueueP2P(const P2PItem& item) {
    GTP_RETURN_IF_ERROR(Failure());
    absl::MutexLock l(&mu_);
    if (!batch_) batch_ = std::make_shared<Batch>();
    batch_->items.push_back(item);
    return batch_;
  }

  // Launches the queued p2p calls as one NCCL group.
  absl::Status FlushP2P() {
    absl::MutexLock l(&mu_);
    if (!batch_) return Failure();
    std::shared_ptr<Batch> b = std::move(batch_);
    batch_.reset();
    // In the order posted: NCCL pairs a peer pair's messages by order, and
    // the two sides' batches need not end at the same call, so a sort
    // within a batch (by tag, say) would reorder one side only
    // (Communicator::p2p_pairs_by_tag).
    const std::vector<P2PItem>& items = b->items;
    auto done = EnqueueLocked(
        absl::StrCat(Prefix(), "send/recv batch of ", items.size()),
        [&](ncclComm_t comm, cudaStream_t s, absl::Time deadline) -> absl::Status {
          GTP_RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart"));
          for (const P2PItem& it : items) {
            ncclResult_t r = it.is_send
                                 ? ncclSend(it.buf, it.count * SizeOf(it.dtype), ncclUint8, it.peer, comm, s)
                                 : ncclRecv(it.buf, it.count * SizeOf(it.dtype), ncclUint8, it.peer, comm, s);
            if (r != ncclSuccess && r != ncclInProgress) {
              ncclGroupEnd();
              return NcclStatus(r, it.is_send ? "ncclSend" : "ncclRecv");
            }
          }
          return Settle(comm, ncclGroupEnd(), deadline, Prefix() + "send/recv group");
        });
    if (!done.ok()) return done.status();
    b->done = *done;
    return absl::OkStatus();
  }

  // The communicator's failure (OK while it works). Once it failed, waits
  // for the diagnosis of who is gone (a few heartbeat periods) first.
  absl::Status Failure() {
    absl::MutexLock l(&wd_mu_);
    wd_mu_.Await(absl::Condition(
        +[](bool* diagnosing) { return !*diagnosing; }, &diagnosing_));
    return failure_;
  }

  // Makes the compute stream wait for `d`. Never blocks the host.
  absl::Status OrderCompute(const Done& d) {
    GTP_RETURN_IF_ERROR(Failure());
    return Cuda(cudaStreamWaitEvent(compute_, d.event.get(), 0), "cudaStreamWaitEvent");
  }

  // Polls `d` until it completed, failed, or `timeout` passed (then aborts).
  absl::Status Block(const Done& d, const std::string& label, absl::Duration timeout) {
    if (d.captured) {
      return absl::FailedPreconditionError(absl::StrCat(
          label, ": the host cannot wait for a collective inside a CUDA graph capture "
                 "(train.cuda_graphs=off runs this step without graphs)"));
    }
    absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      GTP_RETURN_IF_ERROR(Failure());
      cudaError_t q = cudaEventQuery(d.event.get());
      if (q == cudaSuccess) return absl::OkStatus();
      if (q != cudaErrorNotReady) return Fail(CudaStatus(q, label));
      ncclResult_t a = ncclSuccess;
      if (!aborted_) ncclCommGetAsyncError(comm_, &a);
      if (a != ncclSuccess && a != ncclInProgress) {
        return Fail(NcclStatus(a, label + ": asynchronous NCCL error; communicator aborted"));
      }
      if (absl::Now() > deadline) {
        return Fail(absl::DeadlineExceededError(absl::StrCat(
            label, ": not complete after ", absl::FormatDuration(timeout),
            "; communicator aborted (a rank is missing, stuck or disagrees on the call)")));
      }
      absl::SleepFor(absl::Microseconds(20));
    }
  }

  // A captured collective reads as complete: Wait then only orders the
  // compute stream after it (a dependency inside the graph).
  bool Query(const Done& d) {
    if (!Failure().ok() || d.captured) return true;
    return cudaEventQuery(d.event.get()) != cudaErrorNotReady;
  }

  // Runs `fn` with the raw communicator on a helper thread (Split), aborting
  // the communicator when it takes longer than the timeout.
  // `fn` must own what it touches: it may outlive the call when stuck.
  absl::Status WithComm(std::function<absl::Status(ncclComm_t)> fn, const std::string& what) {
    GTP_RETURN_IF_ERROR(FlushP2P());
    absl::MutexLock l(&mu_);
    GTP_RETURN_IF_ERROR(Failure());
    const int device = device_;
    ncclComm_t comm = comm_;
    absl::Status st = WithTimeout(
        [fn, device, comm]() {
          cudaSetDevice(device);
          return fn(comm);
        },
        options_.timeout,
        [this, what] {
          Fail(absl::DeadlineExceededError(what + ": timed out; communicator aborted")).IgnoreError();
        },
        what);
    if (!st.ok()) return Fail(st);
    return st;
  }

  // Fails the communicator for good (the first error wins) and aborts the
  // NCCL communicator so that its kernels and blocked calls return.
  absl::Status Fail(absl::Status st) {
    {
      absl::MutexLock l(&wd_mu_);
      FailLocked(std::move(st)).IgnoreError();
    }
    return Failure();
  }

 private:
  absl::StatusOr<std::shared_ptr<Done>> EnqueueLocked(
      const std::string& label,
      const std::function<absl::Status(ncclComm_t, cudaStream_t, absl::Time)>& fn)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    GTP_RETURN_IF_ERROR(Failure());
    GTP_RETURN_IF_ERROR(Cuda(cudaSetDevice(device_), "cudaSetDevice"));
    GTP_ASSIGN_OR_RETURN(std::shared_ptr<Done> d, NewDone());
    // Under capture the comm stream joins the graph here (it waits on the
    // compute stream's captured event) and rejoins it when a Wait orders
    // the compute stream after `d`.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    GTP_RETURN_IF_ERROR(Cuda(cudaStreamIsCapturing(compute_, &capture), "cudaStreamIsCapturing"));
    d->captured = capture != cudaStreamCaptureStatusNone;
    ready_.Record(compute_);
    ready_.WaitOn(comm_stream_.get());
    if (!d->captured) {
      // Watched from here on: a call that blocks in NCCL (a peer that never
      // connects) is aborted by the watchdog. A captured call is not (its
      // event is a graph node): the caller bounds each launch of the graph
      // with a collective it does watch (recipes/trainer/step.cc), and the
      // watchdog still sees NCCL's asynchronous errors.
      absl::MutexLock l(&wd_mu_);
      pending_.push_back({d, absl::Now(), label, /*recorded=*/false});
    }
    absl::Status st = fn(comm_, comm_stream_.get(), absl::Now() + options_.timeout);
    if (!st.ok()) {
      return Fail(absl::Status(st.code(), absl::StrCat(label, ": ", st.message())));
    }
    GTP_RETURN_IF_ERROR(Cuda(cudaEventRecord(d->event.get(), comm_stream_.get()), "cudaEventRecord"));
    if (d->captured) return d;
    absl::MutexLock l(&wd_mu_);
    for (auto& p : pending_) {
      if (p.done == d) p.recorded = true;
    }
    return d;
  }

  // The first failure wins; NCCL never says which peer is gone, so the
  // liveness heartbeats name it (appended to the message by a helper thread
  // within a few heartbeat periods; Failure waits for it).
  absl::Status FailLocked(absl::Status st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(wd_mu_) {
    if (failure_.ok()) {
      failure_ = st;
      if (options_.exit_after_failure > absl::ZeroDuration() && !reaper_.joinable()) {
        // Its own lock and a copy of the message: it must act even when the
        // abort below never returns.
        reaper_ = std::thread([this, what = st.ToString()] { Reap(what); });
      }
      if (liveness_ && !diagnosis_.joinable()) {
        diagnosing_ = true;
        diagnosis_ = std::thread([this] {
          std::string who = liveness_->Diagnose();
          absl::MutexLock l(&wd_mu_);
          failure_ = absl::Status(failure_.code(), absl::StrCat(failure_.message(), "; ", who));
          diagnosing_ = false;
        });
      }
    }
    if (!aborted_.exchange(true)) ncclCommAbort(comm_);
    return failure_;
  }

  void Watch() {
    cudaSetDevice(device_);
    absl::MutexLock l(&wd_mu_);
    for (;;) {
      if (wd_mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Milliseconds(20))) return;
      watch_beat_ns_ = absl::GetCurrentTimeNanos();
      if (!failure_.ok()) continue;
      while (!pending_.empty() && pending_.front().recorded &&
             cudaEventQuery(pending_.front().done->event.get()) == cudaSuccess) {
        pending_.pop_front();
      }
      ncclResult_t a = ncclSuccess;
      ncclCommGetAsyncError(comm_, &a);
      if (a != ncclSuccess && a != ncclInProgress) {
        std::string what = pending_.empty() ? Prefix() + "idle" : pending_.front().label;
        FailLocked(NcclStatus(a, absl::StrCat(what, ": asynchronous NCCL error; communicator aborted")))
            .IgnoreError();
        continue;
      }
      if (!pending_.empty() && absl::Now() - pending_.front().start > options_.timeout) {
        FailLocked(absl::DeadlineExceededError(absl::StrCat(
                       pending_.front().label, ": not complete after ",
                       absl::FormatDuration(options_.timeout),
                       "; communicator aborted (a rank is missing, stuck or disagrees on the call)")))
            .IgnoreError();
      }
    }
  }

  // The exit_after_failure guard (NcclOptions): unless the communicator is
  // destroyed first, ends the process once the grace period has passed.
  void Reap(const std::string& what) {
    {
      absl::MutexLock l(&reaper_mu_);
      if (reaper_mu_.AwaitWithTimeout(absl::Condition(&reaper_stop_), options_.exit_after_failure)) {
        return;
      }
    }
    std::string who = liveness_ ? liveness_->Diagnose() : std::string("no heartbeats to tell who");
    std::fprintf(stderr,
                 "error: %s; %s (this rank was still blocked %s after the failure: exiting)\n",
                 what.c_str(), who.c_str(), absl::FormatDuration(options_.exit_after_failure).c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    std::_Exit(1);
  }

  // The watchdog's own guard (with exit_after_failure): the watchdog polls
  // CUDA events and NCCL, and a CUDA call can block behind a device that a
  // dead peer's collective holds (seen on one H200: survivors of a SIGKILLed
  // rank silent for 70 s with a 30 s timeout, the watchdog never failing the
  // communicator). This thread makes no CUDA or NCCL call and takes no lock
  // the watchdog holds: when the watchdog has not completed a round for the
  // timeout plus the exit grace, it prints what it knows and ends the process
  // (the destructor's phases restart that clock: ~State).
  void Deadman() {
    const absl::Duration limit = options_.timeout + options_.exit_after_failure;
    // Who is gone, asked early: at the limit every survivor's deadman fires
    // at once, and whichever exits first (rank 0 serves the store) would be
    // named by the others. A watchdog round takes 20 ms; 10 s of silence is
    // already a stall, and the dead rank's heartbeat is stale by then.
    const absl::Duration diagnose_after = std::min(options_.timeout / 2, absl::Seconds(10));
    std::string who;
    for (;;) {
      {
        absl::MutexLock l(&reaper_mu_);
        if (reaper_mu_.AwaitWithTimeout(absl::Condition(&deadman_stop_), absl::Milliseconds(250))) {
          return;
        }
      }
      const absl::Duration silent =
          absl::Nanoseconds(absl::GetCurrentTimeNanos() - watch_beat_ns_.load());
      if (silent >= diagnose_after && who.empty()) {
        who = liveness_ ? liveness_->Diagnose() : std::string("no heartbeats to tell who");
      }
      if (silent < limit) continue;
      std::fprintf(stderr,
                   "error: %sthe communicator's watchdog has been blocked for %s (in a CUDA or "
                   "NCCL call: a peer is likely gone, or the device is stuck); %s (exiting)\n",
                   Prefix().c_str(), absl::FormatDuration(silent).c_str(), who.c_str());
      std::fflush(stderr);
      std::fflush(stdout);
      std::_Exit(1);
    }
  }

  struct Pending {
    std::shared_ptr<Done> done;
    absl::Time start;
    std::string label;
    bool recorded;  // the completion event has been recorded
  };

  const ncclComm_t comm_;
  const int rank_, size_, device_;
  const std::string name_;
  cudaStream_t compute_;
  Stream comm_stream_;
  Event ready_;
  const NcclOptions options_;
  std::shared_ptr<KeyValueStore> store_;
  std::shared_ptr<void> keepalive_;  // e.g. the TCP store server on rank 0
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

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<State> s, std::shared_ptr<Done> done, std::string label)
      : s_(std::move(s)), done_(std::move(done)), label_(std::move(label)) {}
  NcclWork(std::shared_ptr<State> s, std::shared_ptr<Batch> batch, std::string label)
      : s_(std::move(s)), batch_(std::move(batch)), label_(std::move(label)) {}

  absl::Status Wait(absl::Duration) override {
    GTP_RETURN_IF_ERROR(Launched());
    return s_->OrderCompute(*done_);
  }
  bool Test() override {
    if (!Launched().ok()) return true;
    return s_->Query(*done_);
  }
  absl::Status Synchronize() override {
    GTP_RETURN_IF_ERROR(Launched());
    return s_->Block(*done_, label_, s_->options().timeout);
  }

 private:
  absl::Status Launched() {
    if (done_) return absl::OkStatus();
    GTP_RETURN_IF_ERROR(s_->FlushP2P());
    if (!batch_->done) return s_->Failure();
    done_ = batch_->done;
    return absl::OkStatus();
  }

  std::shared_ptr<State> s_;
  std::shared_ptr<Done> done_;
  std::shared_ptr<Batch> batch_;
  std::string label_;
};

class NcclCommunicator : public Communicator {
 public:
  explicit NcclCommunicator(std::shared_ptr<State> s) : s_(std::move(s)) {}

  int rank() const override { return s_->rank(); }
  int size() const override { return s_->size(); }
  std::string name() const override { return s_->name(); }
  std::string backend() const override { return "nccl"; }
  bool p2p_pairs_by_tag() const override { return false; }
  absl::Duration timeout() const override { return s_->options().timeout; }

  absl::StatusOr<WorkPtr> AllGather(const void* send, void* recv, int64_t count,
                                    DType dtype) override {
    OpDesc d{OpKind::kAllGather, count, dtype};
    GTP_RETURN_IF_ERROR(Check(d, {internal::CheckCount(count),
                                  CheckDeviceBuffer(count, send, "send"),
                                  CheckDeviceBuffer(count, recv, "recv")}));
    const int n = size();
    return Issue(d, [=](ncclComm_t c, cudaStream_t s, absl::Time dl) -> absl::Status {
      if (n == 1) return CopyAsync(recv, send, count * Bytes(dtype), s);
      return Settle(c, ncclAllGather(send, recv, count * Bytes(dtype), ncclUint8, c, s), dl,
                    "ncclAllGather");
    });
  }

  absl::StatusOr<WorkPtr> ReduceScatter(const void* send, void* recv, int64_t count, DType dtype,
                                        ReduceOp op) override {
    OpDesc d{OpKind::kReduceScatter, count, dtype, op};
    GTP_RETURN_IF_ERROR(Check(d, {internal::CheckCount(count), internal::CheckReducible(dtype, op),
                                  CheckDeviceBuffer(count, send, "send"),
                                  CheckDeviceBuffer(count, recv, "recv")}));
    const int n = size();
    return Issue(d, [=](ncclComm_t c, cudaStream_t s, absl::Time dl) -> absl::Status {
      // One rank: a copy, no NCCL launch.
      if (n == 1) return CopyAsync(recv, send, count * Bytes(dtype), s);
      if (UseF32(dtype, op)) {
        return F32Accumulate(true, c, n, send, recv, count, dtype, op, s,
                             [&](ncclResult_t r) { return Settle(c, r, dl, "ncclReduceScatter"); });
      }
      GTP_RETURN_IF_ERROR(Settle(
          c, ncclReduceScatter(send, recv, count, NcclType(dtype), NcclOp(op), c, s), dl,
          "ncclReduceScatter"));
      return MeanDivide(dtype, op, recv, count, n, s);
    });
  }

  absl::StatusOr<WorkPtr> AllReduce(const void* send, void* recv, int64_t count, DType dtype,
                                    ReduceOp op) override {
    OpDesc d{OpKind::kAllReduce, count, dtype, op};
    GTP_RETURN_IF_ERROR(Check(d, {internal::CheckCount(count), internal::CheckReducible(dtype, op),
                                  CheckDeviceBuffer(count, send, "send"),
                                  CheckDeviceBuffer(count, recv, "recv")}));
    const int n = size();
    return Issue(d, [=](ncclComm_t c, cudaStream_t s, absl::Time dl) -> absl::Status {
      // One rank: a copy, no NCCL launch.
      if (n == 1) return CopyAsync(recv, send, count * Bytes(dtype), s);
      if (UseF32(dtype, op)) {
        return F32Accumulate(false, c, n, send, recv, count, dtype, op, s,
                             [&](ncclResult_t r) { return Settle(c, r, dl, "ncclAllReduce"); });
      }
      GTP_RETURN_IF_ERROR(Settle(
          c, ncclAllReduce(send, recv, count, NcclType(dtype), NcclOp(op), c, s), dl,
          "ncclAllReduce"));
      return MeanDivide(dtype, op, recv, count, n, s);
    });
  }

  absl::StatusOr<WorkPtr> Broadcast(void* buf, int64_t count, DType dtype, int root) override {
    OpDesc d{OpKind::kBroadcast, count, dtype, ReduceOp::kSum, root};
    GTP_RETURN_IF_ERROR(Check(d, {internal::CheckCount(count), internal::CheckRoot(root, size()),
                                  CheckDeviceBuffer(count, buf, "buf")}));
    return Issue(d, [=](ncclComm_t c, cudaStream_t s, absl::Time dl) {
      return Settle(c, ncclBroadcast(buf, buf, count * Bytes(dtype), ncclUint8, root, c, s), dl,
                    "ncclBroadcast");
    });
  }

  absl::StatusOr<WorkPtr> AllToAll(const void* send, void* recv, int64_t count,
                                   DType dtype) override {
    OpDesc d{OpKind::kAllToAll, count, dtype};
    const int64_t total = count * size() * Bytes(dtype);
    GTP_RETURN_IF_ERROR(Check(d, {internal::CheckCount(count),
                                  CheckDeviceBuffer(count, send, "send"),
                                  CheckDeviceBuffer(count, recv, "recv"),
                                  internal::CheckNoOverlap(send, total, recv, total, "all_to_all")}));
    std::vector<int64_t> c(size(), count), disp(size());
    for (int r = 0; r < size(); ++r) disp[r] = r * count;
    return Exchange(d, send, c, disp, recv, c, disp, dtype);
  }

  absl::StatusOr<WorkPtr> AllToAllV(const void* send, const std::vector<int64_t>& send_counts,
                                    const std::vector<int64_t>& send_displs, void* recv,
                                    const std::vector<int64_t>& recv_counts,
                                    const std::vector<int64_t>& recv_displs,
                                    DType dtype) override {
    OpDesc d{OpKind::kAllToAllV, -1, dtype};
    GTP_RETURN_IF_ERROR(Check(d, {internal::CheckAllToAllV(size(), send_counts, send_displs,
                                                           recv_counts, recv_displs)}));
    return Exchange(d, send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype);
  }

  absl::StatusOr<WorkPtr> Send(const void* buf, int64_t count, DType dtype, int peer,
                               int tag) override {
    return P2P(true, const_cast<void*>(buf), count, dtype, peer, tag);
  }
  absl::StatusOr<WorkPtr> Recv(void* buf, int64_t count, DType dtype, int peer, int tag) override {
    return P2P(false, buf, count, dtype, peer, tag);
  }

  absl::StatusOr<WorkPtr> Barrier() override {
    // A one-element all-reduce; Synchronize on its Work blocks the host.
    OpDesc d{OpKind::kBarrier};
    return Issue(d, [](ncclComm_t c, cudaStream_t s, absl::Time dl) -> absl::Status {
      void* tmp = nullptr;
      GTP_RETURN_IF_ERROR(Cuda(cudaMallocAsync(&tmp, 4, s), "cudaMallocAsync"));
      GTP_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(tmp, 0, 4, s), "cudaMemsetAsync"));
      absl::Status st = Settle(c, ncclAllReduce(tmp, tmp, 1, ncclInt32, ncclSum, c, s), dl,
                               "ncclAllReduce (barrier)");
      cudaFreeAsync(tmp, s);
      return st;
    });
  }

  // One byte each way with every peer, in one group: NCCL sets up the send
  // and the receive connections of every pair here, the same on both sides,
  // so later batches of any shape find them made (communicator.h).
  absl::Status ConnectPeers(const std::vector<int>& peers) override {
    GTP_RETURN_IF_ERROR(Communicator::ConnectPeers(peers));
    if (peers.empty()) return absl::OkStatus();
    std::string label = absl::StrCat(s_->Prefix(), "connect peers");
    for (int p : peers) absl::StrAppend(&label, " ", p);
    const std::vector<int> ps = peers;
    GTP_ASSIGN_OR_RETURN(
        std::shared_ptr<Done> done,
        s_->Enqueue(label, [ps](ncclComm_t c, cudaStream_t s, absl::Time dl) -> absl::Status {
          const size_t n = ps.size();
          char* buf = nullptr;
          GTP_RETURN_IF_ERROR(Cuda(cudaMallocAsync(reinterpret_cast<void**>(&buf), 2 * n, s),
                                   "cudaMallocAsync"));
          absl::Status st = Cuda(cudaMemsetAsync(buf, 0, 2 * n, s), "cudaMemsetAsync");
          if (st.ok()) st = NcclStatus(ncclGroupStart(), "ncclGroupStart");
          if (st.ok()) {
            for (size_t i = 0; i < n && st.ok(); ++i) {
              for (ncclResult_t r : {ncclSend(buf + 2 * i, 1, ncclUint8, ps[i], c, s),
                                     ncclRecv(buf + 2 * i + 1, 1, ncclUint8, ps[i], c, s)}) {
                if (r != ncclSuccess && r != ncclInProgress) st = NcclStatus(r, "ncclSend/ncclRecv");
              }
            }
            absl::Status end = Settle(c, ncclGroupEnd(), dl, "connect group");
            if (st.ok()) st = end;
          }
          absl::Status freed = Cuda(cudaFreeAsync(buf, s), "cudaFreeAsync");
          return st.ok() ? freed : st;
        }));
    return s_->Block(*done, label, s_->options().timeout);
  }

  absl::StatusOr<std::unique_ptr<Communicator>> Split(const std::vector<std::vector<int>>& groups,
                                                      const std::string& name) override {
    const std::string what = absl::StrCat(s_->Prefix(), "split '", name, "'");
    absl::Status bad = internal::CheckGroups(groups, size());
    if (!bad.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", bad.message()));
    int color = NCCL_SPLIT_NOCOLOR, key = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      for (size_t i = 0; i < groups[g].size(); ++i) {
        if (groups[g][i] == rank()) {
          color = static_cast<int>(g);
          key = static_cast<int>(i);
        }
      }
    }
    // Agreement: every rank's hash of (groups, name), gathered on the device.
    const int64_t mine = static_cast<int64_t>(internal::HashGroups(groups, name));
    const int n = size();
    std::vector<int64_t> all(n);
    GTP_RETURN_IF_ERROR(Cuda(cudaSetDevice(s_->device()), "cudaSetDevice"));
    int64_t* dev = nullptr;
    GTP_RETURN_IF_ERROR(Cuda(cudaMalloc(reinterpret_cast<void**>(&dev), (n + 1) * 8), "cudaMalloc"));
    std::unique_ptr<int64_t, void (*)(int64_t*)> free_dev(dev, [](int64_t* p) { cudaFree(p); });
    GTP_RETURN_IF_ERROR(Cuda(cudaMemcpy(dev + n, &mine, 8, cudaMemcpyHostToDevice), "cudaMemcpy"));
    GTP_ASSIGN_OR_RETURN(WorkPtr w, AllGather(dev + n, dev, 1, DType::kI64));
    GTP_RETURN_IF_ERROR(w->Synchronize());
    GTP_RETURN_IF_ERROR(Cuda(cudaMemcpy(all.data(), dev, n * 8, cudaMemcpyDeviceToHost), "cudaMemcpy"));
    for (int r = 0; r < n; ++r) {
      if (all[r] != mine) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": rank ", r,
                                                       " passed different groups or name than rank ",
                                                       rank()));
      }
    }
    auto child_box = std::make_shared<ncclComm_t>(nullptr);
    GTP_RETURN_IF_ERROR(s_->WithComm(
        [child_box, color, key, what](ncclComm_t c) {
          ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
          return NcclStatus(ncclCommSplit(c, color, key, child_box.get(), &cfg), what);
        },
        what));
    ncclComm_t child = *child_box;
    if (color == NCCL_SPLIT_NOCOLOR) return std::unique_ptr<Communicator>();
    GTP_ASSIGN_OR_RETURN(Stream stream, Stream::Create(s_->device()));
    GTP_ASSIGN_OR_RETURN(Event ready, Event::Create());
    auto st = std::make_shared<State>(child, key, static_cast<int>(groups[color].size()),
                                      s_->device(), internal::SubGroupName(name, groups[color]),
                                      s_->compute(), std::move(stream), std::move(ready),
                                      s_->options(), s_->store(), s_->keepalive(), s_->liveness());
    return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(std::move(st)));
  }

 private:
  static int64_t Bytes(DType d) { return static_cast<int64_t>(SizeOf(d)); }
  static absl::Status CopyAsync(void* dst, const void* src, int64_t bytes, cudaStream_t s) {
    if (bytes == 0 || dst == src) return absl::OkStatus();
    return Cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
  }
  static bool UseF32(DType d, ReduceOp op) {
    return (d == DType::kBF16 || d == DType::kF16) && (op == ReduceOp::kSum || op == ReduceOp::kMean);
  }
  static absl::Status MeanDivide(DType dtype, ReduceOp op, void* buf, int64_t count, int n,
                                 cudaStream_t s) {
    if (op != ReduceOp::kMean) return absl::OkStatus();
    return Cuda(nccl_internal::LaunchDivide(dtype, buf, count, n, s), "divide kernel");
  }

  absl::Status Check(const OpDesc& d, std::initializer_list<absl::Status> checks) {
    for (const auto& st : checks) {
      if (!st.ok()) {
        return absl::Status(st.code(), absl::StrCat(s_->Prefix(), d.ToString(), ": ", st.message()));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<WorkPtr> Issue(
      const OpDesc& d, const std::function<absl::Status(ncclComm_t, cudaStream_t, absl::Time)>& fn) {
    std::string label = absl::StrCat(s_->Prefix(), d.ToString(), " #", seq_++);
    GTP_ASSIGN_OR_RETURN(std::shared_ptr<Done> done, s_->Enqueue(label, fn));
    return WorkPtr(std::make_unique<NcclWork>(s_, std::move(done), std::move(label)));
  }

  absl::StatusOr<WorkPtr> Exchange(const OpDesc& d, const void* send, std::vector<int64_t> sc,
                                   std::vector<int64_t> sd, void* recv, std::vector<int64_t> rc,
                                   std::vector<int64_t> rd, DType dtype) {
    const int64_t es = Bytes(dtype);
    const int n = size();
    return Issue(d, [=](ncclComm_t c, cudaStream_t s, absl::Time dl) -> absl::Status {
      if (n == 1) {
        if (sc[0] != rc[0]) return absl::InvalidArgumentError("send and recv counts differ");
        return CopyAsync(static_cast<char*>(recv) + rd[0] * es,
                         static_cast<const char*>(send) + sd[0] * es, sc[0] * es, s);
      }
      GTP_RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart"));
      for (int p = 0; p < n; ++p) {
        ncclResult_t r1 = ncclSend(static_cast<const char*>(send) + sd[p] * es, sc[p] * es,
                                   ncclUint8, p, c, s);
        ncclResult_t r2 = ncclRecv(static_cast<char*>(recv) + rd[p] * es, rc[p] * es, ncclUint8, p,
                                   c, s);
        for (ncclResult_t r : {r1, r2}) {
          if (r != ncclSuccess && r != ncclInProgress) {
            ncclGroupEnd();
            return NcclStatus(r, "ncclSend/ncclRecv");
          }
        }
      }
      return Settle(c, ncclGroupEnd(), dl, "all-to-all group");
    });
  }

  absl::StatusOr<WorkPtr> P2P(bool is_send, void* buf, int64_t count, DType dtype, int peer,
                              int tag) {
    OpDesc d{is_send ? OpKind::kSend : OpKind::kRecv, count, dtype};
    GTP_RETURN_IF_ERROR(Check(d, {internal::CheckCount(count), internal::CheckPeer(peer, size()),
                                  internal::CheckTag(tag), CheckDeviceBuffer(count, buf, "buf")}));
    GTP_ASSIGN_OR_RETURN(std::shared_ptr<Batch> b,
                         s_->QueueP2P(P2PItem{is_send, buf, count, dtype, peer, tag}));
    return WorkPtr(std::make_unique<NcclWork>(
        s_, std::move(b), absl::StrCat(s_->Prefix(), d.ToString(), " peer ", peer, " tag ", tag)));
  }

  std::shared_ptr<State> s_;
  uint64_t seq_ = 0;
};

absl::StatusOr<std::unique_ptr<Communicator>> MakeWorld(std::shared_ptr<KeyValueStore> store,
                                                        std::shared_ptr<void> keepalive, int rank,
                                                        int size, int device,
                                                        cudaStream_t compute,
                                                        const NcclOptions& options) {
  const std::string what = absl::StrCat("nccl world (rank ", rank, "/", size, ", device ", device, ")");
  if (CudaDeviceCount() == 0) return absl::FailedPreconditionError(what + ": " + NoGpuReason());
  GTP_RETURN_IF_ERROR(Cuda(cudaSetDevice(device), "cudaSetDevice"));
  const std::string key = options.store_prefix + "/unique_id";
  ncclUniqueId id;
  if (rank == 0) {
    GTP_RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), what + ": ncclGetUniqueId"));
    GTP_RETURN_IF_ERROR(store->Set(key, std::string(id.internal, sizeof(id.internal)),
                                   options.connect_timeout));
  } else {
    auto v = store->Get(key, options.connect_timeout);
    if (!v.ok()) {
      return absl::Status(v.status().code(),
                          absl::StrCat(what, ": no NCCL unique id from rank 0: ", v.status().message()));
    }
    if (v->size() != sizeof(id.internal)) return absl::InternalError(what + ": malformed unique id");
    std::memcpy(id.internal, v->data(), sizeof(id.internal));
  }
  // Blocking communicators (the fast path for collectives); the
  // initialisation, which waits for every rank, runs on a helper thread so a
  // rank that never joins costs connect_timeout, not a hang.
  auto comm_box = std::make_shared<ncclComm_t>(nullptr);
  absl::Status st = WithTimeout(
      [comm_box, size, id, rank, device]() {
        cudaSetDevice(device);
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        ncclComm_t c = nullptr;
        ncclResult_t r = ncclCommInitRankConfig(&c, size, id, rank, &cfg);
        *comm_box = c;
        return NcclStatus(r, "ncclCommInitRank");
      },
      options.connect_timeout, nullptr, what + ": ncclCommInitRank");
  if (!st.ok()) {
    if (st.code() == absl::StatusCode::kDeadlineExceeded) {
      return absl::DeadlineExceededError(absl::StrCat(
          what, ": ncclCommInitRank did not complete within ",
          absl::FormatDuration(options.connect_timeout), " (a rank did not join?)"));
    }
    return absl::Status(st.code(), absl::StrCat(what, ": ", st.message()));
  }
  ncclComm_t comm = *comm_box;
  GTP_ASSIGN_OR_RETURN(Stream stream, Stream::Create(device));
  GTP_ASSIGN_OR_RETURN(Event ready, Event::Create());
  // Heartbeats through the store, so that a failure can name the rank that
  // is gone (NCCL cannot).
  std::shared_ptr<Liveness> liveness =
      Liveness::Start(store, options.store_prefix, rank, size, absl::Milliseconds(500));
  auto state = std::make_shared<State>(comm, rank, size, device, options.name, compute,
                                       std::move(stream), std::move(ready), options,
                                       std::move(store), std::move(keepalive), std::move(liveness));
  return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(std::move(state)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclWorld(std::shared_ptr<KeyValueStore> store,
                                                              int rank, int size, int device,
                                                              cudaStream_t compute_stream,
                                                              const NcclOptions& options) {
  return MakeWorld(std::move(store), nullptr, rank, size, device, compute_stream, options);
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclWorldFromEnv(cudaStream_t compute_stream,
                                                                     const NcclOptions& options) {
  GTP_ASSIGN_OR_RETURN(LaunchEnv env, ReadLaunchEnv());
  std::shared_ptr<TcpStoreServer> server;
  if (env.rank == 0) {
    GTP_ASSIGN_OR_RETURN(auto s, TcpStoreServer::Start(env.master_port));
    s->set_linger(std::min(options.connect_timeout, absl::Seconds(5)));
    server = std::move(s);
  }
  GTP_ASSIGN_OR_RETURN(
      std::unique_ptr<TcpStoreClient> client,
      TcpStoreClient::Connect(env.master_addr, env.master_port, options.connect_timeout));
  // Ranks may outnumber the GPUs (gtprun's shared-GPU mode): LOCAL_RANK
  // modulo the devices, as the trainer picks.
  const int gpus = CudaDeviceCount();
  return MakeWorld(std::shared_ptr<KeyValueStore>(std::move(client)), server, env.rank,
                   env.world_size, gpus > 0 ? env.local_rank % gpus : env.local_rank,
                   compute_stream, options);
}

}  // namespace gtp::comm
