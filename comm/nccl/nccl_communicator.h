// comm/nccl/nccl_communicator.h — collectives on CUDA device memory through
// NCCL.
//
// One process per GPU. Every collective is enqueued on the communicator's
// own communication stream, ordered after the work already on the compute
// stream (an event recorded there); Work::Wait makes the compute stream wait
// for the collective (the host does not block); Work::Synchronize blocks the
// host until it finished. Reductions follow the project's numerics: bf16/f16
// sum and mean run as f32 (widen, NCCL in f32, round once; see
// ReduceScatterF32Accumulate), kMean is a sum then one division.
//
// Point-to-point calls are coalesced: Send/Recv are queued and launched as
// one NCCL group when any of their Works is waited on or tested, or when the
// next collective is issued. Within a batch, the messages to (and from) each
// peer are ordered by (tag, issue order); tags in [0, 2^24).
//
// Failure: communicators are non-blocking; a watchdog thread polls
// ncclCommGetAsyncError and every enqueued operation's completion event, and
// aborts the communicator (ncclCommAbort) when an operation errs or runs past
// the timeout. The next call, Wait or Synchronize then returns an error
// naming group, op and cause. Unlike the host backends, NCCL cannot check
// that ranks agree on counts: a disagreement shows up as a timeout.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "comm/store/key_value_store.h"
#include "core/dtype.h"

namespace gtp::comm {

struct NcclOptions {
  std::string name = "world";
  // Watchdog limit per operation, and the default for Wait/Synchronize.
  absl::Duration timeout = absl::Seconds(60);
  // Limit for the unique-id exchange and ncclCommInitRank.
  absl::Duration connect_timeout = absl::Seconds(60);
  std::string store_prefix = "gtp/nccl";
  // After a failure a rank is expected to end (the trainer reports the error
  // and exits), but a thread that waits in CUDA for a collective whose peer
  // died may stay blocked even after the abort (seen on one H200: survivors
  // of a SIGKILLed rank hung past the timeout). When set (> 0), a rank still
  // alive this long after its communicator failed prints the error, with the
  // rank the heartbeats name as gone, and exits with status 1 (as PyTorch's
  // NCCL watchdog tears a process down). The same bound holds when the
  // watchdog itself is blocked in a CUDA or NCCL call and never fails the
  // communicator: a deadman thread ends the rank once the watchdog has been
  // silent for timeout + exit_after_failure. 0: never (tests that go on
  // after a failure).
  absl::Duration exit_after_failure = absl::ZeroDuration();
};

// Creates this rank's communicator on CUDA `device`. Rank 0 makes the NCCL
// unique id and publishes it in `store`. `compute_stream` is the stream the
// caller's kernels run on (not owned; must outlive the communicator). Blocks
// until every rank has joined or connect_timeout passes.
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclWorld(std::shared_ptr<KeyValueStore> store,
                                                              int rank, int size, int device,
                                                              cudaStream_t compute_stream,
                                                              const NcclOptions& options = {});

// From the launch environment (comm/env): rank 0 serves the TCP store;
// device = LOCAL_RANK modulo the visible devices. Blocks.
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclWorldFromEnv(cudaStream_t compute_stream,
                                                                     const NcclOptions& options = {});

// The bf16 reduce-scatter with f32 accumulation, as a named primitive: widens
// `send` (nranks·count elements of bf16 or f16) to f32, reduce-scatters in
// f32 with ncclSum, and narrows into `recv` (count elements), dividing by
// nranks first for kMean. Enqueues on `stream` (scratch from the stream's
// memory pool, freed in stream order); never blocks; not thread-safe per comm.
absl::Status ReduceScatterF32Accumulate(ncclComm_t comm, int nranks, const void* send, void* recv,
                                        int64_t count, DType dtype, ReduceOp op,
                                        cudaStream_t stream);
// The all-reduce counterpart (send may equal recv).
absl::Status AllReduceF32Accumulate(ncclComm_t comm, int nranks, const void* send, void* recv,
                                    int64_t count, DType dtype, ReduceOp op, cudaStream_t stream);

// The NCCL backend's one error-conversion helper: ncclSuccess -> OK,
// ncclInvalidArgument/ncclInvalidUsage -> InvalidArgument, ncclRemoteError ->
// Unavailable, ncclInProgress -> Unavailable ("still in progress"), others ->
// Internal. The message names `what` and NCCL's error string.
absl::Status NcclStatus(ncclResult_t r, const std::string& what);

}  // namespace gtp::comm
