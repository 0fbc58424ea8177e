// parallel/process_groups.h — explicit, named process groups.
//
// A ProcessGroupCollection maps names ("tp", "dp_cp", "ep", ...) to groups:
// every group's rank list (world ranks) and, for the group holding this rank,
// its Communicator. Modules receive a collection and read groups only from it
// (DESIGN.md §3); there is no global state. Asking for a name the collection
// lacks is NotFound, listing the names it has — never a fallback.
//
//   GTP_ASSIGN_OR_RETURN(ProcessGroupCollection pgs,
//                        ProcessGroupCollection::Build(config, *world));
//   GTP_ASSIGN_OR_RETURN(comm::Communicator* tp, pgs.Get(groups::kTp));
//
// Standard groups (StandardGroupSpecs() is the table; "dense" axes are of the
// dense grid, "expert" axes of the expert grid, where tp=ETP, gtp=EGTP, dp=EDP):
//
//   grid      dense tp-gtp-cp-ep-dp-pp  every rank of the grid
//   tp        dense tp                  tensor parallel
//   gtp       dense gtp                 weight-shard gather / reduce-scatter peers
//   tp_gtp    dense tp-gtp              all shards of one weight (1/(TP·GTP) each)
//   cp        dense cp                  context parallel
//   tp_cp     dense tp-cp               ranks of one data lane in one stage
//   dp        dense dp                  data parallel replicas
//   dp_cp     dense dp-cp               gradient reduction / optimizer sharding
//   data      dense gtp-dp              data lanes: ranks that read different samples
//   data_cp   dense gtp-cp-dp           ranks that see different tokens of one model part
//   pp        dense pp                  pipeline
//   mp        dense tp-gtp-pp           one model replica: ranks holding distinct weights
//   embd      first and last stage of each pp group (tied embeddings; each
//             rank alone when PP = 1; middle stages are in no embd group)
//   ep        expert ep                 expert parallel (token all-to-all)
//   etp       expert tp                 expert tensor parallel
//   egtp      expert gtp                expert weight-shard peers
//   etp_egtp  expert tp-gtp             all shards of one expert weight
//   etp_ep    expert tp-ep              token dispatch (Megatron's expert tp×ep)
//   edp       expert dp                 expert data parallel (expert replicate group)
//   emp       expert tp-ep-gtp-pp       ranks holding distinct expert weights
//   replicate alias of dp_cp            what DDP reduces and the optimizer shards over
//                                       (an alias shares its target's communicator)
//
// Choices: "mp" is Megatron's model-parallel group (tp-pp) widened by GTP,
// because GTP shards weights too; it is tp-pp when GTP = 1 and excludes CP as
// Megatron does. "replicate" is dp×cp (Megatron's data-parallel group "with
// context parallel"): CP ranks hold identical weights, so gradients and
// optimizer state are reduced and sharded over both; it is dp when CP = 1.
//
// Building is collective over the world communicator (every rank calls Build
// with the same config, in the same order with respect to other collectives
// on that communicator) and blocks until every group is established. A built
// collection is immutable apart from Add*; its const methods are thread-safe.
// Each Communicator obeys its own contract (one thread at a time).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "comm/communicator.h"
#include "parallel/group_names.h"
#include "parallel/parallel_config.h"

namespace gtp::parallel {

// One named kind of group: every group's members and this rank's part.
struct ProcessGroup {
  // Name in the collection, e.g. "tp".
  std::string name;
  // Every group of this kind, as world ranks; member order = group rank.
  std::vector<std::vector<int>> all_ranks;
  // This rank's group (world ranks), empty when this rank is in none.
  std::vector<int> ranks;
  // This rank's communicator; null when this rank is in none.
  std::shared_ptr<comm::Communicator> comm;

  bool is_member() const { return comm != nullptr; }
  // Rank within the group and its size; -1 / 0 when not a member.
  int rank() const { return comm ? comm->rank() : -1; }
  int size() const { return static_cast<int>(ranks.size()); }
};

// Which grid a standard group's axes refer to.
enum class GridKind { kDense, kExpert, kEmbedding };

// One row of the standard group table (see the file comment).
struct GroupSpec {
  const char* name;
  GridKind grid;
  const char* axes;  // for kEmbedding: derived from the dense pp groups
  const char* purpose;
};

// The standard groups in build order.
const std::vector<GroupSpec>& StandardGroupSpecs();
// Aliases of standard groups: {alias, target}.
const std::vector<std::pair<std::string, std::string>>& StandardGroupAliases();

// Rank lists of every standard group for a resolved config whose grid
// starts at world rank `offset`, in StandardGroupSpecs() order.
// FailedPrecondition when `config` is not resolved. Pure; thread-safe.
absl::StatusOr<std::vector<std::pair<std::string, std::vector<std::vector<int>>>>>
StandardGroupRanks(const ParallelConfig& config, int offset = 0);

class ProcessGroupCollection {
 public:
  // An empty collection for world rank `world_rank`, to assemble by hand.
  explicit ProcessGroupCollection(int world_rank) : world_rank_(world_rank) {}

  ProcessGroupCollection(ProcessGroupCollection&&) = default;
  ProcessGroupCollection& operator=(ProcessGroupCollection&&) = default;

  // Resolves `config` against world.size() (InvalidArgument as Resolve) and
  // creates every standard group by one world.Split per group kind.
  // Collective over `world`; blocks.
  static absl::StatusOr<ProcessGroupCollection> Build(const ParallelConfig& config,
                                                      comm::Communicator& world,
                                                      const ModelFacts& facts = {});

  // Standard groups of a resolved config on the world ranks [offset, offset +
  // config.world_size) of `world`; communicator names get `prefix` (e.g.
  // "vision."). Ranks outside the range get a collection whose groups all
  // have is_member() false. Collective over all of `world`; blocks.
  static absl::StatusOr<ProcessGroupCollection> BuildOnRange(const ParallelConfig& config,
                                                             int offset, comm::Communicator& world,
                                                             const std::string& prefix = "");

  // Adds group kind `name` by world.Split(groups, prefix) — collective over
  // `world`; blocks. `groups` are disjoint lists of world ranks (not
  // necessarily covering the world). InvalidArgument on overlapping or
  // out-of-range ranks; AlreadyExists if `name` is taken.
  absl::Status AddSplit(comm::Communicator& world, const std::string& name,
                        std::vector<std::vector<int>> groups, const std::string& prefix = "");

  // Adds group kind `name` with a communicator made elsewhere (null when this
  // rank is in none of `groups`). Checks that `comm` matches this rank's
  // group (size and rank). Not collective; does not block.
  absl::Status Add(const std::string& name, std::vector<std::vector<int>> groups,
                   std::shared_ptr<comm::Communicator> comm);

  // Makes `alias` another name for the existing group `target`.
  absl::Status AddAlias(const std::string& alias, const std::string& target);

  // The group called `name`: NotFound (listing the names present) when the
  // collection has no such group.
  absl::StatusOr<const ProcessGroup*> Group(absl::string_view name) const;
  // This rank's communicator in group `name`: NotFound as Group, or
  // FailedPrecondition when this rank belongs to no group of that kind
  // (e.g. "embd" on a middle pipeline stage).
  absl::StatusOr<comm::Communicator*> Get(absl::string_view name) const;
  // This rank's group members (world ranks), with Get's errors.
  absl::StatusOr<std::vector<int>> Ranks(absl::string_view name) const;
  // Size of this rank's group `name` and this rank's index in it, with Get's errors.
  absl::StatusOr<int> Size(absl::string_view name) const;
  absl::StatusOr<int> RankIn(absl::string_view name) const;

  bool Has(absl::string_view name) const;
  // Every name, aliases included, sorted.
  std::vector<std::string> Names() const;
  // The world rank this collection belongs to.
  int world_rank() const { return world_rank_; }

 private:
  absl::Status CheckNewName(const std::string& name) const;

  int world_rank_;
  std::map<std::string, std::shared_ptr<const ProcessGroup>, std::less<>> groups_;
};

}  // namespace gtp::parallel
