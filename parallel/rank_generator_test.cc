#include "parallel/rank_generator.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "parallel/parallel_config.h"

namespace gtp::parallel {
namespace {

using Groups = std::vector<std::vector<int>>;

AxisValues Sizes(int tp, int gtp, int cp, int ep, int dp, int pp) {
  AxisValues s;
  s.tp = tp;
  s.gtp = gtp;
  s.cp = cp;
  s.ep = ep;
  s.dp = dp;
  s.pp = pp;
  return s;
}

Groups Ranks(const RankGenerator& g, const std::string& axes) {
  absl::StatusOr<Groups> r = g.GetRanks(axes);
  EXPECT_TRUE(r.ok()) << axes << ": " << r.status();
  return r.ok() ? *r : Groups{};
}

std::vector<int> Iota(int from, int to) {
  std::vector<int> v;
  for (int i = from; i < to; ++i) v.push_back(i);
  return v;
}

Groups Singletons(int n) {
  Groups g;
  for (int i = 0; i < n; ++i) g.push_back({i});
  return g;
}

// ---------------------------------------------------------------------------
// Worked examples, expected lists written out by hand from the convention.

// world 8 = TP2 · GTP2 · DP2, order tp-gtp-cp-ep-dp-pp: strides tp 1, gtp 2, dp 4.
TEST(RankGenerator, WorkedExampleWorld8Tp2Gtp2Dp2) {
  auto g = RankGenerator::Create(Sizes(2, 2, 1, 1, 2, 1), "tp-gtp-cp-ep-dp-pp");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->world_size(), 8);
  EXPECT_EQ(Ranks(*g, "tp"), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(Ranks(*g, "gtp"), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(Ranks(*g, "tp-gtp"), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(Ranks(*g, "gtp-tp"), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));  // token order is free
  EXPECT_EQ(Ranks(*g, "dp"), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(Ranks(*g, "gtp-dp"), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(Ranks(*g, "dp-cp"), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(Ranks(*g, "tp-dp"), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(Ranks(*g, "cp"), Singletons(8));
  EXPECT_EQ(Ranks(*g, "pp"), Singletons(8));
  EXPECT_EQ(Ranks(*g, "tp-gtp-cp-ep-dp-pp"), (Groups{Iota(0, 8)}));

  auto c = g->Coordinates(5);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->tp, 1);
  EXPECT_EQ(c->gtp, 0);
  EXPECT_EQ(c->dp, 1);
  EXPECT_EQ(c->cp, 0);
  EXPECT_EQ(c->pp, 0);
  EXPECT_EQ(*g->Rank(*c), 5);
  EXPECT_EQ(*g->GroupOf(6, "gtp-dp"), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(*g->GroupOf(6, "gtp"), (std::vector<int>{4, 6}));
}

// world 24 = TP2 · GTP4 · DP3; experts EP4 · EGTP2 with ETP1, so EDP = 3.
TEST(RankGenerator, WorkedExampleWorld24Tp2Gtp4Dp3Ep4Egtp2) {
  ParallelConfig cfg;
  cfg.tp = 2;
  cfg.tp_num_weight_shards = 8;
  cfg.ep = 4;
  cfg.etp = 1;
  cfg.expert_tp_num_weight_shards = 2;
  auto r = cfg.Resolve(24);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->gtp(), 4);
  EXPECT_EQ(r->dp, 3);
  EXPECT_EQ(r->egtp(), 2);
  EXPECT_EQ(r->edp(), 3);

  // Dense: strides tp 1, gtp 2, dp 8.
  auto d = r->DenseGrid();
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(Ranks(*d, "tp"), (Groups{{0, 1},
                                     {2, 3},
                                     {4, 5},
                                     {6, 7},
                                     {8, 9},
                                     {10, 11},
                                     {12, 13},
                                     {14, 15},
                                     {16, 17},
                                     {18, 19},
                                     {20, 21},
                                     {22, 23}}));
  EXPECT_EQ(Ranks(*d, "gtp"), (Groups{{0, 2, 4, 6},
                                      {1, 3, 5, 7},
                                      {8, 10, 12, 14},
                                      {9, 11, 13, 15},
                                      {16, 18, 20, 22},
                                      {17, 19, 21, 23}}));
  EXPECT_EQ(Ranks(*d, "tp-gtp"), (Groups{{0, 1, 2, 3, 4, 5, 6, 7},
                                         {8, 9, 10, 11, 12, 13, 14, 15},
                                         {16, 17, 18, 19, 20, 21, 22, 23}}));
  EXPECT_EQ(Ranks(*d, "dp"), (Groups{{0, 8, 16},
                                     {1, 9, 17},
                                     {2, 10, 18},
                                     {3, 11, 19},
                                     {4, 12, 20},
                                     {5, 13, 21},
                                     {6, 14, 22},
                                     {7, 15, 23}}));
  EXPECT_EQ(Ranks(*d, "gtp-dp"), (Groups{{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22},
                                         {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23}}));
  EXPECT_EQ(Ranks(*d, "pp"), Singletons(24));
  auto dc = d->Coordinates(13);
  ASSERT_TRUE(dc.ok());
  EXPECT_EQ(dc->tp, 1);
  EXPECT_EQ(dc->gtp, 2);
  EXPECT_EQ(dc->dp, 1);

  // Expert (order tp-cp-ep-gtp-dp-pp): strides etp 1, ep 1, egtp 4, edp 8.
  auto e = r->ExpertGrid();
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(Ranks(*e, "tp"), Singletons(24));
  EXPECT_EQ(Ranks(*e, "ep"), (Groups{{0, 1, 2, 3},
                                     {4, 5, 6, 7},
                                     {8, 9, 10, 11},
                                     {12, 13, 14, 15},
                                     {16, 17, 18, 19},
                                     {20, 21, 22, 23}}));
  EXPECT_EQ(Ranks(*e, "gtp"), (Groups{{0, 4},
                                      {1, 5},
                                      {2, 6},
                                      {3, 7},
                                      {8, 12},
                                      {9, 13},
                                      {10, 14},
                                      {11, 15},
                                      {16, 20},
                                      {17, 21},
                                      {18, 22},
                                      {19, 23}}));
  EXPECT_EQ(Ranks(*e, "dp"), (Groups{{0, 8, 16},
                                     {1, 9, 17},
                                     {2, 10, 18},
                                     {3, 11, 19},
                                     {4, 12, 20},
                                     {5, 13, 21},
                                     {6, 14, 22},
                                     {7, 15, 23}}));
  EXPECT_EQ(Ranks(*e, "tp-ep-gtp-pp"), (Groups{{0, 1, 2, 3, 4, 5, 6, 7},
                                               {8, 9, 10, 11, 12, 13, 14, 15},
                                               {16, 17, 18, 19, 20, 21, 22, 23}}));
  EXPECT_EQ(Ranks(*e, "pp"), Ranks(*d, "pp"));
  auto ec = e->Coordinates(13);
  ASSERT_TRUE(ec.ok());
  EXPECT_EQ(ec->ep, 1);
  EXPECT_EQ(ec->gtp, 1);
  EXPECT_EQ(ec->dp, 1);
  EXPECT_EQ(ec->tp, 0);
}

// world 8 = TP2 · PP4: strides tp 1, pp 2.
TEST(RankGenerator, WorkedExamplePipeline) {
  auto g = RankGenerator::Create(Sizes(2, 1, 1, 1, 1, 4), "tp-gtp-cp-ep-dp-pp");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(Ranks(*g, "pp"), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(Ranks(*g, "tp-pp"), (Groups{Iota(0, 8)}));
  EXPECT_EQ(Ranks(*g, "tp"), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
}

TEST(RankGenerator, Offset) {
  auto g = RankGenerator::Create(Sizes(2, 1, 1, 1, 2, 1), "tp-dp", 4);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(Ranks(*g, "tp"), (Groups{{4, 5}, {6, 7}}));
  EXPECT_EQ(Ranks(*g, "dp"), (Groups{{4, 6}, {5, 7}}));
  EXPECT_TRUE(g->Contains(7));
  EXPECT_FALSE(g->Contains(3));
  EXPECT_FALSE(g->Contains(8));
  EXPECT_EQ(g->Coordinates(3).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(g->OrderString(), "tp-dp-gtp-cp-ep-pp");
}

TEST(RankGenerator, OrderErrors) {
  auto expect_error = [](const AxisValues& s, const std::string& order, const std::string& sub) {
    auto g = RankGenerator::Create(s, order);
    ASSERT_FALSE(g.ok()) << order;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(sub), absl::string_view::npos) << g.status();
  };
  expect_error(Sizes(2, 1, 1, 1, 1, 1), "tp-xp-dp", "unknown axis 'xp'");
  expect_error(Sizes(2, 1, 1, 1, 1, 1), "tp-dp-tp", "axis 'tp' appears more than once");
  expect_error(Sizes(2, 2, 1, 1, 1, 1), "tp-cp-dp-pp", "axis 'gtp' has size 2 but is missing");
  expect_error(Sizes(2, 1, 1, 1, 1, 1), "tp--dp", "empty axis name");
  expect_error(Sizes(2, 1, 1, 1, 1, 1), "", "empty order");
  expect_error(Sizes(0, 1, 1, 1, 1, 1), "tp", "axis 'tp' has size 0");
  auto g = RankGenerator::Create(Sizes(2, 1, 1, 1, 1, 1), "tp");
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->GetRanks("tp-mp").ok());
  EXPECT_FALSE(g->GetRanks("").ok());
}

// ---------------------------------------------------------------------------
// Property tests over many (sizes, order) combinations.

std::vector<int> Divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i) {
    if (n % i == 0) d.push_back(i);
  }
  return d;
}

// The k-th permutation (k < 720) of the six axes, deterministic.
std::string NthOrder(int k) {
  std::vector<std::string> names = {"tp", "gtp", "cp", "ep", "dp", "pp"};
  std::vector<std::string> out;
  for (int n = 6; n >= 1; --n) {
    int f = 1;
    for (int i = 2; i < n; ++i) f *= i;
    int idx = (k / f) % n;
    out.push_back(names[idx]);
    names.erase(names.begin() + idx);
    k %= f;
  }
  return absl::StrJoin(out, "-");
}

struct Case {
  AxisValues sizes;
  std::string order;
};

// Deterministic cases: for each world, ordered factorisations into
// tp·gtp·cp·ep·dp·pp (sampled with a fixed stride when there are many), each
// with the dense default order, the expert default order and one more
// permutation chosen by index.
std::vector<Case> Cases() {
  const int worlds[] = {1, 2, 3, 4, 6, 8, 12, 16, 18, 24, 30, 32, 48, 64, 96, 128, 256};
  std::vector<Case> cases;
  int serial = 0;
  for (int world : worlds) {
    std::vector<AxisValues> all;
    for (int tp : Divisors(world))
      for (int gtp : Divisors(world / tp))
        for (int cp : Divisors(world / tp / gtp))
          for (int ep : Divisors(world / tp / gtp / cp))
            for (int pp : Divisors(world / tp / gtp / cp / ep))
              all.push_back(Sizes(tp, gtp, cp, ep, world / tp / gtp / cp / ep / pp, pp));
    const size_t want = 14;
    const size_t stride = std::max<size_t>(1, all.size() / want);
    for (size_t i = 0; i < all.size(); i += stride) {
      cases.push_back({all[i], kDefaultOrder});
      cases.push_back({all[i], kDefaultExpertOrder});
      cases.push_back({all[i], NthOrder((serial++ * 97 + 13) % 720)});
    }
  }
  return cases;
}

// Every non-empty subset of axes, as a bit mask over kAllAxes.
std::vector<Axis> AxesOf(int mask) {
  std::vector<Axis> v;
  for (int i = 0; i < kNumAxes; ++i) {
    if (mask & (1 << i)) v.push_back(kAllAxes[i]);
  }
  return v;
}

std::string MaskString(int mask) {
  std::vector<std::string> names;
  for (Axis a : AxesOf(mask)) names.push_back(AxisName(a));
  return absl::StrJoin(names, "-");
}

TEST(RankGeneratorProperty, ManyGrids) {
  const std::vector<Case> cases = Cases();
  ASSERT_GT(cases.size(), 300u);
  std::printf("%zu (sizes, order) cases\n", cases.size());
  std::set<int> worlds_seen;
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.sizes.ToString(), " order ", c.order));
    const int offset = static_cast<int>(c.order.size()) % 3;  // also exercise offsets
    auto g = RankGenerator::Create(c.sizes, c.order, offset);
    ASSERT_TRUE(g.ok()) << g.status();
    const int world = c.sizes.Product();
    ASSERT_EQ(g->world_size(), world);
    worlds_seen.insert(world);

    // The rank formula, computed independently from the order string.
    std::vector<std::vector<int>> coords(world);  // [local rank][axis]
    for (int r = offset; r < offset + world; ++r) {
      auto xc = g->Coordinates(r);
      ASSERT_TRUE(xc.ok());
      int expect = offset, stride = 1;
      for (Axis a : g->order()) {
        ASSERT_GE(xc->Get(a), 0);
        ASSERT_LT(xc->Get(a), c.sizes.Get(a));
        expect += xc->Get(a) * stride;
        stride *= c.sizes.Get(a);
      }
      ASSERT_EQ(expect, r);
      ASSERT_EQ(*g->Rank(*xc), r);
      for (Axis a : kAllAxes) coords[r - offset].push_back(xc->Get(a));
    }

    // Every subset: partition, sizes, agreement outside, member order.
    std::vector<std::vector<int>> group_of(1 << kNumAxes, std::vector<int>(world, -1));
    for (int mask = 1; mask < (1 << kNumAxes); ++mask) {
      const std::vector<Axis> axes = AxesOf(mask);
      const Groups groups = g->GetRanks(axes);
      int want_size = 1;
      for (Axis a : axes) want_size *= c.sizes.Get(a);
      ASSERT_EQ(static_cast<int>(groups.size()) * want_size, world) << MaskString(mask);
      for (size_t gi = 0; gi < groups.size(); ++gi) {
        const std::vector<int>& grp = groups[gi];
        ASSERT_EQ(static_cast<int>(grp.size()), want_size);
        for (size_t m = 0; m < grp.size(); ++m) {
          const int r = grp[m] - offset;
          ASSERT_GE(r, 0);
          ASSERT_LT(r, world);
          ASSERT_EQ(group_of[mask][r], -1) << "rank in two groups of " << MaskString(mask);
          group_of[mask][r] = static_cast<int>(gi);
          // Agrees with the first member outside the subset.
          const int r0 = grp[0] - offset;
          for (int i = 0; i < kNumAxes; ++i) {
            if (!(mask & (1 << i))) {
              ASSERT_EQ(coords[r][i], coords[r0][i]);
            }
          }
          // Member index from the subset's coordinates, first listed fastest.
          int index = 0, stride = 1;
          for (Axis a : g->order()) {
            if (!(mask & (1 << static_cast<int>(a)))) continue;
            index += coords[r][static_cast<int>(a)] * stride;
            stride *= c.sizes.Get(a);
          }
          ASSERT_EQ(index, static_cast<int>(m));
        }
      }
      // GroupOf agrees with GetRanks (checked on a few ranks).
      for (int r = 0; r < world; r += std::max(1, world / 5)) {
        auto mine = g->GroupOf(offset + r, MaskString(mask));
        ASSERT_TRUE(mine.ok());
        ASSERT_EQ(*mine, groups[group_of[mask][r]]);
      }
    }

    // Orthogonality: groups of disjoint axis sets S and T meet in at most
    // one rank (the map rank -> (S group, T group) is injective), and the
    // pairs that meet are exactly those agreeing outside S ∪ T (there are
    // `world` of each, and meeting pairs agree, so meeting == agreeing).
    for (int s = 1; s < (1 << kNumAxes); ++s) {
      for (int t = s + 1; t < (1 << kNumAxes); ++t) {
        if (s & t) continue;
        std::vector<char> hit(static_cast<size_t>(world) * world, 0);
        const size_t num_t = world / [&] {
          int n = 1;
          for (Axis a : AxesOf(t)) n *= c.sizes.Get(a);
          return n;
        }();
        for (int r = 0; r < world; ++r) {
          const size_t key = group_of[s][r] * num_t + group_of[t][r];
          ASSERT_FALSE(hit[key]) << MaskString(s) << " and " << MaskString(t)
                                 << " groups share two ranks";
          hit[key] = 1;
        }
      }
    }
  }
  EXPECT_GE(worlds_seen.count(256), 1u);
}

// A tp group and a dp group within one pp stage share exactly one rank.
TEST(RankGeneratorProperty, TpAndDpMeetOncePerStage) {
  auto g = RankGenerator::Create(Sizes(2, 2, 2, 1, 3, 2), kDefaultOrder);
  ASSERT_TRUE(g.ok());
  for (const auto& tpg : Ranks(*g, "tp")) {
    for (const auto& dpg : Ranks(*g, "dp")) {
      std::vector<int> common;
      std::set_intersection(tpg.begin(), tpg.end(), dpg.begin(), dpg.end(),
                            std::back_inserter(common));
      const AxisValues a = *g->Coordinates(tpg[0]), b = *g->Coordinates(dpg[0]);
      const bool agree = a.pp == b.pp && a.gtp == b.gtp && a.cp == b.cp;
      EXPECT_EQ(common.size(), agree ? 1u : 0u);
    }
  }
}

// GTP = 1 gives exactly the groups of the plain grid without a gtp axis.
TEST(RankGeneratorProperty, GtpOneEqualsPlainGrid) {
  int checked = 0;
  for (const Case& c : Cases()) {
    if (c.sizes.gtp != 1) continue;
    auto with = RankGenerator::Create(c.sizes, c.order);
    ASSERT_TRUE(with.ok());
    std::vector<std::string> toks;
    for (Axis a : with->order()) {
      if (a != Axis::kGtp) toks.push_back(AxisName(a));
    }
    auto plain = RankGenerator::Create(c.sizes, absl::StrJoin(toks, "-"));
    ASSERT_TRUE(plain.ok());
    for (int mask = 1; mask < (1 << kNumAxes); ++mask) {
      const std::vector<Axis> axes = AxesOf(mask);
      std::vector<Axis> no_gtp;
      for (Axis a : axes) {
        if (a != Axis::kGtp) no_gtp.push_back(a);
      }
      if (no_gtp.empty()) continue;
      ASSERT_EQ(with->GetRanks(axes), plain->GetRanks(no_gtp)) << MaskString(mask);
    }
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

}  // namespace
}  // namespace gtp::parallel
