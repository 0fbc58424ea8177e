#include "parallel/testing/fake_communicator.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gtp::parallel::testing {

FakeCommunicator::FakeCommunicator(int rank, int size, std::string name)
    : rank_(rank), size_(size), name_(std::move(name)) {}

absl::Status FakeCommunicator::Unimplemented(const char* op) const {
  return absl::UnimplementedError(
      absl::StrCat("FakeCommunicator '", name_, "' does not implement ", op));
}

absl::StatusOr<comm::WorkPtr> FakeCommunicator::AllGather(const void*, void*, int64_t, DType) {
  return Unimplemented("AllGather");
}
absl::StatusOr<comm::WorkPtr> FakeCommunicator::ReduceScatter(const void*, void*, int64_t, DType,
                                                              comm::ReduceOp) {
  return Unimplemented("ReduceScatter");
}
absl::StatusOr<comm::WorkPtr> FakeCommunicator::AllReduce(const void*, void*, int64_t, DType,
                                                          comm::ReduceOp) {
  return Unimplemented("AllReduce");
}
absl::StatusOr<comm::WorkPtr> FakeCommunicator::Broadcast(void*, int64_t, DType, int) {
  return Unimplemented("Broadcast");
}
absl::StatusOr<comm::WorkPtr> FakeCommunicator::AllToAll(const void*, void*, int64_t, DType) {
  return Unimplemented("AllToAll");
}
absl::StatusOr<comm::WorkPtr> FakeCommunicator::AllToAllV(const void*, const std::vector<int64_t>&,
                                                          const std::vector<int64_t>&, void*,
                                                          const std::vector<int64_t>&,
                                                          const std::vector<int64_t>&, DType) {
  return Unimplemented("AllToAllV");
}
absl::StatusOr<comm::WorkPtr> FakeCommunicator::Send(const void*, int64_t, DType, int, int) {
  return Unimplemented("Send");
}
absl::StatusOr<comm::WorkPtr> FakeCommunicator::Recv(void*, int64_t, DType, int, int) {
  return Unimplemented("Recv");
}
absl::StatusOr<comm::WorkPtr> FakeCommunicator::Barrier() { return Unimplemented("Barrier"); }

absl::StatusOr<std::unique_ptr<comm::Communicator>> FakeCommunicator::Split(
    const std::vector<std::vector<int>>& groups, const std::string& name) {
  splits_.push_back(SplitCall{groups, name});
  std::vector<bool> seen(size_, false);
  std::unique_ptr<comm::Communicator> mine;
  for (const std::vector<int>& g : groups) {
    if (g.empty())
      return absl::InvalidArgumentError(absl::StrCat("Split '", name, "': empty group"));
    for (size_t i = 0; i < g.size(); ++i) {
      const int r = g[i];
      if (r < 0 || r >= size_) {
        return absl::InvalidArgumentError(
            absl::StrCat("Split '", name, "': rank ", r, " outside [0, ", size_, ")"));
      }
      if (seen[r]) {
        return absl::InvalidArgumentError(
            absl::StrCat("Split '", name, "': rank ", r, " in two groups"));
      }
      seen[r] = true;
      if (r == rank_) {
        mine =
            std::make_unique<FakeCommunicator>(static_cast<int>(i), static_cast<int>(g.size()),
                                               absl::StrCat(name, "[", absl::StrJoin(g, ","), "]"));
      }
    }
  }
  return mine;
}

}  // namespace gtp::parallel::testing
