#include "comm/forwarding.h"

#include <numeric>
#include <utility>

#include "core/dtype.h"

namespace gtp::comm {

const char* OpKindName(OpKind k) {
  switch (k) {
    case OpKind::kAllGather: return "all_gather";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kAllReduce: return "all_reduce";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kAllToAll: return "all_to_all";
    case OpKind::kSend: return "send";
    case OpKind::kRecv: return "recv";
    case OpKind::kBarrier: return "barrier";
    case OpKind::kCount: break;
  }
  return "?";
}

namespace {
int64_t Bytes(int64_t count, DType dtype) { return count * static_cast<int64_t>(SizeOf(dtype)); }
}  // namespace

absl::StatusOr<WorkPtr> ForwardingCommunicator::AllGather(const void* send, void* recv,
                                                          int64_t count, DType dtype) {
  return Issue({OpKind::kAllGather, Bytes(count, dtype)},
               [&] { return inner_->AllGather(send, recv, count, dtype); });
}

absl::StatusOr<WorkPtr> ForwardingCommunicator::ReduceScatter(const void* send, void* recv,
                                                              int64_t count, DType dtype,
                                                              ReduceOp op) {
  return Issue({OpKind::kReduceScatter, size() * Bytes(count, dtype)},
               [&] { return inner_->ReduceScatter(send, recv, count, dtype, op); });
}

absl::StatusOr<WorkPtr> ForwardingCommunicator::AllReduce(const void* send, void* recv,
                                                          int64_t count, DType dtype,
                                                          ReduceOp op) {
  return Issue({OpKind::kAllReduce, Bytes(count, dtype)},
               [&] { return inner_->AllReduce(send, recv, count, dtype, op); });
}

absl::StatusOr<WorkPtr> ForwardingCommunicator::Broadcast(void* buf, int64_t count, DType dtype,
                                                          int root) {
  return Issue({OpKind::kBroadcast, rank() == root ? Bytes(count, dtype) : 0},
               [&] { return inner_->Broadcast(buf, count, dtype, root); });
}

absl::StatusOr<WorkPtr> ForwardingCommunicator::AllToAll(const void* send, void* recv,
                                                         int64_t count, DType dtype) {
  return Issue({OpKind::kAllToAll, size() * Bytes(count, dtype)},
               [&] { return inner_->AllToAll(send, recv, count, dtype); });
}

absl::StatusOr<WorkPtr> ForwardingCommunicator::AllToAllV(
    const void* send, const std::vector<int64_t>& send_counts,
    const std::vector<int64_t>& send_displs, void* recv, const std::vector<int64_t>& recv_counts,
    const std::vector<int64_t>& recv_displs, DType dtype) {
  const int64_t n = std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0});
  return Issue({OpKind::kAllToAll, Bytes(n, dtype)}, [&] {
    return inner_->AllToAllV(send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype);
  });
}

absl::StatusOr<WorkPtr> ForwardingCommunicator::Send(const void* buf, int64_t count, DType dtype,
                                                     int peer, int tag) {
  return Issue({OpKind::kSend, Bytes(count, dtype)},
               [&] { return inner_->Send(buf, count, dtype, peer, tag); });
}

absl::StatusOr<WorkPtr> ForwardingCommunicator::Recv(void* buf, int64_t count, DType dtype,
                                                     int peer, int tag) {
  return Issue({OpKind::kRecv, 0}, [&] { return inner_->Recv(buf, count, dtype, peer, tag); });
}

absl::StatusOr<WorkPtr> ForwardingCommunicator::Barrier() {
  return Issue({OpKind::kBarrier, 0}, [&] { return inner_->Barrier(); });
}

absl::StatusOr<std::unique_ptr<Communicator>> ForwardingCommunicator::Split(
    const std::vector<std::vector<int>>& groups, const std::string& name) {
  absl::StatusOr<std::unique_ptr<Communicator>> sub = inner_->Split(groups, name);
  if (!sub.ok() || *sub == nullptr) return sub;
  return Wrap(std::move(*sub));
}

}  // namespace gtp::comm
