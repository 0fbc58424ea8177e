#include "parallel/process_groups.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"

namespace gtp::parallel {
namespace {

// "[0,1] [2,3] ..." with at most `limit` groups.
std::string Summary(const std::vector<std::vector<int>>& groups, size_t limit = 8) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < groups.size() && i < limit; ++i) {
    parts.push_back(absl::StrCat("[", absl::StrJoin(groups[i], ","), "]"));
  }
  if (groups.size() > limit) parts.push_back(absl::StrCat("... (", groups.size(), " groups)"));
  return absl::StrJoin(parts, " ");
}

// Index of the group holding `rank`, or -1; also validates the lists.
absl::StatusOr<int> FindMember(const std::string& name, const std::vector<std::vector<int>>& groups,
                               int world_size, int rank) {
  std::vector<int> seen;
  int found = -1;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("group '", name, "' #", g, " is empty"));
    }
    for (int r : groups[g]) {
      if (r < 0 || (world_size > 0 && r >= world_size)) {
        return absl::InvalidArgumentError(absl::StrCat("group '", name, "' holds rank ", r,
                                                       " outside the world [0, ", world_size, ")"));
      }
      seen.push_back(r);
      if (r == rank) found = static_cast<int>(g);
    }
  }
  std::sort(seen.begin(), seen.end());
  auto dup = std::adjacent_find(seen.begin(), seen.end());
  if (dup != seen.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("groups of '", name, "' overlap: rank ", *dup, " appears twice"));
  }
  return found;
}

}  // namespace

const std::vector<GroupSpec>& StandardGroupSpecs() {
  static const auto* specs = new std::vector<GroupSpec>{
      {"grid", GridKind::kDense, "tp-gtp-cp-ep-dp-pp", "every rank of the grid"},
      {"tp", GridKind::kDense, "tp", "tensor parallel"},
      {"gtp", GridKind::kDense, "gtp", "weight-shard gather / reduce-scatter peers"},
      {"tp_gtp", GridKind::kDense, "tp-gtp", "all shards of one weight"},
      {"cp", GridKind::kDense, "cp", "context parallel"},
      {"tp_cp", GridKind::kDense, "tp-cp", "ranks of one data lane in one stage"},
      {"dp", GridKind::kDense, "dp", "data-parallel replicas"},
      {"dp_cp", GridKind::kDense, "dp-cp", "gradient reduction and optimizer sharding"},
      {"data", GridKind::kDense, "gtp-dp", "data lanes (ranks reading different samples)"},
      {"data_cp", GridKind::kDense, "gtp-cp-dp", "ranks seeing different tokens of one model part"},
      {"pp", GridKind::kDense, "pp", "pipeline"},
      {"mp", GridKind::kDense, "tp-gtp-pp", "one model replica (ranks holding distinct weights)"},
      {"embd", GridKind::kEmbedding, "pp", "first and last pipeline stage (tied embeddings)"},
      {"ep", GridKind::kExpert, "ep", "expert parallel"},
      {"etp", GridKind::kExpert, "tp", "expert tensor parallel"},
      {"egtp", GridKind::kExpert, "gtp", "expert weight-shard peers"},
      {"etp_egtp", GridKind::kExpert, "tp-gtp", "all shards of one expert weight"},
      {"etp_ep", GridKind::kExpert, "tp-ep", "token dispatch"},
      {"edp", GridKind::kExpert, "dp", "expert data parallel (expert replicate group)"},
      {"emp", GridKind::kExpert, "tp-ep-gtp-pp", "ranks holding distinct expert weights"},
  };
  return *specs;
}

const std::vector<std::pair<std::string, std::string>>& StandardGroupAliases() {
  static const auto* aliases =
      new std::vector<std::pair<std::string, std::string>>{{"replicate", "dp_cp"}};
  return *aliases;
}

absl::StatusOr<std::vector<std::pair<std::string, std::vector<std::vector<int>>>>>
StandardGroupRanks(const ParallelConfig& config, int offset) {
  if (!config.resolved()) {
    return absl::FailedPreconditionError(
        "StandardGroupRanks needs a resolved ParallelConfig; call Resolve()");
  }
  GTP_ASSIGN_OR_RETURN(RankGenerator dense, config.DenseGrid(offset));
  GTP_ASSIGN_OR_RETURN(RankGenerator expert, config.ExpertGrid(offset));
  std::vector<std::pair<std::string, std::vector<std::vector<int>>>> out;
  for (const GroupSpec& spec : StandardGroupSpecs()) {
    std::vector<std::vector<int>> groups;
    switch (spec.grid) {
      case GridKind::kDense: {
        GTP_ASSIGN_OR_RETURN(groups, dense.GetRanks(spec.axes));
        break;
      }
      case GridKind::kExpert: {
        GTP_ASSIGN_OR_RETURN(groups, expert.GetRanks(spec.axes));
        break;
      }
      case GridKind::kEmbedding: {
        GTP_ASSIGN_OR_RETURN(std::vector<std::vector<int>> pp, dense.GetRanks("pp"));
        for (const std::vector<int>& g : pp) {
          groups.push_back(g.size() > 1 ? std::vector<int>{g.front(), g.back()} : g);
        }
        break;
      }
    }
    out.emplace_back(spec.name, std::move(groups));
  }
  return out;
}

absl::StatusOr<ProcessGroupCollection> ProcessGroupCollection::Build(const ParallelConfig& config,
                                                                     comm::Communicator& world,
                                                                     const ModelFacts& facts) {
  GTP_ASSIGN_OR_RETURN(ParallelConfig resolved, config.Resolve(world.size(), facts));
  return BuildOnRange(resolved, 0, world, "");
}

absl::StatusOr<ProcessGroupCollection> ProcessGroupCollection::BuildOnRange(
    const ParallelConfig& config, int offset, comm::Communicator& world,
    const std::string& prefix) {
  if (!config.resolved()) {
    return absl::FailedPreconditionError("BuildOnRange needs a resolved ParallelConfig");
  }
  if (offset < 0 || int64_t{offset} + config.world_size > world.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("grid ranks [", offset, ", ", int64_t{offset} + config.world_size,
                     ") do not fit in world '", world.name(), "' of size ", world.size()));
  }
  GTP_ASSIGN_OR_RETURN(auto all, StandardGroupRanks(config, offset));
  ProcessGroupCollection pgs(world.rank());
  for (auto& [name, groups] : all) {
    GTP_RETURN_IF_ERROR(pgs.AddSplit(world, name, std::move(groups), prefix));
  }
  for (const auto& [alias, target] : StandardGroupAliases()) {
    GTP_RETURN_IF_ERROR(pgs.AddAlias(alias, target));
  }
  return pgs;
}

absl::Status ProcessGroupCollection::CheckNewName(const std::string& name) const {
  if (name.empty()) return absl::InvalidArgumentError("process group name is empty");
  if (groups_.count(name) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("process group '", name, "' is already in the collection"));
  }
  return absl::OkStatus();
}

absl::Status ProcessGroupCollection::AddSplit(comm::Communicator& world, const std::string& name,
                                              std::vector<std::vector<int>> groups,
                                              const std::string& prefix) {
  GTP_RETURN_IF_ERROR(CheckNewName(name));
  if (world.rank() != world_rank_) {
    return absl::InvalidArgumentError(absl::StrCat("collection of world rank ", world_rank_,
                                                   " was given communicator '", world.name(),
                                                   "' whose rank is ", world.rank()));
  }
  // Validate before the collective so bad lists fail the same way everywhere.
  GTP_RETURN_IF_ERROR(FindMember(name, groups, world.size(), world_rank_).status());
  GTP_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> sub, world.Split(groups, prefix + name));
  return Add(name, std::move(groups), std::shared_ptr<comm::Communicator>(std::move(sub)));
}

absl::Status ProcessGroupCollection::Add(const std::string& name,
                                         std::vector<std::vector<int>> groups,
                                         std::shared_ptr<comm::Communicator> comm) {
  GTP_RETURN_IF_ERROR(CheckNewName(name));
  GTP_ASSIGN_OR_RETURN(int index, FindMember(name, groups, 0, world_rank_));
  auto g = std::make_shared<ProcessGroup>();
  g->name = name;
  if (index < 0) {
    if (comm != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("world rank ", world_rank_, " is in no '",
                                                     name, "' group but was given communicator '",
                                                     comm->name(), "'"));
    }
  } else {
    const std::vector<int>& mine = groups[index];
    const int want_rank =
        static_cast<int>(std::find(mine.begin(), mine.end(), world_rank_) - mine.begin());
    if (comm == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("world rank ", world_rank_, " is in '", name,
                                                     "' group [", absl::StrJoin(mine, ","),
                                                     "] but has no communicator for it"));
    }
    if (comm->size() != static_cast<int>(mine.size()) || comm->rank() != want_rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          "communicator '", comm->name(), "' (rank ", comm->rank(), " of ", comm->size(),
          ") does not match world rank ", world_rank_, "'s '", name, "' group [",
          absl::StrJoin(mine, ","), "] (expected rank ", want_rank, " of ", mine.size(), ")"));
    }
    g->ranks = mine;
  }
  g->all_ranks = std::move(groups);
  g->comm = std::move(comm);
  groups_.emplace(name, std::move(g));
  return absl::OkStatus();
}

absl::Status ProcessGroupCollection::AddAlias(const std::string& alias, const std::string& target) {
  GTP_RETURN_IF_ERROR(CheckNewName(alias));
  GTP_RETURN_IF_ERROR(Group(target).status());
  groups_.emplace(alias, groups_.find(target)->second);
  return absl::OkStatus();
}

absl::StatusOr<const ProcessGroup*> ProcessGroupCollection::Group(absl::string_view name) const {
  auto it = groups_.find(std::string(name));
  if (it == groups_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no process group '", name, "' in this collection; it has: ",
                     groups_.empty() ? "(none)" : absl::StrJoin(Names(), ", ")));
  }
  return it->second.get();
}

absl::StatusOr<comm::Communicator*> ProcessGroupCollection::Get(absl::string_view name) const {
  GTP_ASSIGN_OR_RETURN(const ProcessGroup* g, Group(name));
  if (!g->is_member()) {
    return absl::FailedPreconditionError(
        absl::StrCat("world rank ", world_rank_, " is in no '", name,
                     "' group (groups: ", Summary(g->all_ranks), ")"));
  }
  return g->comm.get();
}

absl::StatusOr<std::vector<int>> ProcessGroupCollection::Ranks(absl::string_view name) const {
  GTP_RETURN_IF_ERROR(Get(name).status());
  return Group(name).value()->ranks;
}

absl::StatusOr<int> ProcessGroupCollection::Size(absl::string_view name) const {
  GTP_ASSIGN_OR_RETURN(comm::Communicator * c, Get(name));
  return c->size();
}

absl::StatusOr<int> ProcessGroupCollection::RankIn(absl::string_view name) const {
  GTP_ASSIGN_OR_RETURN(comm::Communicator * c, Get(name));
  return c->rank();
}

bool ProcessGroupCollection::Has(absl::string_view name) const {
  return groups_.count(std::string(name)) != 0;
}

std::vector<std::string> ProcessGroupCollection::Names() const {
  std::vector<std::string> names;
  for (const auto& kv : groups_) names.push_back(kv.first);
  return names;
}

}  // namespace gtp::parallel
