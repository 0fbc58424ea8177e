// mimo/checkpoint.h — checkpoints of a MimoModel and its MimoOptimizer.
//
// One checkpoint (checkpoint/checkpoint.h) for the whole job, written by
// every world rank: the encoder's tensors under "mimo.<encoder param>"
// (the encoder's params are named "vision.…": "mimo.vision.h.0.attn.q.weight")
// and the language model's under "mimo.language.<param>", optimizer state
// as "<key>/<kind>", each module's pieces laid out by its own grid's groups
// (checkpoint/model_state.h). The metadata records each module's grid
// (ParallelConfig::ToString), which of its groups were the data-distribution
// groups (data lanes: "data" = dp×gtp) and which the dense and expert
// replica groups ("replicate", "edp"), and each optimizer's progress.
// Tensors are global, so a fresh process restores the job under any
// per-module layout.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "comm/communicator.h"
#include "mimo/model.h"
#include "mimo/optimizer.h"

namespace gtp::mimo {

// Collective over `world`; blocks. keep_last > 0: only the newest keep_last
// complete checkpoints stay (checkpoint::SaveOptions::keep_last).
absl::Status SaveMimoCheckpoint(const std::string& root, int64_t iteration, MimoModel& model,
                                MimoOptimizer& opt, comm::Communicator& world,
                                std::map<std::string, std::string> extra = {}, int keep_last = 0);

// Fills model and optimizer state (and the optimizers' progress) from the
// checkpoint of `iteration` (nullopt: the latest). NotFound without one;
// InvalidArgument when it is not a MIMO checkpoint or lacks a tensor this
// layout needs. Collective over `world`; blocks.
absl::StatusOr<checkpoint::LoadResult> LoadMimoCheckpoint(const std::string& root,
                                                          std::optional<int64_t> iteration,
                                                          MimoModel& model, MimoOptimizer& opt,
                                                          comm::Communicator& world);

}  // namespace gtp::mimo
