// parallel/testing/fake_communicator.h — a Communicator that only splits.
//
// For tests of group construction without a real backend: rank(), size(),
// name(), timeout() and Split() work; every collective returns Unimplemented. Split
// checks its arguments as a real backend would (disjoint lists of in-range
// ranks) and records each call, so a test can build one collection per world
// rank in turn, in one thread, and compare the calls every rank made (a real
// Split is collective: all ranks must pass the same lists). Sub-communicators
// are FakeCommunicators named "<name>[r0,r1,...]".
//
// Not thread-safe; Split does not block.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace gtp::parallel::testing {

class FakeCommunicator : public comm::Communicator {
 public:
  // One Split call as this rank made it.
  struct SplitCall {
    std::vector<std::vector<int>> groups;
    std::string name;
    bool operator==(const SplitCall& o) const { return groups == o.groups && name == o.name; }
  };

  FakeCommunicator(int rank, int size, std::string name = "world");

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }
  std::string backend() const override { return "fake"; }
  absl::Duration timeout() const override { return absl::Seconds(1); }

  absl::StatusOr<comm::WorkPtr> AllGather(const void*, void*, int64_t, DType) override;
  absl::StatusOr<comm::WorkPtr> ReduceScatter(const void*, void*, int64_t, DType,
                                              comm::ReduceOp) override;
  absl::StatusOr<comm::WorkPtr> AllReduce(const void*, void*, int64_t, DType,
                                          comm::ReduceOp) override;
  absl::StatusOr<comm::WorkPtr> Broadcast(void*, int64_t, DType, int) override;
  absl::StatusOr<comm::WorkPtr> AllToAll(const void*, void*, int64_t, DType) override;
  absl::StatusOr<comm::WorkPtr> AllToAllV(const void*, const std::vector<int64_t>&,
                                          const std::vector<int64_t>&, void*,
                                          const std::vector<int64_t>&, const std::vector<int64_t>&,
                                          DType) override;
  absl::StatusOr<comm::WorkPtr> Send(const void*, int64_t, DType, int, int) override;
  absl::StatusOr<comm::WorkPtr> Recv(void*, int64_t, DType, int, int) override;
  absl::StatusOr<comm::WorkPtr> Barrier() override;

  // Returns a FakeCommunicator for this rank's group, or nullptr.
  absl::StatusOr<std::unique_ptr<comm::Communicator>> Split(
      const std::vector<std::vector<int>>& groups, const std::string& name) override;

  // Every Split call made on this communicator, in order.
  const std::vector<SplitCall>& splits() const { return splits_; }

 private:
  absl::Status Unimplemented(const char* op) const;

  int rank_;
  int size_;
  std::string name_;
  std::vector<SplitCall> splits_;
};

}  // namespace gtp::parallel::testing
