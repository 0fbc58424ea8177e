#include "parallel/hyper_comm_grid.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/testing/fake_communicator.h"

namespace gtp::parallel {
namespace {

using testing::FakeCommunicator;

bool Contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

// World 12: "vision" = TP2·DP2 on ranks [0, 4); "language" = TP2·GTP2·PP2 on
// ranks [4, 12) (strides tp 1, gtp 2, pp 4, offset 4).
struct Mimo {
  std::unique_ptr<FakeCommunicator> world;
  std::unique_ptr<HyperCommGrid> vision, language;
};

Mimo Create(int rank) {
  Mimo m;
  m.world = std::make_unique<FakeCommunicator>(rank, 12);
  ParallelConfig v;
  v.tp = 2;
  ParallelConfig l;
  l.tp = 2;
  l.tp_num_weight_shards = 4;
  l.pp = 2;
  auto vg = HyperCommGrid::Create("vision", v, 0, 4, *m.world);
  auto lg = HyperCommGrid::Create("language", l, 4, 8, *m.world);
  EXPECT_TRUE(vg.ok()) << vg.status();
  EXPECT_TRUE(lg.ok()) << lg.status();
  if (vg.ok()) m.vision = std::make_unique<HyperCommGrid>(*std::move(vg));
  if (lg.ok()) m.language = std::make_unique<HyperCommGrid>(*std::move(lg));
  return m;
}

TEST(HyperCommGrid, TwoModulesOnDisjointRanges) {
  Mimo m = Create(9);  // language: local 5 = tp1 gtp0 pp1
  ASSERT_TRUE(m.vision && m.language);
  EXPECT_FALSE(m.vision->is_member());
  EXPECT_TRUE(m.language->is_member());
  EXPECT_EQ(m.language->offset(), 4);
  EXPECT_EQ(m.language->size(), 8);
  EXPECT_EQ(m.language->config().dp, 1);
  auto groups = m.language->groups();
  ASSERT_TRUE(groups.ok());
  EXPECT_EQ(*(*groups)->Ranks("tp"), (std::vector<int>{8, 9}));
  EXPECT_EQ(*(*groups)->Ranks("gtp"), (std::vector<int>{9, 11}));
  EXPECT_EQ(*(*groups)->Ranks("pp"), (std::vector<int>{5, 9}));
  EXPECT_EQ(*(*groups)->Ranks("embd"), (std::vector<int>{5, 9}));
  EXPECT_EQ(*(*groups)->Ranks("grid"), (std::vector<int>{4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ((*m.language->Get("tp"))->name(), "language.tp[8,9]");
  auto c = m.language->DenseCoordinates();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->tp, 1);
  EXPECT_EQ(c->gtp, 0);
  EXPECT_EQ(c->pp, 1);
}

TEST(HyperCommGrid, RankOutsideIsToldSo) {
  Mimo m = Create(9);
  auto g = m.vision->groups();
  ASSERT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      Contains(g.status().message(), "world rank 9 is not in grid 'vision' (world ranks [0, 4))"))
      << g.status();
  EXPECT_EQ(m.vision->Get("tp").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m.vision->DenseCoordinates().status().code(), absl::StatusCode::kFailedPrecondition);
  // A missing group name inside a grid says which grid.
  auto missing = m.language->Get("tensor");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(missing.status().message(), "grid 'language'"));
}

TEST(HyperCommGrid, AllRanksMakeTheSameSplits) {
  std::vector<Mimo> ranks;
  for (int r = 0; r < 12; ++r) ranks.push_back(Create(r));
  for (int r = 1; r < 12; ++r) EXPECT_EQ(ranks[r].world->splits(), ranks[0].world->splits());
  EXPECT_EQ(*(*ranks[2].vision->groups())->Ranks("dp"), (std::vector<int>{0, 2}));
  EXPECT_EQ((*ranks[2].vision->Get("dp"))->name(), "vision.dp[0,2]");
}

TEST(HyperCommGrid, DataLanes) {
  Mimo m = Create(0);
  // vision TP2·DP2: lanes are the 2 dp replicas, leaders tp = 0.
  EXPECT_EQ(m.vision->num_data_lanes(), 2);
  EXPECT_EQ(*m.vision->LaneLeaders(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(*m.vision->DataLane(3), 1);
  // language TP2·GTP2·PP2: lanes are the 2 gtp peers; stage 0 leaders 4, 6;
  // last stage 8, 10.
  EXPECT_EQ(m.language->num_data_lanes(), 2);
  EXPECT_EQ(*m.language->LaneLeaders(0), (std::vector<int>{4, 6}));
  EXPECT_EQ(*m.language->LaneLeaders(1), (std::vector<int>{8, 10}));
  EXPECT_EQ(*m.language->DataLane(11), 1);
  EXPECT_EQ(m.language->LaneLeaders(2).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(m.language->DataLane(3).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(HyperCommGrid, ColocatedGrids) {
  FakeCommunicator world(1, 4);
  ParallelConfig a;
  a.tp = 2;
  ParallelConfig b;
  b.tp_num_weight_shards = 4;  // GTP4
  auto ga = HyperCommGrid::Create("a", a, 0, 4, world);
  auto gb = HyperCommGrid::Create("b", b, 0, 4, world);
  ASSERT_TRUE(ga.ok() && gb.ok());
  EXPECT_EQ(*(*ga->groups())->Ranks("tp"), (std::vector<int>{0, 1}));
  EXPECT_EQ(*(*gb->groups())->Ranks("gtp"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(*(*gb->groups())->Ranks("tp"), (std::vector<int>{1}));
}

TEST(HyperCommGrid, Errors) {
  FakeCommunicator world(0, 8);
  ParallelConfig c;
  c.tp = 2;
  auto outside = HyperCommGrid::Create("v", c, 6, 4, world);
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(outside.status().message(), "grid 'v' on world ranks [6, 10) does not fit"))
      << outside.status();
  auto bad = HyperCommGrid::Create("v", c, 0, 3, world);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(bad.status().message(), "grid 'v': invalid parallel config: world size 3"))
      << bad.status();
  c.world_size = 4;
  auto mismatch = HyperCommGrid::Create("v", c, 0, 2, world);
  EXPECT_TRUE(Contains(mismatch.status().message(), "differs from the actual world size 2"));
  EXPECT_TRUE(world.splits().empty());
}

}  // namespace
}  // namespace gtp::parallel
