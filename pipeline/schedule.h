// pipeline/schedule.h — the order of a pipeline rank's forward and backward
// passes: 1F1B (PipeDream-Flush), and Megatron-LM's interleaved 1F1B when
// each rank holds `vpp` model chunks (virtual stages v = chunk·P + stage).
//
// For stage s of P with M micro-batches and vpp chunks (M·vpp passes of each
// kind): warm-up forwards W = min(P − s − 1, M) (vpp = 1) or
// min(2·(P − s − 1) + (vpp − 1)·P, M·vpp); then alternately one forward and
// one backward; then the remaining backwards. The k-th forward runs chunk
// (k / P) mod vpp on micro-batch (k / (P·vpp))·P + k mod P; the k-th
// backward the same micro-batch on chunk vpp − 1 − (k / P) mod vpp.
// Interleaving needs M divisible by P.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gtp::pipeline {

struct PipelineOp {
  enum Kind { kForward, kBackward };
  Kind kind = kForward;
  int chunk = 0;
  int micro_batch = 0;
};

// This stage's passes in order. InvalidArgument for stages < 1, a stage
// outside [0, stages), micro_batches < 1, vpp < 1, or vpp > 1 with
// micro_batches not divisible by stages.
absl::StatusOr<std::vector<PipelineOp>> Schedule(int stages, int stage, int vpp, int micro_batches);

// Simulated makespan of the whole pipeline when a forward of one chunk
// takes `f` and a backward `b` time units and messages are free (every
// stage runs its Schedule in order, waiting for its inputs), and the
// resulting bubble fraction 1 − (busy time of a stage) / makespan (the same
// on every stage). For 1F1B this is (P − 1)/(M + P − 1).
double SimulatedBubble(int stages, int vpp, int micro_batches, double f, double b);

// "F0.1" (forward, chunk 0, micro-batch 1) / "B1.3", for messages and tests.
std::string OpName(const PipelineOp& op);

}  // namespace gtp::pipeline
