// plan/pipeline_sim.h — the pipeline schedule simulated with per-stage,
// per-chunk pass times and a message time between stages.
//
// Every stage runs pipeline::Schedule(P, s, vpp, M) in order (the project's
// own 1F1B / interleaved order); a forward of virtual stage v = chunk·P + s
// waits for the forward of v − 1 on the same micro-batch, a backward for the
// backward of v + 1, plus `p2p` seconds when the two sit on different
// stages. With equal times and p2p = 0 this is pipeline::SimulatedBubble
// (pipeline_sim_test checks it). Pure; thread-safe.
#pragma once

#include <vector>

#include "absl/status/statusor.h"

namespace gtp::plan {

struct PipelineTimes {
  std::vector<std::vector<double>> fwd, bwd;  // [stage][chunk] seconds of one micro-batch's pass
  double p2p = 0;                              // activation (or gradient) transfer between stages
};

struct PipelineResult {
  double makespan = 0;
  std::vector<double> busy;         // [stage] Σ pass times
  std::vector<double> finish;       // [stage] when its last pass ends
  std::vector<int> max_in_flight;   // [stage] most (chunk, micro-batch) forwards awaiting backward
  double bubble = 0;                // 1 − max busy / makespan
};

// InvalidArgument for sizes Schedule refuses or times of the wrong shape.
absl::StatusOr<PipelineResult> SimulatePipeline(int stages, int vpp, int micro_batches,
                                                const PipelineTimes& times);

}  // namespace gtp::plan
