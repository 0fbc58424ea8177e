// parallel/hyper_comm_grid.h — a module's grid on a contiguous rank range.
//
// Heterogeneous MIMO training (DESIGN.md §7) gives each module (e.g. "vision",
// "language") its own degrees on its own world ranks [offset, offset + size).
// A HyperCommGrid is the dense and expert grids of one module there, with the
// standard process groups (see process_groups.h) built on those ranks:
//
//   ParallelConfig vision;  vision.tp = 2;                 // 4 ranks: tp2 dp2
//   ParallelConfig language; language.tp = 2; language.pp = 2;  // 8 ranks
//   GTP_ASSIGN_OR_RETURN(HyperCommGrid v, HyperCommGrid::Create("vision", vision, 0, 4, *world));
//   GTP_ASSIGN_OR_RETURN(HyperCommGrid l, HyperCommGrid::Create("language", language, 4, 8,
//   *world)); if (v.is_member()) { GTP_ASSIGN_OR_RETURN(comm::Communicator* tp, v.Get(groups::kTp)); ... }
//
// Several grids coexist in one world; ranges may be disjoint or overlap
// (colocated modules). Every world rank takes part in creating every grid —
// Create is collective over the whole world and blocks — and all ranks must
// create the grids in the same order. A rank outside a grid gets a grid
// object that holds no groups; asking it for one is FailedPrecondition
// naming the grid and its range.
//
// Communicators are named "<grid>.<group>", e.g. "vision.tp". After Create,
// const methods are thread-safe and do not block.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "comm/communicator.h"
#include "parallel/parallel_config.h"
#include "parallel/process_groups.h"
#include "parallel/rank_generator.h"

namespace gtp::parallel {

class HyperCommGrid {
 public:
  // Resolves `config` on `size` ranks (config.world_size must be 0 or
  // `size`; InvalidArgument as ParallelConfig::Resolve otherwise) and builds
  // its groups on world ranks [offset, offset + size). Collective over all
  // of `world`; blocks.
  static absl::StatusOr<HyperCommGrid> Create(const std::string& name, const ParallelConfig& config,
                                              int offset, int size, comm::Communicator& world,
                                              const ModelFacts& facts = {});

  HyperCommGrid(HyperCommGrid&&) = default;
  HyperCommGrid& operator=(HyperCommGrid&&) = default;

  const std::string& name() const { return name_; }
  // First world rank and number of ranks of the grid.
  int offset() const { return dense_.offset(); }
  int size() const { return dense_.world_size(); }
  // The resolved config (world_size = size()).
  const ParallelConfig& config() const { return config_; }
  // Grids in world ranks.
  const RankGenerator& dense() const { return dense_; }
  const RankGenerator& expert() const { return expert_; }

  // Whether world rank `rank` / this rank lies in the grid.
  bool Contains(int rank) const { return dense_.Contains(rank); }
  bool is_member() const { return Contains(world_rank_); }
  // The world rank this object belongs to.
  int world_rank() const { return world_rank_; }

  // This rank's groups; FailedPrecondition when this rank is outside the grid.
  absl::StatusOr<const ProcessGroupCollection*> groups() const;
  // groups()->Get(group).
  absl::StatusOr<comm::Communicator*> Get(absl::string_view group) const;
  // This rank's coordinates on the dense / expert grid; FailedPrecondition
  // when outside.
  absl::StatusOr<AxisValues> DenseCoordinates() const;
  absl::StatusOr<AxisValues> ExpertCoordinates() const;

  // Data lanes (DESIGN.md §7) are the (DP, GTP) pairs, numbered by their
  // position in the "data" group. Number of lanes = DP·GTP.
  int num_data_lanes() const { return config_.dp * config_.gtp(); }
  // Lane of world rank `rank`; OutOfRange when outside the grid.
  absl::StatusOr<int> DataLane(int rank) const;
  // For each lane, its leader at pipeline stage `pp_stage`: the rank with
  // tp = cp = 0 there (the bridge's sender or receiver). OutOfRange for a
  // bad stage.
  absl::StatusOr<std::vector<int>> LaneLeaders(int pp_stage) const;

 private:
  HyperCommGrid(std::string name, ParallelConfig config, RankGenerator dense, RankGenerator expert,
                ProcessGroupCollection groups, int world_rank);
  absl::Status CheckMember() const;

  std::string name_;
  ParallelConfig config_;
  RankGenerator dense_;
  RankGenerator expert_;
  ProcessGroupCollection groups_;
  int world_rank_;
};

}  // namespace gtp::parallel
