// ProcessGroupCollection and HyperCommGrid over the real in-process backend
// (//comm/local): every group's communicator reduces over exactly its ranks.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/local/local_communicator.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "parallel/hyper_comm_grid.h"
#include "parallel/process_groups.h"
#include "parallel/rng.h"

namespace gtp::parallel {
namespace {

// All-reduces this rank's world rank over group `name` and checks the sum.
absl::Status CheckSum(const ProcessGroupCollection& pgs, const std::string& name, int world_rank) {
  GTP_ASSIGN_OR_RETURN(comm::Communicator * c, pgs.Get(name));
  GTP_ASSIGN_OR_RETURN(std::vector<int> ranks, pgs.Ranks(name));
  int64_t x = world_rank, want = 0;
  for (int r : ranks) want += r;
  GTP_RETURN_IF_ERROR(comm::Run(c->AllReduce(&x, &x, 1, DType::kI64, comm::ReduceOp::kSum)));
  if (x != want) {
    return absl::InternalError(absl::StrCat(name, ": sum ", x, " != ", want));
  }
  return absl::OkStatus();
}

TEST(ProcessGroupsLocal, EveryGroupReducesOverItsRanks) {
  ParallelConfig c;
  c.tp = 2;
  c.tp_num_weight_shards = 4;
  c.pp = 2;
  c.ep = 2;
  c.etp = 1;
  absl::Status s = comm::RunRanks(16, [&](comm::Communicator& world) -> absl::Status {
    GTP_ASSIGN_OR_RETURN(ProcessGroupCollection pgs, ProcessGroupCollection::Build(c, world));
    // Same order on every rank; embd only where this rank is a member (its
    // groups are disjoint, so members of one group agree on the call).
    for (const std::string& name : pgs.Names()) {
      GTP_ASSIGN_OR_RETURN(const ProcessGroup* g, pgs.Group(name));
      if (!g->is_member()) continue;
      GTP_RETURN_IF_ERROR(CheckSum(pgs, name, world.rank()));
    }
    GTP_ASSIGN_OR_RETURN(RngStreams rng, RngStreamsFromGroups(42, pgs));
    // model_parallel agrees across the dp·gtp·cp replicas of a model part:
    // the max and min over "data_cp" are equal.
    GTP_ASSIGN_OR_RETURN(comm::Communicator * data_cp, pgs.Get("data_cp"));
    int64_t lo = static_cast<int64_t>(rng.model_parallel >> 1), hi = lo;
    GTP_RETURN_IF_ERROR(
        comm::Run(data_cp->AllReduce(&lo, &lo, 1, DType::kI64, comm::ReduceOp::kMin)));
    GTP_RETURN_IF_ERROR(
        comm::Run(data_cp->AllReduce(&hi, &hi, 1, DType::kI64, comm::ReduceOp::kMax)));
    if (lo != hi) return absl::InternalError("model_parallel key differs across replicas");
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(ProcessGroupsLocal, MimoGridsCoexist) {
  absl::Status s = comm::RunRanks(6, [](comm::Communicator& world) -> absl::Status {
    ParallelConfig vision;  // TP2 on [0, 2)
    vision.tp = 2;
    ParallelConfig language;  // GTP2 · DP2 on [2, 6)
    language.tp_num_weight_shards = 2;
    GTP_ASSIGN_OR_RETURN(HyperCommGrid v, HyperCommGrid::Create("vision", vision, 0, 2, world));
    GTP_ASSIGN_OR_RETURN(HyperCommGrid l, HyperCommGrid::Create("language", language, 2, 4, world));
    const HyperCommGrid& mine = v.is_member() ? v : l;
    const HyperCommGrid& other = v.is_member() ? l : v;
    if (other.groups().ok()) return absl::InternalError("member of both grids");
    GTP_ASSIGN_OR_RETURN(const ProcessGroupCollection* pgs, mine.groups());
    for (const char* name : {"grid", "tp", "gtp", "dp", "data"}) {
      GTP_RETURN_IF_ERROR(CheckSum(*pgs, name, world.rank()));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace gtp::parallel
