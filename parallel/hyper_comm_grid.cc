#include "parallel/hyper_comm_grid.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace gtp::parallel {

HyperCommGrid::HyperCommGrid(std::string name, ParallelConfig config, RankGenerator dense,
                             RankGenerator expert, ProcessGroupCollection groups, int world_rank)
    : name_(std::move(name)),
      config_(std::move(config)),
      dense_(std::move(dense)),
      expert_(std::move(expert)),
      groups_(std::move(groups)),
      world_rank_(world_rank) {}

absl::StatusOr<HyperCommGrid> HyperCommGrid::Create(const std::string& name,
                                                    const ParallelConfig& config, int offset,
                                                    int size, comm::Communicator& world,
                                                    const ModelFacts& facts) {
  if (name.empty()) return absl::InvalidArgumentError("HyperCommGrid needs a name");
  if (size < 1 || offset < 0 || int64_t{offset} + size > world.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("grid '", name, "' on world ranks [", offset, ", ", int64_t{offset} + size,
                     ") does not fit in world '", world.name(), "' of size ", world.size()));
  }
  absl::StatusOr<ParallelConfig> resolved = config.Resolve(size, facts);
  if (!resolved.ok()) {
    return absl::Status(resolved.status().code(),
                        absl::StrCat("grid '", name, "': ", resolved.status().message()));
  }
  GTP_ASSIGN_OR_RETURN(RankGenerator dense, resolved->DenseGrid(offset));
  GTP_ASSIGN_OR_RETURN(RankGenerator expert, resolved->ExpertGrid(offset));
  GTP_ASSIGN_OR_RETURN(ProcessGroupCollection groups,
                       ProcessGroupCollection::BuildOnRange(*resolved, offset, world, name + "."));
  return HyperCommGrid(name, *std::move(resolved), std::move(dense), std::move(expert),
                       std::move(groups), world.rank());
}

absl::Status HyperCommGrid::CheckMember() const {
  if (is_member()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("world rank ", world_rank_, " is not in grid '", name_, "' (world ranks [",
                   offset(), ", ", offset() + size(), ")); it has no groups there"));
}

absl::StatusOr<const ProcessGroupCollection*> HyperCommGrid::groups() const {
  GTP_RETURN_IF_ERROR(CheckMember());
  return &groups_;
}

absl::StatusOr<comm::Communicator*> HyperCommGrid::Get(absl::string_view group) const {
  GTP_RETURN_IF_ERROR(CheckMember());
  absl::StatusOr<comm::Communicator*> c = groups_.Get(group);
  if (!c.ok()) {
    return absl::Status(c.status().code(),
                        absl::StrCat("grid '", name_, "': ", c.status().message()));
  }
  return c;
}

absl::StatusOr<AxisValues> HyperCommGrid::DenseCoordinates() const {
  GTP_RETURN_IF_ERROR(CheckMember());
  return dense_.Coordinates(world_rank_);
}

absl::StatusOr<AxisValues> HyperCommGrid::ExpertCoordinates() const {
  GTP_RETURN_IF_ERROR(CheckMember());
  return expert_.Coordinates(world_rank_);
}

absl::StatusOr<int> HyperCommGrid::DataLane(int rank) const {
  GTP_ASSIGN_OR_RETURN(std::vector<int> lane_group, dense_.GroupOf(rank, "gtp-dp"));
  return static_cast<int>(std::find(lane_group.begin(), lane_group.end(), rank) -
                          lane_group.begin());
}

absl::StatusOr<std::vector<int>> HyperCommGrid::LaneLeaders(int pp_stage) const {
  AxisValues c;
  c.tp = c.gtp = c.cp = c.ep = c.dp = 0;
  c.pp = pp_stage;
  GTP_ASSIGN_OR_RETURN(int first, dense_.Rank(c));
  return dense_.GroupOf(first, "gtp-dp");
}

}  // namespace gtp::parallel
