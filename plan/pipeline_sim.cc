#include "plan/pipeline_sim.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "pipeline/schedule.h"

namespace gtp::plan {

absl::StatusOr<PipelineResult> SimulatePipeline(int P, int vpp, int M, const PipelineTimes& t) {
  if (static_cast<int>(t.fwd.size()) != P || static_cast<int>(t.bwd.size()) != P) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline times for ", t.fwd.size(), " stages, expected ", P));
  }
  std::vector<std::vector<pipeline::PipelineOp>> sched(P);
  for (int s = 0; s < P; ++s) {
    if (static_cast<int>(t.fwd[s].size()) != vpp || static_cast<int>(t.bwd[s].size()) != vpp) {
      return absl::InvalidArgumentError(absl::StrCat("stage ", s, ": times for ", t.fwd[s].size(), " chunks, expected ", vpp));
    }
    auto ops = pipeline::Schedule(P, s, vpp, M);
    if (!ops.ok()) return ops.status();
    sched[s] = std::move(*ops);
  }
  const int V = P * vpp;
  // done[kind][v][mb] = finish time, −1 = not yet.
  std::vector<std::vector<double>> done_f(V, std::vector<double>(M, -1)), done_b(V, std::vector<double>(M, -1));
  PipelineResult res;
  res.busy.assign(P, 0.0);
  res.finish.assign(P, 0.0);
  res.max_in_flight.assign(P, 0);
  std::vector<size_t> next(P, 0);
  std::vector<int> in_flight(P, 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < P; ++s) {
      while (next[s] < sched[s].size()) {
        const pipeline::PipelineOp& op = sched[s][next[s]];
        const int v = op.chunk * P + s;
        const bool fwd = op.kind == pipeline::PipelineOp::kForward;
        double ready = res.finish[s];
        if (fwd && v > 0) {
          const double d = done_f[v - 1][op.micro_batch];
          if (d < 0) break;
          ready = std::max(ready, d + ((v - 1) % P != s ? t.p2p : 0.0));
        }
        if (!fwd && v < V - 1) {
          const double d = done_b[v + 1][op.micro_batch];
          if (d < 0) break;
          ready = std::max(ready, d + ((v + 1) % P != s ? t.p2p : 0.0));
        }
        const double dur = fwd ? t.fwd[s][op.chunk] : t.bwd[s][op.chunk];
        res.finish[s] = ready + dur;
        res.busy[s] += dur;
        (fwd ? done_f : done_b)[v][op.micro_batch] = res.finish[s];
        in_flight[s] += fwd ? 1 : -1;
        res.max_in_flight[s] = std::max(res.max_in_flight[s], in_flight[s]);
        ++next[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < P; ++s) {
    if (next[s] != sched[s].size()) return absl::InternalError("pipeline simulation deadlocked");
  }
  res.makespan = *std::max_element(res.finish.begin(), res.finish.end());
  const double busiest = *std::max_element(res.busy.begin(), res.busy.end());
  res.bubble = res.makespan > 0 ? 1.0 - busiest / res.makespan : 0.0;
  return res;
}

}  // namespace gtp::plan
