// comm/counting.h — a Communicator decorator that counts the bytes each op
// hands to the wire on this rank, per op kind (what the GTP gathers and
// reduce-scatters move, for comparing wire formats such as bf16 and fp8).
//
//   auto counter = std::make_shared<comm::ByteCounter>();
//   comm::CountingCommunicator world(inner_world, counter);   // inner not owned
//   ... build process groups from `world`: every Split is counted too ...
//   comm::ByteCounts b = counter->Snapshot();  // b.bytes[OpKind::kAllGather]
//
// Bytes counted: this rank's input, the usual "message size" (OpCall::bytes,
// comm/forwarding.h). `calls` counts every op issued.
// Thread-safe (atomic counters); forwarding adds no blocking of its own.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

#include "comm/communicator.h"
#include "comm/forwarding.h"

namespace gtp::comm {

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

class CountingCommunicator final : public ForwardingCommunicator {
 public:
  // Counts into `counter` and forwards to `inner` (not owned; must outlive
  // this). Sub-communicators from Split are counted into the same counter.
  CountingCommunicator(Communicator* inner, std::shared_ptr<ByteCounter> counter)
      : ForwardingCommunicator(inner), counter_(std::move(counter)) {}
  // The same, owning the inner communicator (what Split returns).
  CountingCommunicator(std::unique_ptr<Communicator> inner, std::shared_ptr<ByteCounter> counter)
      : ForwardingCommunicator(std::move(inner)), counter_(std::move(counter)) {}

 private:
  absl::StatusOr<WorkPtr> Issue(const OpCall& op, IssueFn issue) override {
    counter_->Add(op.kind, op.bytes);
    return issue();
  }
  std::unique_ptr<Communicator> Wrap(std::unique_ptr<Communicator> sub) override {
    return std::make_unique<CountingCommunicator>(std::move(sub), counter_);
  }

  std::shared_ptr<ByteCounter> counter_;
};

}  // namespace gtp::comm
