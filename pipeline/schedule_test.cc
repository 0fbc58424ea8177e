// The pipeline schedules: every pass exactly once, forwards before their
// backwards, at most P − s micro-batches in flight on stage s (1F1B), a
// deadlock-free order, and the bubble of the closed form.
#include "pipeline/schedule.h"

#include <set>
#include <tuple>

#include "gtest/gtest.h"

namespace gtp::pipeline {
namespace {

TEST(Schedule, OneF1BOnFourStages) {
  // Stage 0 of 4 with 6 micro-batches: 3 warm-up forwards, then 1F1B.
  auto ops = Schedule(4, 0, 1, 6);
  ASSERT_TRUE(ops.ok());
  std::string order;
  for (const PipelineOp& op : *ops) order += OpName(op) + " ";
  EXPECT_EQ(order, "F0.0 F0.1 F0.2 F0.3 B0.0 F0.4 B0.1 F0.5 B0.2 B0.3 B0.4 B0.5 ");
  auto last = Schedule(4, 3, 1, 6);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(OpName((*last)[0]), "F0.0");
  EXPECT_EQ(OpName((*last)[1]), "B0.0");
}

TEST(Schedule, EveryPassOnceAndForwardBeforeBackward) {
  for (int P : {1, 2, 3, 4}) {
    for (int vpp : {1, 2, 3}) {
      for (int M : {1, 2, 4, 8, 12}) {
        if (vpp > 1 && M % P != 0) {
          EXPECT_FALSE(Schedule(P, 0, vpp, M).ok());
          continue;
        }
        for (int s = 0; s < P; ++s) {
          auto ops = Schedule(P, s, vpp, M);
          ASSERT_TRUE(ops.ok()) << ops.status();
          std::set<std::tuple<int, int, int>> seen;
          int in_flight = 0, max_in_flight = 0;
          for (const PipelineOp& op : *ops) {
            ASSERT_TRUE(seen.insert({op.kind, op.chunk, op.micro_batch}).second)
                << "repeated " << OpName(op);
            if (op.kind == PipelineOp::kBackward) {
              EXPECT_TRUE(seen.count({PipelineOp::kForward, op.chunk, op.micro_batch}))
                  << OpName(op) << " before its forward";
              --in_flight;
            } else {
              max_in_flight = std::max(max_in_flight, ++in_flight);
            }
          }
          EXPECT_EQ(seen.size(), static_cast<size_t>(2 * M * vpp));
          if (vpp == 1) {
            EXPECT_LE(max_in_flight, std::min(M, P - s));
          }
        }
        // The simulation finishes (no stage waits forever) with a bubble in [0, 1).
        const double bubble = SimulatedBubble(P, vpp, M, 1.0, 2.0);
        EXPECT_GE(bubble, -1e-12);
        EXPECT_LT(bubble, 1.0);
      }
    }
  }
}

TEST(Schedule, BubbleIsTheClosedFormAndInterleavingLowersIt) {
  for (int P : {2, 4}) {
    for (int M : {4, 8, 16}) {
      EXPECT_NEAR(SimulatedBubble(P, 1, M, 1.0, 2.0), (P - 1.0) / (M + P - 1.0), 1e-12)
          << "P " << P << " M " << M;
      EXPECT_LT(SimulatedBubble(P, 2, M, 0.5, 1.0), SimulatedBubble(P, 1, M, 1.0, 2.0))
          << "P " << P << " M " << M;
    }
  }
}

TEST(Schedule, BadArgumentsAreErrors) {
  EXPECT_FALSE(Schedule(0, 0, 1, 4).ok());
  EXPECT_FALSE(Schedule(2, 2, 1, 4).ok());
  EXPECT_FALSE(Schedule(2, 0, 1, 0).ok());
  auto st = Schedule(4, 0, 2, 6).status();
  EXPECT_NE(st.message().find("multiple of the pipeline stages"), std::string::npos);
}

}  // namespace
}  // namespace gtp::pipeline
