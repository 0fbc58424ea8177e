// Each formula against hand-computed numbers (exact arithmetic: tolerance 1e-12 relative).
#include "plan/collectives.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace gtp::plan {
namespace {

Cluster TwoLinks() {
  Cluster c;
  c.gpus_per_node = 8;
  c.intra = {100e9, 10e-6};  // 100 GB/s, 10 µs
  c.inter = {10e9, 20e-6};   // 10 GB/s, 20 µs
  return c;
}

TEST(Collectives, FlatRingFormulas) {
  const Link l{100e9, 10e-6};
  const double S = 1e9;  // 1 GB
  // all-gather, 4 ranks: 3·10 µs + 3/4 · 1e9 / 1e11 = 30e-6 + 7.5e-3.
  EXPECT_DOUBLE_EQ(FlatTime(Collective::kAllGather, S, 4, l), 30e-6 + 7.5e-3);
  EXPECT_DOUBLE_EQ(FlatTime(Collective::kReduceScatter, S, 4, l), 30e-6 + 7.5e-3);
  // all-reduce = RS + AG: 2·(30e-6 + 7.5e-3).
  EXPECT_DOUBLE_EQ(FlatTime(Collective::kAllReduce, S, 4, l), 2 * (30e-6 + 7.5e-3));
  // all-to-all, 8 ranks: 7·10 µs + 7/8 · 1e9 / 1e11.
  EXPECT_DOUBLE_EQ(FlatTime(Collective::kAllToAll, S, 8, l), 70e-6 + 8.75e-3);
  // send/recv: 10 µs + 1e9 / 1e11.
  EXPECT_DOUBLE_EQ(FlatTime(Collective::kSendRecv, S, 2, l), 10e-6 + 1e-2);
  EXPECT_EQ(FlatTime(Collective::kAllGather, S, 1, l), 0.0);
}

TEST(Collectives, Placement) {
  // TP 8 on 8-GPU nodes: one node.
  EXPECT_EQ(Place(8, 1, 8).per_node, 8);
  // GTP 4 with TP 2 (stride 2): 4 per node.
  EXPECT_EQ(Place(4, 2, 8).per_node, 4);
  // 16 ranks at stride 2: 4 per node, 4 nodes.
  EXPECT_EQ(Place(16, 2, 8).per_node, 4);
  // DP at stride 8 (TP 8 fills the node): one per node.
  EXPECT_EQ(Place(4, 8, 8).per_node, 1);
}

TEST(Collectives, HierarchicalWhenSpanningNodes) {
  const Cluster c = TwoLinks();
  const double S = 1e9;
  // Inside a node: the flat NVLink ring.
  EXPECT_DOUBLE_EQ(CollectiveTime(Collective::kAllGather, S, {8, 8}, c), 7 * 10e-6 + 7.0 / 8 * S / 100e9);
  // One per node, 4 nodes: the flat network ring.
  EXPECT_DOUBLE_EQ(CollectiveTime(Collective::kAllGather, S, {4, 1}, c), 3 * 20e-6 + 0.75 * S / 10e9);
  // 16 ranks, 8 per node on 2 nodes: between nodes 8 rails each move S/8
  // (1·20 µs + 1/2 · 0.125e9 / 1e10 = 20e-6 + 6.25e-3), then inside the
  // node the whole S (7·10 µs + 7/8 · 1e9 / 1e11 = 70e-6 + 8.75e-3).
  const double ag = 20e-6 + 6.25e-3 + 70e-6 + 8.75e-3;
  EXPECT_NEAR(CollectiveTime(Collective::kAllGather, S, {16, 8}, c), ag, 1e-15);
  EXPECT_NEAR(CollectiveTime(Collective::kReduceScatter, S, {16, 8}, c), ag, 1e-15);
  EXPECT_NEAR(CollectiveTime(Collective::kAllReduce, S, {16, 8}, c), 2 * ag, 1e-15);
  // all-to-all, 16 ranks, 8 per node: 8/16 of S leaves the node (1·20 µs +
  // 0.5e9 / 1e10 = 50.02 ms), 7/16 stays (7·10 µs + 0.4375e9 / 1e11 = 4.445 ms): the max.
  EXPECT_NEAR(CollectiveTime(Collective::kAllToAll, S, {16, 8}, c), 20e-6 + 0.05, 1e-15);
  // send/recv between nodes uses the network.
  EXPECT_DOUBLE_EQ(CollectiveTime(Collective::kSendRecv, S, {2, 1}, c), 20e-6 + 0.1);
  EXPECT_DOUBLE_EQ(CollectiveTime(Collective::kSendRecv, S, {2, 2}, c), 10e-6 + 0.01);
}

TEST(FitAlphaBeta, RecoversAKnownLinkExactly) {
  // Synthetic times of a 4-rank ring, α = 5 µs, β = 100 GB/s: 3·α + 3/4 · S/β.
  const Link truth{100e9, 5e-6};
  std::vector<double> sizes, times;
  for (double s : {1e6, 4e6, 16e6, 64e6, 256e6, 1e9}) {
    sizes.push_back(s);
    times.push_back(FlatTime(Collective::kAllGather, s, 4, truth));
  }
  absl::StatusOr<AlphaBetaFit> f = FitAlphaBeta(sizes, times, 4);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_NEAR(f->link.bandwidth, 100e9, 100e9 * 1e-9);
  EXPECT_NEAR(f->link.latency, 5e-6, 5e-6 * 1e-6);
  EXPECT_LT(f->max_rel_error, 1e-9);
}

TEST(FitAlphaBeta, LeastSquaresInTimeByHand) {
  // n = 2: x = S/2 = 1e9, 2e9, 3e9 bytes; t = 11, 21, 32 ms. Means x̄ = 2e9,
  // t̄ = 21.333 ms; Σdx·dt = 1e9·(10.333 + 10.667) ms = 2.1e7; Σdx² = 2e18;
  // slope 1.05e-11 s/B → β = 95.238 GB/s; intercept 21.333 − 21 = 0.3333 ms
  // = α (one ring step). Fitted: 10.833, 21.333, 31.833 ms → relative errors
  // −1.515 %, +1.587 %, −0.521 %.
  absl::StatusOr<AlphaBetaFit> f = FitAlphaBeta({2e9, 4e9, 6e9}, {0.011, 0.021, 0.032}, 2);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_NEAR(f->link.bandwidth, 1 / 1.05e-11, 1e-3);
  EXPECT_NEAR(f->link.latency, 0.001 / 3, 1e-12);
  EXPECT_NEAR(f->max_rel_error, 0.021333333333333 / 0.021 - 1, 1e-9);
  const double e1 = 0.0108333333333333 / 0.011 - 1, e2 = 0.0213333333333333 / 0.021 - 1,
               e3 = 0.0318333333333333 / 0.032 - 1;
  EXPECT_NEAR(f->rms_rel_error, std::sqrt((e1 * e1 + e2 * e2 + e3 * e3) / 3), 1e-9);
}

TEST(FitAlphaBeta, NegativeInterceptRefitsThroughTheOrigin) {
  // x = 1e9, 2e9; t = 9, 20 ms: the free line has intercept −2 ms, so α = 0
  // and slope = Σx·t / Σx² = (9e6 + 40e6) / 5e18 = 9.8e-12 → β = 102.04 GB/s.
  absl::StatusOr<AlphaBetaFit> f = FitAlphaBeta({2e9, 4e9}, {0.009, 0.020}, 2);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->link.latency, 0.0);
  EXPECT_NEAR(f->link.bandwidth, 1 / 9.8e-12, 1e-3);
}

TEST(FitAlphaBeta, AllReduceLinkRecoveredAndCostedInsideANode) {
  // NCCL's own all-reduce ring on 4 ranks, α' = 8 µs, β' = 300 GB/s:
  // t = 3·α' + 2·3/4 · S/β'. The fit with k = 2 gives the link back, and
  // CollectiveTime uses it for an all-reduce inside a node (not RS + AG).
  const Link truth{300e9, 8e-6};
  std::vector<double> sizes, times;
  for (double s : {1e6, 8e6, 64e6, 512e6}) {
    sizes.push_back(s);
    times.push_back(3 * truth.latency + 1.5 * s / truth.bandwidth);
  }
  for (FitError e : {FitError::kTime, FitError::kRelative}) {
    absl::StatusOr<AlphaBetaFit> f = FitAlphaBeta(sizes, times, 4, Collective::kAllReduce, e);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_NEAR(f->link.bandwidth, 300e9, 300e9 * 1e-9);
    EXPECT_NEAR(f->link.latency, 8e-6, 8e-6 * 1e-6);
  }
  Cluster c;
  c.gpus_per_node = 8;
  c.intra = {100e9, 10e-6};
  c.inter = {10e9, 20e-6};
  const double S = 64e6;
  // Without an all-reduce link: RS + AG over intra = 2·(3·10 µs + 3/4·S/100 GB/s).
  EXPECT_NEAR(CollectiveTime(Collective::kAllReduce, S, {4, 4}, c), 2 * (30e-6 + 0.75 * S / 100e9), 1e-15);
  c.intra_allreduce = truth;
  EXPECT_NEAR(CollectiveTime(Collective::kAllReduce, S, {4, 4}, c), 24e-6 + 1.5 * S / 300e9, 1e-15);
  // Across nodes it stays reduce-scatter + all-gather.
  EXPECT_NEAR(CollectiveTime(Collective::kAllReduce, S, {16, 8}, c),
              CollectiveTime(Collective::kReduceScatter, S, {16, 8}, c) +
                  CollectiveTime(Collective::kAllGather, S, {16, 8}, c),
              1e-15);
}

TEST(FitAlphaBeta, LeastSquaresInRelativeErrorByHand) {
  // n = 2 all-reduce (x = S): x = 1e9, 2e9, 4e9 bytes; t = 10, 12, 30 ms.
  // Weights 1/t² = 10000, 6944.4, 1111.1 (Σ 18055.6); weighted means
  // x̄ = 20.4e9/13 = 1.5692e9, t̄ = 12 ms; slope Σw·dx·dt / Σw·dx² =
  // 5.40832e-12 s/B (β = 184.90 GB/s), intercept t̄ − slope·x̄ = 3.5131 ms;
  // relative errors −10.79 %, +19.41 %, −16.18 %.
  absl::StatusOr<AlphaBetaFit> f =
      FitAlphaBeta({1e9, 2e9, 4e9}, {0.010, 0.012, 0.030}, 2, Collective::kAllReduce, FitError::kRelative);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_NEAR(f->link.bandwidth, 184.9002849e9, 1e3);
  EXPECT_NEAR(f->link.latency, 3.5130971e-3, 1e-10);
  EXPECT_NEAR(f->max_rel_error, 0.1941448382, 1e-9);
  // It minimises Σ(relative error)², so its rms is below the time fit's.
  absl::StatusOr<AlphaBetaFit> g = FitAlphaBeta({1e9, 2e9, 4e9}, {0.010, 0.012, 0.030}, 2, Collective::kAllReduce);
  ASSERT_TRUE(g.ok());
  EXPECT_LT(f->rms_rel_error, g->rms_rel_error);
}

TEST(FitAlphaBeta, Refusals) {
  EXPECT_FALSE(FitAlphaBeta({1e6, 2e6}, {1e-5}, 2).ok());          // lengths differ
  EXPECT_FALSE(FitAlphaBeta({1e6, 1e6}, {1e-5, 2e-5}, 2).ok());    // one distinct size
  EXPECT_FALSE(FitAlphaBeta({1e6, 2e6}, {1e-5, 2e-5}, 1).ok());    // no ring
  EXPECT_FALSE(FitAlphaBeta({1e6, 2e6}, {0.0, 2e-5}, 2).ok());     // zero time
  EXPECT_FALSE(FitAlphaBeta({1e6, 2e6}, {3e-5, 2e-5}, 2).ok());    // shrinking times
  EXPECT_FALSE(FitAlphaBeta({1e6, 2e6}, {1e-5, 2e-5}, 2, Collective::kSendRecv).ok());  // not a ring
}

}  // namespace
}  // namespace gtp::plan
