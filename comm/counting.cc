#include "comm/counting.h"

#include <numeric>
#include <utility>

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

ByteCounts ByteCounter::Snapshot() const {
  ByteCounts c;
  for (size_t i = 0; i < c.bytes.size(); ++i) {
    c.bytes[i] = bytes_[i].load(std::memory_order_relaxed);
    c.calls[i] = calls_[i].load(std::memory_order_relaxed);
  }
  return c;
}

void ByteCounter::Reset() {
  for (size_t i = 0; i < bytes_.size(); ++i) {
    bytes_[i].store(0, std::memory_order_relaxed);
    calls_[i].store(0, std::memory_order_relaxed);
  }
}

CountingCommunicator::CountingCommunicator(Communicator* inner,
                                           std::shared_ptr<ByteCounter> counter)
    : inner_(inner), counter_(std::move(counter)) {}

CountingCommunicator::CountingCommunicator(std::unique_ptr<Communicator> inner,
                                           std::shared_ptr<ByteCounter> counter)
    : owned_(std::move(inner)), inner_(owned_.get()), counter_(std::move(counter)) {}

absl::StatusOr<WorkPtr> CountingCommunicator::AllGather(const void* send, void* recv,
                                                        int64_t count, DType dtype) {
  counter_->Add(OpKind::kAllGather, count * static_cast<int64_t>(SizeOf(dtype)));
  return inner_->AllGather(send, recv, count, dtype);
}

absl::StatusOr<WorkPtr> CountingCommunicator::ReduceScatter(const void* send, void* recv,
                                                            int64_t count, DType dtype,
                                                            ReduceOp op) {
  counter_->Add(OpKind::kReduceScatter, size() * count * static_cast<int64_t>(SizeOf(dtype)));
  return inner_->ReduceScatter(send, recv, count, dtype, op);
}

absl::StatusOr<WorkPtr> CountingCommunicator::AllReduce(const void* send, void* recv,
                                                        int64_t count, DType dtype, ReduceOp op) {
  counter_->Add(OpKind::kAllReduce, count * static_cast<int64_t>(SizeOf(dtype)));
  return inner_->AllReduce(send, recv, count, dtype, op);
}

absl::StatusOr<WorkPtr> CountingCommunicator::Broadcast(void* buf, int64_t count, DType dtype,
                                                        int root) {
  counter_->Add(OpKind::kBroadcast,
                rank() == root ? count * static_cast<int64_t>(SizeOf(dtype)) : 0);
  return inner_->Broadcast(buf, count, dtype, root);
}

absl::StatusOr<WorkPtr> CountingCommunicator::AllToAll(const void* send, void* recv,
                                                       int64_t count, DType dtype) {
  counter_->Add(OpKind::kAllToAll, size() * count * static_cast<int64_t>(SizeOf(dtype)));
  return inner_->AllToAll(send, recv, count, dtype);
}

absl::StatusOr<WorkPtr> CountingCommunicator::AllToAllV(
    const void* send, const std::vector<int64_t>& send_counts,
    const std::vector<int64_t>& send_displs, void* recv, const std::vector<int64_t>& recv_counts,
    const std::vector<int64_t>& recv_displs, DType dtype) {
  const int64_t n = std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0});
  counter_->Add(OpKind::kAllToAll, n * static_cast<int64_t>(SizeOf(dtype)));
  return inner_->AllToAllV(send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype);
}

absl::StatusOr<WorkPtr> CountingCommunicator::Send(const void* buf, int64_t count, DType dtype,
                                                   int peer, int tag) {
  counter_->Add(OpKind::kSend, count * static_cast<int64_t>(SizeOf(dtype)));
  return inner_->Send(buf, count, dtype, peer, tag);
}

absl::StatusOr<WorkPtr> CountingCommunicator::Recv(void* buf, int64_t count, DType dtype, int peer,
                                                   int tag) {
  counter_->Add(OpKind::kRecv, 0);
  return inner_->Recv(buf, count, dtype, peer, tag);
}

absl::StatusOr<WorkPtr> CountingCommunicator::Barrier() {
  counter_->Add(OpKind::kBarrier, 0);
  return inner_->Barrier();
}

absl::StatusOr<std::unique_ptr<Communicator>> CountingCommunicator::Split(
    const std::vector<std::vector<int>>& groups, const std::string& name) {
  absl::StatusOr<std::unique_ptr<Communicator>> sub = inner_->Split(groups, name);
  if (!sub.ok() || *sub == nullptr) return sub;
  return std::unique_ptr<Communicator>(new CountingCommunicator(std::move(*sub), counter_));
}

}  // namespace gtp::comm
