// checkpoint/model_state.h — the TensorPieces of a model's parameters.
//
// GTP-sharded weights: this rank's shard rows (GTP padding excluded), mapped
// to global rows through the param's global layout; replicas are the ranks
// of the "replicate" group (DP×CP), which split the rows for writing.
// Replicated params: TP-sharded ones (column-parallel biases) are held by
// every rank of "data_cp" with the same TP coordinate; the others by every
// rank of "tp" × "data_cp". Keys are the parameter names.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "optimizer/grad_sync.h"
#include "parallel/process_groups.h"

namespace gtp::checkpoint {

absl::StatusOr<std::vector<TensorPiece>> ModelPieces(const optimizer::ParamSet& params,
                                                     const parallel::ProcessGroupCollection& pgs);

}  // namespace gtp::checkpoint
