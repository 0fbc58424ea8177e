#include "comm/communicator.h"

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

absl::Status Run(absl::StatusOr<WorkPtr> work) {
  if (!work.ok()) return work.status();
  return (*work)->Wait();
}

}  // namespace gtp::comm
