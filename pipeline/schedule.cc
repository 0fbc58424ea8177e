#include "pipeline/schedule.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace gtp::pipeline {

absl::StatusOr<std::vector<PipelineOp>> Schedule(int stages, int stage, int vpp, int micro_batches) {
  if (stages < 1 || stage < 0 || stage >= stages || vpp < 1 || micro_batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline schedule: stage ", stage, " of ",
                                                   stages, ", vpp ", vpp, ", ", micro_batches,
                                                   " micro-batches"));
  }
  const int P = stages, M = micro_batches, total = M * vpp;
  if (vpp > 1 && M % P != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "interleaved pipeline (vpp ", vpp, ") needs the micro-batches (", M,
        ") to be a multiple of the pipeline stages (", P, ")"));
  }
  const int warmup = vpp == 1 ? std::min(P - stage - 1, M)
                              : std::min(2 * (P - stage - 1) + (vpp - 1) * P, total);
  auto fwd = [&](int k) {
    return PipelineOp{PipelineOp::kForward, (k / P) % vpp, (k / (P * vpp)) * P + k % P};
  };
  auto bwd = [&](int k) {
    return PipelineOp{PipelineOp::kBackward, vpp - 1 - (k / P) % vpp, (k / (P * vpp)) * P + k % P};
  };
  std::vector<PipelineOp> ops;
  ops.reserve(2 * total);
  for (int k = 0; k < warmup; ++k) ops.push_back(fwd(k));
  for (int i = 0; i < total - warmup; ++i) {
    ops.push_back(fwd(warmup + i));
    ops.push_back(bwd(i));
  }
  for (int k = total - warmup; k < total; ++k) ops.push_back(bwd(k));
  return ops;
}

double SimulatedBubble(int stages, int vpp, int micro_batches, double f, double b) {
  const int P = stages, V = stages * vpp;
  std::vector<std::vector<PipelineOp>> sched(P);
  for (int s = 0; s < P; ++s) sched[s] = *Schedule(P, s, vpp, micro_batches);
  // done[(kind, virtual stage, micro-batch)] = finish time.
  std::map<std::tuple<int, int, int>, double> done;
  std::vector<size_t> next(P, 0);
  std::vector<double> clock(P, 0.0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < P; ++s) {
      while (next[s] < sched[s].size()) {
        const PipelineOp& op = sched[s][next[s]];
        const int v = op.chunk * P + s;
        double ready = clock[s];
        if (op.kind == PipelineOp::kForward && v > 0) {
          auto it = done.find({0, v - 1, op.micro_batch});
          if (it == done.end()) break;
          ready = std::max(ready, it->second);
        }
        if (op.kind == PipelineOp::kBackward && v < V - 1) {
          auto it = done.find({1, v + 1, op.micro_batch});
          if (it == done.end()) break;
          ready = std::max(ready, it->second);
        }
        clock[s] = ready + (op.kind == PipelineOp::kForward ? f : b);
        done[{op.kind == PipelineOp::kForward ? 0 : 1, v, op.micro_batch}] = clock[s];
        ++next[s];
        progress = true;
      }
    }
  }
  const double makespan = *std::max_element(clock.begin(), clock.end());
  const double busy = micro_batches * vpp * (f + b);
  return 1.0 - busy / makespan;
}

std::string OpName(const PipelineOp& op) {
  return absl::StrCat(op.kind == PipelineOp::kForward ? "F" : "B", op.chunk, ".", op.micro_batch);
}

}  // namespace gtp::pipeline
