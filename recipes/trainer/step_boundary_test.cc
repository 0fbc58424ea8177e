#include "recipes/trainer/step_boundary.h"

#include <signal.h>

#include <vector>

#include "comm/local/local_communicator.h"
#include "gtest/gtest.h"
#include "recipes/trainer/stop_signals.h"

namespace gtp::recipes {
namespace {

// Every rank's boundary at (step, steps, every), on 3 in-process ranks.
std::vector<StepBoundary> At(int64_t step, int64_t steps, int64_t every) {
  std::vector<StepBoundary> out(3);
  EXPECT_TRUE(comm::RunRanks(3, [&](comm::Communicator& c) -> absl::Status {
                absl::StatusOr<StepBoundary> b = AtStepBoundary(c, step, steps, every);
                if (!b.ok()) return b.status();
                out[c.rank()] = *b;
                return absl::OkStatus();
              }).ok());
  return out;
}

TEST(StepBoundary, CheckpointsEveryNStepsAndAtTheLast) {
  StopSignals signals;  // nothing requested
  struct Case {
    int64_t step, steps, every;
    bool save, wait;
  };
  for (const Case& c : {Case{3, 10, 5, false, false}, Case{5, 10, 5, true, false},
                        Case{10, 10, 5, true, true}, Case{7, 7, 5, true, true},
                        Case{5, 10, 0, false, false}, Case{10, 10, 0, true, true}}) {
    for (const StepBoundary& b : At(c.step, c.steps, c.every)) {
      EXPECT_FALSE(b.stop);
      EXPECT_EQ(b.save, c.save) << c.step << "/" << c.steps << " every " << c.every;
      EXPECT_EQ(b.wait, c.wait) << c.step << "/" << c.steps << " every " << c.every;
    }
  }
}

TEST(StepBoundary, ASignalStopsEveryRankWithACheckpointItWaitsFor) {
  StopSignals signals;
  StopSignals::Defer(true);
  ASSERT_EQ(raise(SIGTERM), 0);
  ASSERT_TRUE(StopSignals::Requested());
  for (const StepBoundary& b : At(3, 10, 0)) {
    EXPECT_TRUE(b.stop);
    EXPECT_TRUE(b.save);
    EXPECT_TRUE(b.wait);
  }
  StopSignals::Defer(false);
}

}  // namespace
}  // namespace gtp::recipes
