#include "comm/nccl/internal/nccl_state.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/time/clock.h"
#include "comm/nccl/internal/nccl_calls.h"
#include "core/status.h"

namespace gtp::comm::nccl_internal {

absl::StatusOr<std::shared_ptr<Done>> NewDone() {
  cudaEvent_t e = nullptr;
  GTP_RETURN_IF_ERROR(Cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
  auto d = std::make_shared<Done>();
  d->event.reset(e);
  return d;
}

State::State(ncclComm_t comm, int rank, int size, int device, std::string name,
             cudaStream_t compute, Stream comm_stream, Event ready, const NcclOptions& options,
             std::shared_ptr<KeyValueStore> store, std::shared_ptr<TcpStoreServer> store_host,
             std::shared_ptr<Liveness> liveness)
    : comm_(comm), rank_(rank), size_(size), device_(device), name_(std::move(name)),
      compute_(compute), comm_stream_(std::move(comm_stream)), ready_(std::move(ready)),
      options_(options), store_(std::move(store)), store_host_(std::move(store_host)),
      liveness_(std::move(liveness)) {
  watch_beat_ns_ = absl::GetCurrentTimeNanos();
  watchdog_ = std::thread([this] { Watch(); });
  if (options_.exit_after_failure > absl::ZeroDuration()) {
    deadman_ = std::thread([this] { Deadman(); });
  }
}

State::~State() {
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

absl::StatusOr<std::shared_ptr<Done>> State::Enqueue(const std::string& label,
                                                     const EnqueueFn& fn) {
  GTP_RETURN_IF_ERROR(FlushP2P());
  absl::MutexLock l(&mu_);
  return EnqueueLocked(label, fn);
}

absl::StatusOr<std::shared_ptr<Batch>> State::QueueP2P(const P2PItem& item) {
  GTP_RETURN_IF_ERROR(Failure());
  absl::MutexLock l(&mu_);
  if (!batch_) batch_ = std::make_shared<Batch>();
  batch_->items.push_back(item);
  return batch_;
}

absl::Status State::FlushP2P() {
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

absl::Status State::Failure() {
  absl::MutexLock l(&wd_mu_);
  wd_mu_.Await(absl::Condition(
      +[](bool* diagnosing) { return !*diagnosing; }, &diagnosing_));
  return failure_;
}

absl::Status State::OrderCompute(const Done& d) {
  GTP_RETURN_IF_ERROR(Failure());
  return Cuda(cudaStreamWaitEvent(compute_, d.event.get(), 0), "cudaStreamWaitEvent");
}

absl::Status State::Block(const Done& d, const std::string& label, absl::Duration timeout) {
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

bool State::Query(const Done& d) {
  if (!Failure().ok() || d.captured) return true;
  return cudaEventQuery(d.event.get()) != cudaErrorNotReady;
}

absl::Status State::WithComm(std::function<absl::Status(ncclComm_t)> fn, const std::string& what) {
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

absl::Status State::Fail(absl::Status st) {
  {
    absl::MutexLock l(&wd_mu_);
    FailLocked(std::move(st)).IgnoreError();
  }
  return Failure();
}

absl::StatusOr<std::shared_ptr<Done>> State::EnqueueLocked(const std::string& label,
                                                           const EnqueueFn& fn) {
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

absl::Status State::FailLocked(absl::Status st) {
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

void State::Watch() {
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

void State::Reap(const std::string& what) {
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
  LingerAsStoreHost();
  std::_Exit(1);
}

// Seen on one H200 (4 NCCL ranks, one SIGKILLed): rank 0 ended itself 10 s
// after the failure while rank 1, whose watchdog noticed later, was still to
// read the heartbeats; the store was gone and rank 1 blamed rank 0.
void State::LingerAsStoreHost() {
  if (!store_host_) return;
  const absl::Time until = absl::Now() + options_.exit_after_failure;
  while (store_host_->num_clients() > 1 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(20));
  }
}

// The watchdog polls CUDA events and NCCL, and a CUDA call can block behind a
// device that a dead peer's collective holds (seen on one H200: survivors of a
// SIGKILLed rank silent for 70 s with a 30 s timeout, the watchdog never
// failing the communicator). This thread makes no CUDA or NCCL call and takes
// no lock the watchdog holds: when the watchdog has not completed a round for
// the timeout plus the exit grace, it prints what it knows and ends the
// process (the destructor's phases restart that clock: ~State).
void State::Deadman() {
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
    LingerAsStoreHost();
    std::_Exit(1);
  }
}

}  // namespace gtp::comm::nccl_internal
