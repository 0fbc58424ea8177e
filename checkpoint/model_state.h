// checkpoint/model_state.h — the TensorPieces of a model's parameters.
//
// GTP-sharded weights: this rank's shard rows (GTP padding excluded), mapped
// to global rows through the param's global layout; replicas are the ranks
// of the "replicate" group (DP×CP), which split the rows for writing.
// Replicated params: TP-sharded ones (column-parallel biases) are held by
// every rank of "data_cp" with the same TP coordinate; the others by every
// rank of "tp" × "data_cp". Keys are the parameter names. Expert weights
// (MoE, `experts`): like GTP-sharded ones, with the "edp" group as replicas.
// A pipeline's tied LM-head copy (ShardedParam::tied_copy) holds what the
// first stage's wte.weight holds: it is left out unless `with_tied_copies`
// (for loading, so that both copies are filled).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "optimizer/grad_sync.h"
#include "optimizer/optimizer.h"
#include "parallel/process_groups.h"

namespace gtp::checkpoint {

absl::StatusOr<std::vector<TensorPiece>> ModelPieces(const optimizer::ParamSet& params,
                                                     const parallel::ProcessGroupCollection& pgs,
                                                     const optimizer::ParamSet* experts = nullptr,
                                                     bool with_tied_copies = false);

// The optimizer's state (exp_avg, exp_avg_sq, momentum, master) as pieces
// keyed "<param>/<kind>", shaped like the param's global tensor: each state
// tensor covers a flat range of the param's local storage, cut here into
// row blocks (GTP padding dropped). State of replicated params is held by
// every TP (unless TP-sharded) and GTP rank: those split the writing.
absl::StatusOr<std::vector<TensorPiece>> OptimizerPieces(
    const optimizer::DistributedOptimizer& opt, const optimizer::ParamSet& params,
    const parallel::ProcessGroupCollection& pgs, const optimizer::ParamSet* experts = nullptr,
    bool with_tied_copies = false);

// This rank's index among the ranks of its pipeline stage, and their number
// (from the "pp" groups: one rank of each stage per group) — the holders of
// a stage's IdenticalPieces.
absl::StatusOr<std::pair<int, int>> StageReplica(const parallel::ProcessGroupCollection& pgs,
                                                 int world_rank);

// Whole tensors that `count` ranks hold identically (e.g. each MoE layer's
// expert bias on the ranks of its pipeline stage), as pieces whose writing
// those ranks split; `index` is this rank's place among them.
std::vector<TensorPiece> IdenticalPieces(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                         int index, int count);

}  // namespace gtp::checkpoint
