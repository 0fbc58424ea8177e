// optimizer/grad_sync.h — gradient finalisation after backward (DESIGN.md §5),
// the simple, unbucketed form: one collective per parameter. Training uses
// GradBuffer (grad_buffer.h: flat buffer, buckets, overlap); this stays as
// the reference its tests compare against and for demos.
//
// Mean loss normalisation (the default): each lane's loss is a mean over its
// tokens, so the global gradient is the mean over all data lanes (DP × GTP):
//   - GTP-sharded params: the GTP reduce-scatter already averaged over GTP;
//     all-reduce-mean over the replicate group (DP×CP) finishes the mean.
//   - Replicated params (norms, biases, position embeddings): first summed
//     over TP when their grad covers only this rank's sequence-parallel rows,
//     then averaged over the data group (DP × GTP) and CP.
// Collective over every group involved; blocks.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "core/kernels/ops.h"
#include "layers/linear.h"
#include "layers/sharded_param.h"
#include "parallel/process_groups.h"

namespace gtp::optimizer {

// The parameters of one model replica on this rank.
struct ParamSet {
  std::vector<layers::ShardedParam*> sharded;
  std::vector<layers::ReplicatedParam*> replicated;
};

absl::Status FinalizeGrads(const ParamSet& params, const parallel::ProcessGroupCollection& pgs);

// Zeroes every main grad and replicated grad.
void ZeroGrads(const ParamSet& params, const kernels::Exec& exec);

// Plain SGD: p -= lr·g on every shard and replicated param (tests, demos).
void SgdStep(const ParamSet& params, const kernels::Exec& exec, float lr);

}  // namespace gtp::optimizer
