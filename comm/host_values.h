// comm/host_values.h — small host arrays (scalars, counts, headers) over any
// communicator.
//
// Host backends (local, UCX) move the arrays where they are. A backend that
// moves device memory (NCCL: MovesDeviceMemory) gets each array through a
// buffer from `Staging::device`: copied there on `Staging::stream` before the
// call, copied back once the call has completed. Payload tensors never come
// here — they live on the device already; this is for the few numbers that
// say what the payload is.
//
//   comm::Staging stage{exec.alloc, exec.stream};   // {} on the CPU
//   GTP_RETURN_IF_ERROR(comm::AllReduceHost(tp, sums.data(), 2, DType::kF32,
//                                           comm::ReduceOp::kSum, stage));
//
// Every function blocks until the host values are final and returns Status
// (the collective's error, or FailedPrecondition when a device-memory
// communicator is given no device to stage through). Same thread rules as
// the communicator.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "core/allocator.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace gtp::comm {

// Where a device-memory backend's copies of host arrays live.
struct Staging {
  Allocator* device = nullptr;  // a GPU allocator; null where only host backends are used
  void* stream = nullptr;       // the cudaStream_t the communicator orders its calls after
};

// True for backends whose buffers must be device memory (NCCL).
bool MovesDeviceMemory(const Communicator& c);

// values (n elements of dtype, on the host) = op over the ranks of `c`.
absl::Status AllReduceHost(Communicator& c, void* values, int64_t n, DType dtype, ReduceOp op,
                           const Staging& stage);
// recv (c.size() · n elements, rank order) = every rank's send (n each).
absl::Status AllGatherHost(Communicator& c, const void* send, void* recv, int64_t n, DType dtype,
                           const Staging& stage);
// values on every rank = values of `root`.
absl::Status BroadcastHost(Communicator& c, void* values, int64_t n, DType dtype, int root,
                           const Staging& stage);

// Point-to-point host arrays posted together and completed by one Wait:
// Send and Recv post at once (in call order: on NCCL a pair's k-th send
// matches its k-th receive, so device payloads may be posted between them
// on `c` directly), Wait blocks until every one has completed and the
// received arrays are final on the host. The arrays must stay valid until
// Wait returns. One thread at a time.
class HostExchange {
 public:
  HostExchange(Communicator& c, const Staging& stage) : c_(c), stage_(stage) {}
  absl::Status Send(const void* values, int64_t n, DType dtype, int peer, int tag);
  absl::Status Recv(void* values, int64_t n, DType dtype, int peer, int tag);
  absl::Status Wait();

 private:
  struct Pending {
    WorkPtr work;
    Tensor staged;          // device copy (device-memory backends)
    void* host = nullptr;   // receives: where the staged copy goes back
  };
  Communicator& c_;
  Staging stage_;
  std::vector<Pending> pending_;
};

}  // namespace gtp::comm
