#include "parallel/process_groups.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "parallel/testing/fake_communicator.h"

namespace gtp::parallel {
namespace {

using testing::FakeCommunicator;
using Groups = std::vector<std::vector<int>>;

bool Contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

ParallelConfig Config(int tp, int shards, int pp = 1, int cp = 1) {
  ParallelConfig c;
  c.tp = tp;
  c.tp_num_weight_shards = shards;
  c.pp = pp;
  c.cp = cp;
  return c;
}

// Builds the collection of every rank of `world` in turn on fake worlds.
struct World {
  std::vector<std::unique_ptr<FakeCommunicator>> comms;
  std::vector<ProcessGroupCollection> pgs;
};

World BuildAll(const ParallelConfig& c, int world) {
  World w;
  for (int r = 0; r < world; ++r) {
    w.comms.push_back(std::make_unique<FakeCommunicator>(r, world));
    auto pgs = ProcessGroupCollection::Build(c, *w.comms.back());
    EXPECT_TRUE(pgs.ok()) << pgs.status();
    if (pgs.ok()) w.pgs.push_back(*std::move(pgs));
  }
  return w;
}

TEST(ProcessGroupCollection, WorkedExampleWorld8Tp2Gtp2Dp2) {
  World w = BuildAll(Config(2, 4), 8);
  ASSERT_EQ(w.pgs.size(), 8u);
  const ProcessGroupCollection& p5 = w.pgs[5];  // tp1 gtp0 dp1
  EXPECT_EQ(*p5.Ranks("tp"), (std::vector<int>{4, 5}));
  EXPECT_EQ(*p5.Ranks("gtp"), (std::vector<int>{5, 7}));
  EXPECT_EQ(*p5.Ranks("tp_gtp"), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(*p5.Ranks("dp"), (std::vector<int>{1, 5}));
  EXPECT_EQ(*p5.Ranks("dp_cp"), (std::vector<int>{1, 5}));
  EXPECT_EQ(*p5.Ranks("replicate"), (std::vector<int>{1, 5}));
  EXPECT_EQ(*p5.Ranks("data"), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(*p5.Ranks("data_cp"), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(*p5.Ranks("tp_cp"), (std::vector<int>{4, 5}));
  EXPECT_EQ(*p5.Ranks("cp"), (std::vector<int>{5}));
  EXPECT_EQ(*p5.Ranks("pp"), (std::vector<int>{5}));
  EXPECT_EQ(*p5.Ranks("mp"), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(*p5.Ranks("embd"), (std::vector<int>{5}));
  EXPECT_EQ(*p5.Ranks("grid"), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  // Expert grid: ETP = TP = 2, EP = EGTP = 1, EDP = 4.
  EXPECT_EQ(*p5.Ranks("etp"), (std::vector<int>{4, 5}));
  EXPECT_EQ(*p5.Ranks("edp"), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(*p5.Ranks("ep"), (std::vector<int>{5}));
  EXPECT_EQ(*p5.Ranks("egtp"), (std::vector<int>{5}));
  EXPECT_EQ(*p5.Ranks("emp"), (std::vector<int>{4, 5}));

  EXPECT_EQ(*p5.RankIn("tp"), 1);
  EXPECT_EQ(*p5.RankIn("gtp"), 0);
  EXPECT_EQ(*p5.RankIn("dp"), 1);
  EXPECT_EQ(*p5.Size("data"), 4);
  EXPECT_EQ(*p5.RankIn("data"), 2);
  EXPECT_EQ((*p5.Get("tp"))->name(), "tp[4,5]");
  EXPECT_EQ((*p5.Get("replicate")), (*p5.Get("dp_cp")));  // one communicator, two names
  EXPECT_EQ(p5.world_rank(), 5);
}

TEST(ProcessGroupCollection, EveryRankSplitsWithTheSameLists) {
  ParallelConfig c = Config(2, 4, 2);
  c.ep = 2;
  World w = BuildAll(c, 16);
  ASSERT_EQ(w.pgs.size(), 16u);
  const auto& first = w.comms[0]->splits();
  EXPECT_EQ(first.size(), StandardGroupSpecs().size());
  for (int r = 1; r < 16; ++r) EXPECT_EQ(w.comms[r]->splits(), first) << "rank " << r;
  // Each rank's groups hold it at its communicator's rank.
  for (int r = 0; r < 16; ++r) {
    for (const std::string& name : w.pgs[r].Names()) {
      const ProcessGroup* g = *w.pgs[r].Group(name);
      if (!g->is_member()) continue;
      ASSERT_LT(g->rank(), g->size());
      EXPECT_EQ(g->ranks[g->rank()], r) << name;
    }
  }
}

TEST(ProcessGroupCollection, MissingGroupIsNotFoundListingWhatExists) {
  World w = BuildAll(Config(2, 2), 4);
  auto s = w.pgs[0].Get("tensor");
  ASSERT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(s.status().message(), "no process group 'tensor'")) << s.status();
  EXPECT_TRUE(Contains(s.status().message(), "tp, tp_cp, tp_gtp")) << s.status();
  EXPECT_FALSE(w.pgs[0].Has("tensor"));
  EXPECT_TRUE(w.pgs[0].Has("tp"));

  ProcessGroupCollection empty(0);
  auto e = empty.Get("tp");
  EXPECT_EQ(e.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(e.status().message(), "(none)"));
}

TEST(ProcessGroupCollection, EmbeddingGroupSkipsMiddleStages) {
  // world 8 = TP2 · PP4: pp groups [0,2,4,6] [1,3,5,7]; embd [0,6] [1,7].
  World w = BuildAll(Config(2, 2, 4), 8);
  EXPECT_EQ(*w.pgs[6].Ranks("embd"), (std::vector<int>{0, 6}));
  EXPECT_EQ(*w.pgs[1].Ranks("embd"), (std::vector<int>{1, 7}));
  EXPECT_EQ(*w.pgs[3].Ranks("pp"), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(*w.pgs[3].Ranks("mp"), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  auto s = w.pgs[2].Get("embd");
  ASSERT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(s.status().message(), "world rank 2 is in no 'embd' group")) << s.status();
  EXPECT_TRUE(Contains(s.status().message(), "[0,6] [1,7]")) << s.status();
  EXPECT_FALSE((*w.pgs[2].Group("embd"))->is_member());
}

TEST(ProcessGroupCollection, BadConfigFailsBeforeAnySplit) {
  FakeCommunicator world(0, 12);
  auto pgs = ProcessGroupCollection::Build(Config(2, 4, 2), world);
  ASSERT_EQ(pgs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(pgs.status().message(), "not divisible by TP·GTP·CP·PP"));
  EXPECT_TRUE(world.splits().empty());
}

// GTP = 1 gives exactly the groups of plain TP + DP (and every GTP-widened
// group equals its plain counterpart).
TEST(StandardGroupRanks, GtpOneEqualsPlainTpDp) {
  for (int world : {2, 4, 8, 12, 16, 32}) {
    for (int tp = 1; tp <= world; tp *= 2) {
      for (int pp : {1, 2}) {
        if (world % (tp * pp) != 0) continue;
        auto cfg = Config(tp, tp, pp).Resolve(world);
        ASSERT_TRUE(cfg.ok());
        auto all = StandardGroupRanks(*cfg);
        ASSERT_TRUE(all.ok());
        std::map<std::string, Groups> g(all->begin(), all->end());
        // Plain Megatron grid: order tp-cp-ep-dp-pp, no gtp axis.
        AxisValues s;
        s.tp = tp;
        s.dp = world / tp / pp;
        s.pp = pp;
        auto plain = RankGenerator::Create(s, "tp-cp-ep-dp-pp");
        ASSERT_TRUE(plain.ok());
        EXPECT_EQ(g["tp"], *plain->GetRanks("tp"));
        EXPECT_EQ(g["dp"], *plain->GetRanks("dp"));
        EXPECT_EQ(g["pp"], *plain->GetRanks("pp"));
        EXPECT_EQ(g["tp_gtp"], g["tp"]);
        EXPECT_EQ(g["data"], g["dp"]);
        EXPECT_EQ(g["data_cp"], g["dp_cp"]);
        EXPECT_EQ(g["mp"], *plain->GetRanks("tp-pp"));
        EXPECT_EQ(g["gtp"].size(), static_cast<size_t>(world));  // singletons
      }
    }
  }
}

TEST(ProcessGroupCollection, HandAssembledFromCustomLists) {
  // Permuted membership: tp groups {3,0} {1,2}, built by AddSplit on each rank.
  const Groups tp = {{3, 0}, {1, 2}};
  std::vector<std::unique_ptr<FakeCommunicator>> comms;
  for (int r = 0; r < 4; ++r) {
    comms.push_back(std::make_unique<FakeCommunicator>(r, 4));
    ProcessGroupCollection pgs(r);
    ASSERT_TRUE(pgs.AddSplit(*comms.back(), "tp", tp).ok());
    ASSERT_TRUE(pgs.AddAlias("tensor", "tp").ok());
    EXPECT_EQ(*pgs.RankIn("tp"), r == 3 || r == 1 ? 0 : 1);
    EXPECT_EQ(*pgs.Get("tensor"), *pgs.Get("tp"));
    EXPECT_EQ(pgs.Names(), (std::vector<std::string>{"tensor", "tp"}));
    EXPECT_EQ(pgs.AddSplit(*comms.back(), "tp", tp).code(), absl::StatusCode::kAlreadyExists);
    EXPECT_EQ(pgs.AddAlias("x", "nope").code(), absl::StatusCode::kNotFound);
  }
}

TEST(ProcessGroupCollection, AddChecksTheCommunicator) {
  ProcessGroupCollection pgs(2);
  // Rank 2 is member 1 of [0,2]: a communicator of rank 0 of 2 does not match.
  auto wrong = std::make_shared<FakeCommunicator>(0, 2, "x");
  absl::Status s = pgs.Add("x", {{0, 2}, {1, 3}}, wrong);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "expected rank 1 of 2")) << s;
  EXPECT_EQ(pgs.Add("x", {{0, 2}}, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pgs.Add("y", {{0, 1}}, std::make_shared<FakeCommunicator>(0, 2)).code(),
            absl::StatusCode::kInvalidArgument);  // not a member, yet given a communicator
  EXPECT_TRUE(pgs.Add("x", {{0, 2}, {1, 3}}, std::make_shared<FakeCommunicator>(1, 2)).ok());
  EXPECT_TRUE(pgs.Add("y", {{0, 1}}, nullptr).ok());
  EXPECT_EQ(pgs.Get("y").status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ProcessGroupCollection, AddSplitRejectsBadLists) {
  FakeCommunicator world(0, 4);
  ProcessGroupCollection pgs(0);
  absl::Status s = pgs.AddSplit(world, "x", {{0, 1}, {1, 2}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "rank 1 appears twice")) << s;
  s = pgs.AddSplit(world, "x", {{0, 4}});
  EXPECT_TRUE(Contains(s.message(), "rank 4 outside the world [0, 4)")) << s;
  EXPECT_TRUE(world.splits().empty());  // rejected before the collective
  ProcessGroupCollection other(1);
  EXPECT_EQ(other.AddSplit(world, "x", {{0, 1}}).code(), absl::StatusCode::kInvalidArgument);
}

// The groups of one grid computed from the order string alone, without
// RankGenerator: rank = offset + Σ c_a · Π(sizes listed before a), a group
// over `axes` holds the ranks agreeing on every other coordinate, ordered by
// its axes' coordinates with the first listed fastest, and the groups are
// listed the same way over the other axes (rank_generator.h's contract).
Groups ReferenceGroups(const AxisValues& sizes, const std::vector<std::string>& order,
                       const std::vector<std::string>& axes, int offset) {
  const std::vector<std::string> names = {"tp", "gtp", "cp", "ep", "dp", "pp"};
  const std::vector<int> size = {sizes.tp, sizes.gtp, sizes.cp, sizes.ep, sizes.dp, sizes.pp};
  auto index_of = [&](const std::string& n) {
    return static_cast<int>(std::find(names.begin(), names.end(), n) - names.begin());
  };
  std::vector<int> stride(6), listed;  // listed: axis indices in order
  int world = 1;
  for (const std::string& n : order) {
    listed.push_back(index_of(n));
    stride[listed.back()] = world;
    world *= size[listed.back()];
  }
  std::vector<bool> in(6, false);
  for (const std::string& n : axes) in[index_of(n)] = true;
  int members = 1;
  for (int a = 0; a < 6; ++a) members *= in[a] ? size[a] : 1;
  Groups groups(world / members, std::vector<int>(members));
  for (int r = 0; r < world; ++r) {
    int inner = 0, outer = 0, inner_radix = 1, outer_radix = 1;
    for (int a : listed) {
      const int c = (r / stride[a]) % size[a];
      if (in[a]) {
        inner += c * inner_radix;
        inner_radix *= size[a];
      } else {
        outer += c * outer_radix;
        outer_radix *= size[a];
      }
    }
    groups[outer][inner] = offset + r;
  }
  return groups;
}

// Every standard group follows the configured orders. For all 720 dense
// orders of a grid where every axis matters (dense TP2·GTP2·CP2·DP2·PP2,
// expert ETP2·EP2·EGTP2·EDP2·PP2 on 32 ranks), each paired with the expert
// order that has cp and ep swapped (so both grids put the same ranks on one
// pipeline stage), the collection Build gives equals the groups computed
// from the order strings alone. A kind of group built in a fixed order — the
// reference system's all-gather groups under a custom order — fails here.
TEST(ProcessGroupCollection, EveryGroupFollowsTheConfiguredOrders) {
  std::vector<std::string> order = {"cp", "dp", "ep", "gtp", "pp", "tp"};  // sorted
  ParallelConfig c = Config(/*tp=*/2, /*shards=*/4, /*pp=*/2, /*cp=*/2);
  c.ep = 2;
  c.etp = 2;
  c.expert_tp_num_weight_shards = 4;
  const int world = 32;
  int cases = 0;
  do {
    std::vector<std::string> expert_order = order;
    for (std::string& n : expert_order) n = n == "cp" ? "ep" : n == "ep" ? "cp" : n;
    c.order = absl::StrJoin(order, "-");
    c.expert_order = absl::StrJoin(expert_order, "-");
    SCOPED_TRACE(absl::StrCat("order ", c.order, ", expert order ", c.expert_order));
    auto resolved = c.Resolve(world);
    ASSERT_TRUE(resolved.ok()) << resolved.status();
    const AxisValues dense = resolved->DenseSizes(), expert = resolved->ExpertSizes();
    ASSERT_EQ(expert.Product(), world);
    const int rank = cases % world;  // a different rank's view each time
    FakeCommunicator comm(rank, world);
    auto pgs = ProcessGroupCollection::Build(c, comm);
    ASSERT_TRUE(pgs.ok()) << pgs.status();
    for (const GroupSpec& spec : StandardGroupSpecs()) {
      SCOPED_TRACE(spec.name);
      const std::vector<std::string> axes = absl::StrSplit(spec.axes, '-');
      Groups want;
      if (spec.grid == GridKind::kExpert) {
        want = ReferenceGroups(expert, expert_order, axes, 0);
      } else {
        want = ReferenceGroups(dense, order, axes, 0);
      }
      if (spec.grid == GridKind::kEmbedding) {
        for (std::vector<int>& g : want) g = {g.front(), g.back()};
      }
      const ProcessGroup* got = *pgs->Group(spec.name);
      ASSERT_EQ(got->all_ranks, want);
      // This rank's communicator is its own group, at its place in it.
      for (const std::vector<int>& g : want) {
        auto at = std::find(g.begin(), g.end(), rank);
        if (at == g.end()) continue;
        EXPECT_EQ(got->ranks, g);
        EXPECT_EQ(got->rank(), static_cast<int>(at - g.begin()));
      }
    }
    // Grids on a range of a larger world shift every rank by the offset.
    if (cases % 97 == 0) {
      auto shifted = StandardGroupRanks(*resolved, /*offset=*/5);
      ASSERT_TRUE(shifted.ok()) << shifted.status();
      for (const auto& [name, groups] : *shifted) {
        if (name != "tp" && name != "gtp" && name != "egtp") continue;
        const bool on_expert = name == "egtp";
        EXPECT_EQ(groups,
                  ReferenceGroups(on_expert ? expert : dense, on_expert ? expert_order : order,
                                  {name == "tp" ? "tp" : "gtp"}, 5))
            << name;
      }
    }
    ++cases;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(cases, 720);
}

}  // namespace
}  // namespace gtp::parallel
