#include "parallel/rng.h"

#include <memory>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "parallel/parallel_config.h"
#include "parallel/testing/fake_communicator.h"

namespace gtp::parallel {
namespace {

using testing::FakeCommunicator;

// For every pair of ranks, a stream's keys agree exactly when the ranks
// agree on the coordinates the stream depends on.
TEST(RngStreams, AgreementsFollowCoordinates) {
  struct Shape {
    int tp, shards, cp, pp, ep, etp, eshards, world;
  };
  const Shape shapes[] = {
      {2, 4, 1, 1, 1, 0, 0, 8}, {2, 8, 1, 1, 4, 1, 2, 24}, {2, 4, 2, 2, 2, 1, 2, 32},
      {1, 1, 1, 1, 1, 0, 0, 4}, {4, 4, 2, 1, 2, 2, 2, 16}, {2, 2, 1, 3, 2, 1, 1, 12},
  };
  for (const Shape& s : shapes) {
    ParallelConfig c;
    c.tp = s.tp;
    c.tp_num_weight_shards = s.shards;
    c.cp = s.cp;
    c.pp = s.pp;
    c.ep = s.ep;
    c.etp = s.etp;
    c.expert_tp_num_weight_shards = s.eshards;
    auto r = c.Resolve(s.world);
    ASSERT_TRUE(r.ok()) << r.status();
    SCOPED_TRACE(r->ToString());
    auto dense = r->DenseGrid();
    auto expert = r->ExpertGrid();
    ASSERT_TRUE(dense.ok() && expert.ok());
    std::vector<AxisValues> d, e;
    std::vector<RngStreams> k;
    for (int rank = 0; rank < s.world; ++rank) {
      d.push_back(*dense->Coordinates(rank));
      e.push_back(*expert->Coordinates(rank));
      k.push_back(MakeRngStreams(1234, d.back(), e.back()));
    }
    for (int a = 0; a < s.world; ++a) {
      for (int b = 0; b < s.world; ++b) {
        SCOPED_TRACE(absl::StrCat("ranks ", a, " ", b));
        const AxisValues &x = d[a], &y = d[b];
        EXPECT_EQ(k[a].global, k[b].global);
        EXPECT_EQ(k[a].model_parallel == k[b].model_parallel, x.tp == y.tp && x.pp == y.pp);
        EXPECT_EQ(k[a].data == k[b].data, x.dp == y.dp && x.gtp == y.gtp);
        EXPECT_EQ(k[a].activation == k[b].activation,
                  x.dp == y.dp && x.gtp == y.gtp && x.cp == y.cp && x.pp == y.pp);
        EXPECT_EQ(k[a].tp_activation == k[b].tp_activation, a == b);
        EXPECT_EQ(k[a].expert_model_parallel == k[b].expert_model_parallel,
                  e[a].tp == e[b].tp && e[a].ep == e[b].ep && e[a].pp == e[b].pp);
      }
    }
    // Streams differ from each other, and change with the seed.
    std::set<uint64_t> keys = {k[0].global, k[0].model_parallel, k[0].expert_model_parallel,
                               k[0].data,   k[0].activation,     k[0].tp_activation};
    EXPECT_EQ(keys.size(), 6u);
    EXPECT_NE(MakeRngStreams(1235, d[0], e[0]).model_parallel, k[0].model_parallel);
  }
}

// Keys come from group coordinates, not rank numbers: a collection with
// permuted membership gives rank pi(r) the keys of rank r in the default one.
TEST(RngStreams, PermutedMembershipGivesTheSameKeys) {
  ParallelConfig c;
  c.tp = 2;
  c.tp_num_weight_shards = 4;
  c.pp = 2;
  c.ep = 2;
  c.etp = 1;
  auto r = c.Resolve(16);
  ASSERT_TRUE(r.ok());
  auto all = StandardGroupRanks(*r);
  ASSERT_TRUE(all.ok());
  const int n = 16;
  std::vector<int> pi(n);
  for (int i = 0; i < n; ++i) pi[i] = (i * 5 + 3) % n;  // a bijection
  for (int rank = 0; rank < n; ++rank) {
    FakeCommunicator w0(rank, n);
    auto def = ProcessGroupCollection::Build(*r, w0);
    ASSERT_TRUE(def.ok());
    auto want = RngStreamsFromGroups(7, *def);
    ASSERT_TRUE(want.ok()) << want.status();
    // Same as the coordinates' keys.
    auto direct =
        MakeRngStreams(7, *r->DenseGrid()->Coordinates(rank), *r->ExpertGrid()->Coordinates(rank));
    EXPECT_EQ(want->model_parallel, direct.model_parallel);
    EXPECT_EQ(want->expert_model_parallel, direct.expert_model_parallel);
    EXPECT_EQ(want->tp_activation, direct.tp_activation);

    FakeCommunicator w1(pi[rank], n);
    ProcessGroupCollection perm(pi[rank]);
    for (const auto& [name, groups] : *all) {
      std::vector<std::vector<int>> mapped = groups;
      for (auto& g : mapped) {
        for (int& m : g) m = pi[m];
      }
      ASSERT_TRUE(perm.AddSplit(w1, name, mapped).ok());
    }
    auto got = RngStreamsFromGroups(7, perm);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->global, want->global);
    EXPECT_EQ(got->model_parallel, want->model_parallel);
    EXPECT_EQ(got->expert_model_parallel, want->expert_model_parallel);
    EXPECT_EQ(got->data, want->data);
    EXPECT_EQ(got->activation, want->activation);
    EXPECT_EQ(got->tp_activation, want->tp_activation);
  }
}

TEST(RngStreams, MissingGroupIsAnError) {
  ProcessGroupCollection empty(0);
  auto s = RngStreamsFromGroups(1, empty);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gtp::parallel
