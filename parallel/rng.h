// parallel/rng.h — per-axis random-stream keys.
//
// Each key is a Philox stream (core/philox.h) derived from the seed and the
// rank's grid coordinates — never from its rank number — so a collection with
// permuted membership draws the same numbers as the default one, and which
// ranks agree is a property of the stream:
//
//   stream                 depends on                   agrees across
//   global                 seed                         every rank
//   model_parallel         tp, pp                       dp, gtp, cp replicas
//   expert_model_parallel  etp, ep, pp (expert grid)    edp, egtp replicas
//   data                   dp, gtp (the data lane)      tp, cp, pp of a lane
//   activation             dp, gtp, cp, pp              tp (replicated activations)
//   tp_activation          tp, gtp, cp, dp, pp          nothing: one per dense rank
//
// Uses: model_parallel for anything that must match across replicas of one
// model part (Megatron's model-parallel RNG: TP-sharded init, dropout in TP
// regions); data for per-sample choices (shuffling, masking); activation for
// dropout on activations replicated across TP; tp_activation for dropout on
// TP- or sequence-sharded activations. Callers mix in a layer id and step
// with MixKey. For results that are identical across layouts, prefer the
// global stream indexed by global element position (as DESIGN.md §4 does for
// initialisation).
//
// Pure functions of their arguments: thread-safe, non-blocking.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "parallel/process_groups.h"
#include "parallel/rank_generator.h"

namespace gtp::parallel {

struct RngStreams {
  uint64_t global = 0;
  uint64_t model_parallel = 0;
  uint64_t expert_model_parallel = 0;
  uint64_t data = 0;
  uint64_t activation = 0;
  uint64_t tp_activation = 0;
};

// Keys for the rank at `dense` coordinates on the dense grid and `expert`
// coordinates on the expert grid (tp = ETP, gtp = EGTP, dp = EDP there).
RngStreams MakeRngStreams(uint64_t seed, const AxisValues& dense, const AxisValues& expert);

// Same, reading the coordinates as this rank's index in the collection's
// "tp", "gtp", "cp", "dp", "pp", "etp" and "ep" groups. NotFound /
// FailedPrecondition when one of them is missing (see
// ProcessGroupCollection::Get).
absl::StatusOr<RngStreams> RngStreamsFromGroups(uint64_t seed, const ProcessGroupCollection& pgs);

}  // namespace gtp::parallel
