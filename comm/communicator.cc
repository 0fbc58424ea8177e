#include "comm/communicator.h"

#include <set>

#include "absl/strings/str_cat.h"

namespace gtp::comm {

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMean: return "mean";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "unknown";
}

absl::Status Communicator::ConnectPeers(const std::vector<int>& peers) {
  std::set<int> seen;
  for (int p : peers) {
    if (p < 0 || p >= size() || p == rank() || !seen.insert(p).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group ", name(), ": connect_peers: peer ", p,
          " is out of range [0, ", size(), "), this rank, or repeated"));
    }
  }
  return absl::OkStatus();
}

absl::Status Run(absl::StatusOr<WorkPtr> work) {
  if (!work.ok()) return work.status();
  return (*work)->Wait();
}

}  // namespace gtp::comm
