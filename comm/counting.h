// comm/counting.h — a Communicator decorator that counts the bytes each op
// hands to the wire on this rank, per op kind (what the GTP gathers and
// reduce-scatters move, for comparing wire formats such as bf16 and fp8).
//
//   auto counter = std::make_shared<comm::ByteCounter>();
//   comm::CountingCommunicator world(inner_world, counter);   // inner not owned
//   ... build process groups from `world`: every Split is counted too ...
//   comm::ByteCounts b = counter->Snapshot();  // b.bytes[OpKind::kAllGather]
//
// Bytes counted (this rank's input, the usual "message size"):
//   all-gather count·es; reduce-scatter size()·count·es; all-reduce count·es;
//   broadcast count·es on the root, 0 elsewhere; all-to-all size()·count·es;
//   all-to-all-v Σ send_counts·es; send count·es; recv 0 (its bytes are the
//   sender's); barrier 0. `calls` counts every op issued.
// Thread-safe (atomic counters); forwarding adds no blocking of its own.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace gtp::comm {

enum class OpKind : int {
  kAllGather = 0,
  kReduceScatter,
  kAllReduce,
  kBroadcast,
  kAllToAll,
  kSend,
  kRecv,
  kBarrier,
  kCount
};
const char* OpKindName(OpKind k);

struct ByteCounts {
  std::array<int64_t, static_cast<int>(OpKind::kCount)> bytes{};
  std::array<int64_t, static_cast<int>(OpKind::kCount)> calls{};
  int64_t operator[](OpKind k) const { return bytes[static_cast<int>(k)]; }
};

class ByteCounter {
 public:
  void Add(OpKind k, int64_t bytes) {
    bytes_[static_cast<int>(k)].fetch_add(bytes, std::memory_order_relaxed);
    calls_[static_cast<int>(k)].fetch_add(1, std::memory_order_relaxed);
  }
  ByteCounts Snapshot() const;
  void Reset();

 private:
  std::array<std::atomic<int64_t>, static_cast<int>(OpKind::kCount)> bytes_{};
  std::array<std::atomic<int64_t>, static_cast<int>(OpKind::kCount)> calls_{};
};

class CountingCommunicator final : public Communicator {
 public:
  // Counts into `counter` and forwards to `inner` (not owned; must outlive
  // this). Sub-communicators from Split are counted into the same counter.
  CountingCommunicator(Communicator* inner, std::shared_ptr<ByteCounter> counter);
  // The same, owning the inner communicator (what Split returns).
  CountingCommunicator(std::unique_ptr<Communicator> inner, std::shared_ptr<ByteCounter> counter);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  std::string backend() const override { return inner_->backend(); }
  bool p2p_pairs_by_tag() const override { return inner_->p2p_pairs_by_tag(); }
  absl::Duration timeout() const override { return inner_->timeout(); }
  absl::StatusOr<WorkPtr> AllGather(const void* send, void* recv, int64_t count,
                                    DType dtype) override;
  absl::StatusOr<WorkPtr> ReduceScatter(const void* send, void* recv, int64_t count, DType dtype,
                                        ReduceOp op) override;
  absl::StatusOr<WorkPtr> AllReduce(const void* send, void* recv, int64_t count, DType dtype,
                                    ReduceOp op) override;
  absl::StatusOr<WorkPtr> Broadcast(void* buf, int64_t count, DType dtype, int root) override;
  absl::StatusOr<WorkPtr> AllToAll(const void* send, void* recv, int64_t count,
                                   DType dtype) override;
  absl::StatusOr<WorkPtr> AllToAllV(const void* send, const std::vector<int64_t>& send_counts,
                                    const std::vector<int64_t>& send_displs, void* recv,
                                    const std::vector<int64_t>& recv_counts,
                                    const std::vector<int64_t>& recv_displs, DType dtype) override;
  absl::StatusOr<WorkPtr> Send(const void* buf, int64_t count, DType dtype, int peer,
                               int tag) override;
  absl::StatusOr<WorkPtr> Recv(void* buf, int64_t count, DType dtype, int peer, int tag) override;
  absl::StatusOr<WorkPtr> Barrier() override;
  absl::Status ConnectPeers(const std::vector<int>& peers) override {
    return inner_->ConnectPeers(peers);
  }
  absl::StatusOr<std::unique_ptr<Communicator>> Split(const std::vector<std::vector<int>>& groups,
                                                      const std::string& name) override;

 private:
  std::unique_ptr<Communicator> owned_;
  Communicator* inner_;
  std::shared_ptr<ByteCounter> counter_;
};

}  // namespace gtp::comm
