// mimo/grids.h — checks that the module grids of a MIMO job fit its world.
//
// A MIMO job (DESIGN.md §7) places each module (e.g. "vision", "language")
// on its own HyperCommGrid. Two layouts are allowed:
//   - disjoint: the grids are pairwise disjoint and together cover world
//     ranks [0, world_size) exactly;
//   - colocated: every grid has the same offset and size (all modules on all
//     ranks), and that range is the whole world.
//
//   GTP_RETURN_IF_ERROR(mimo::ValidateModuleGrids({&vision, &language}, world->size()));
//   if (mimo::IsColocated({&vision, &language})) ...
//
// Functions here are pure: they read only the grids' ranges, never
// communicate, and are thread-safe.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "parallel/hyper_comm_grid.h"

namespace gtp::mimo {

// OK for a disjoint or colocated layout (see the file comment). Otherwise
// InvalidArgument naming the problem: an empty list or null grid, a grid
// outside the world, the first overlap ("grids vision [0, 4) and language
// [2, 8) overlap on ranks 2..3") or the first gap ("ranks 6..7 belong to no
// module grid").
absl::Status ValidateModuleGrids(const std::vector<const parallel::HyperCommGrid*>& grids,
                                 int world_size);

// True when there are at least two grids and all have the same offset and
// size. Says nothing about validity (use ValidateModuleGrids).
bool IsColocated(const std::vector<const parallel::HyperCommGrid*>& grids);

}  // namespace gtp::mimo
