// The planner's schedule simulation against pipeline/schedule.h's own
// SimulatedBubble (equal pass times, free messages), then by hand.
#include "plan/pipeline_sim.h"

#include "gtest/gtest.h"
#include "pipeline/schedule.h"

namespace gtp::plan {
namespace {

PipelineTimes Uniform(int P, int vpp, double f, double b, double p2p = 0) {
  PipelineTimes t;
  t.fwd.assign(P, std::vector<double>(vpp, f));
  t.bwd.assign(P, std::vector<double>(vpp, b));
  t.p2p = p2p;
  return t;
}

TEST(PipelineSim, AgreesWithSimulatedBubble) {
  for (int P : {1, 2, 4, 8}) {
    for (int vpp : {1, 2, 3}) {
      if (vpp > 1 && P == 1) continue;
      for (int M : {P, 2 * P, 4 * P, 8 * P}) {
        for (auto [f, b] : {std::pair<double, double>{1, 2}, {1, 1}, {0.7, 2.3}}) {
          absl::StatusOr<PipelineResult> r = SimulatePipeline(P, vpp, M, Uniform(P, vpp, f, b));
          ASSERT_TRUE(r.ok()) << r.status();
          // Same event order and arithmetic: equal to rounding.
          EXPECT_NEAR(r->bubble, pipeline::SimulatedBubble(P, vpp, M, f, b), 1e-12)
              << "P=" << P << " vpp=" << vpp << " M=" << M;
        }
      }
    }
  }
}

TEST(PipelineSim, OneF1BByHand) {
  // P = 4, M = 8, f = 1, b = 2: makespan (M + P − 1)(f + b) = 33, bubble 9/33.
  absl::StatusOr<PipelineResult> r = SimulatePipeline(4, 1, 8, Uniform(4, 1, 1, 2));
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->makespan, 33);
  EXPECT_DOUBLE_EQ(r->bubble, 9.0 / 33);
  // Stage 0 holds P forwards before its first backward; the last stage one.
  EXPECT_EQ(r->max_in_flight[0], 4);
  EXPECT_EQ(r->max_in_flight[3], 1);
  // A message time d = 0.5: the first micro-batch's round trip crosses
  // 2(P − 1) = 6 hops (+3: at least 36), and in the steady state stage 0's
  // P micro-batches in flight share one loop of P(f + b) + 2(P − 1)d = 15,
  // 3.75 per micro-batch instead of 3 (at most 33 + 3 + 8 · 0.75 = 42).
  absl::StatusOr<PipelineResult> m = SimulatePipeline(4, 1, 8, Uniform(4, 1, 1, 2, 0.5));
  ASSERT_TRUE(m.ok());
  EXPECT_GE(m->makespan, 36);
  EXPECT_LE(m->makespan, 42);
}

TEST(PipelineSim, OneStageIsSequential) {
  absl::StatusOr<PipelineResult> r = SimulatePipeline(1, 1, 5, Uniform(1, 1, 1, 2));
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->makespan, 15);
  EXPECT_DOUBLE_EQ(r->bubble, 0);
  EXPECT_EQ(r->max_in_flight[0], 1);
}

TEST(PipelineSim, RefusesWhatScheduleRefuses) {
  EXPECT_FALSE(SimulatePipeline(4, 2, 6, Uniform(4, 2, 1, 2)).ok());  // interleaving needs M % P == 0
  EXPECT_FALSE(SimulatePipeline(4, 1, 8, Uniform(3, 1, 1, 2)).ok());  // times for 3 stages
}

}  // namespace
}  // namespace gtp::plan
