#include "plan/search.h"

#include "gtest/gtest.h"
#include "plan/report.h"
#include "recipes/trainer/config.h"

namespace gtp::plan {
namespace {

// Issue 32's acceptance: a 70B dense model on 64 H200s (141 GB) gets a
// recommendation and a runner-up that fit, each with its reasons.
TEST(Search, Llama70bOn64H200) {
  absl::StatusOr<recipes::proto::Recipe> r = recipes::LoadRecipe("tools/plan/llama70b.pbtxt", {});
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<Cluster> c = LoadCluster("plan/clusters/h200.cluster");
  ASSERT_TRUE(c.ok()) << c.status();
  const CostModel cost(*c);
  absl::StatusOr<SearchResult> res = Search(*r, 64, c->hbm_bytes, cost, DefaultSpace(*r, *c, 64));
  ASSERT_TRUE(res.ok()) << res.status();
  ASSERT_GE(res->ranked.size(), 2u);
  const Candidate& best = res->ranked[0];
  EXPECT_TRUE(best.fits);
  EXPECT_TRUE(res->ranked[1].fits);
  EXPECT_EQ(best.pred.layout.world(), 64);
  EXPECT_LE(best.pred.memory.total, 141e9);
  EXPECT_GE(best.pred.tokens_per_s, res->ranked[1].pred.tokens_per_s);
  // A 70B model cannot train on one GPU's memory without sharding: plain
  // DP 64 (TP 1, GTP 1, PP 1) is refused for memory.
  bool saw_dp = false;
  for (const Candidate& k : res->ranked) {
    const Layout& l = k.pred.layout;
    if (l.tp == 1 && l.gtp == 1 && l.pp == 1 && l.cp == 1) {
      saw_dp = true;
      EXPECT_FALSE(k.fits);
      EXPECT_NE(k.why.find("memory"), std::string::npos);
    }
  }
  EXPECT_TRUE(saw_dp);
  const std::string text = FormatSearch(*res, 5, c->hbm_bytes);
  EXPECT_NE(text.find("UNCALIBRATED"), std::string::npos);
}

TEST(Search, FamiliesRestrictTheSpace) {
  absl::StatusOr<recipes::proto::Recipe> r = recipes::LoadRecipe("tools/plan/llama70b.pbtxt", {});
  absl::StatusOr<Cluster> c = LoadCluster("plan/clusters/h200.cluster");
  const SearchSpace fsdp = FamilySpace("fsdp", *r, *c, 256);
  EXPECT_EQ(fsdp.tp, std::vector<int>{1});
  EXPECT_EQ(fsdp.pp, std::vector<int>{1});
  EXPECT_EQ(fsdp.gtp, (std::vector<int>{256, 128}));  // world / cp for cp 1, 2
  EXPECT_EQ(FamilySpace("tpdp", *r, *c, 256).gtp, std::vector<int>{1});
  for (int g : FamilySpace("gtp", *r, *c, 256).gtp) EXPECT_GT(g, 1);
}

}  // namespace
}  // namespace gtp::plan
