// recipes/trainer/banner.h — the lines rank 0 prints before the first step:
// the layout (world and backend, TP × GTP × DP (× CP × PP), data lanes, rank
// order, SP), precision and device (CUDA graphs, attention kernels, GTP wire
// formats), the model and its parameter counts, the training settings, the
// run directory and the TensorBoard directory.
#pragma once

#include "recipes/trainer/metrics.h"
#include "recipes/trainer/run_options.h"
#include "recipes/trainer/state.h"

namespace gtp::recipes {

void PrintBanner(const RankState& state, const RunOptions& options, bool cuda_graphs,
                 const Metrics& metrics);

}  // namespace gtp::recipes
