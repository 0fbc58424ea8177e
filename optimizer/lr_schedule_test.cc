#include "optimizer/lr_schedule.h"

#include <cmath>

#include "gtest/gtest.h"

namespace gtp::optimizer {
namespace {

TEST(LrSchedule, WarmupThenCosine) {
  const LrSchedule s{LrDecay::kCosine, 1.0f, 0.1f, /*warmup=*/4, /*decay=*/14};
  EXPECT_FLOAT_EQ(LrAt(s, 0), 0.25f);
  EXPECT_FLOAT_EQ(LrAt(s, 3), 1.0f);
  EXPECT_FLOAT_EQ(LrAt(s, 4), 1.0f);
  EXPECT_NEAR(LrAt(s, 9), 0.55f, 1e-6);  // halfway down
  EXPECT_FLOAT_EQ(LrAt(s, 14), 0.1f);
  EXPECT_FLOAT_EQ(LrAt(s, 1000), 0.1f);
  for (int64_t t = 4; t < 14; ++t) EXPECT_GT(LrAt(s, t), LrAt(s, t + 1));
}

TEST(LrSchedule, WarmupThenLinear) {
  const LrSchedule s{LrDecay::kLinear, 2.0f, 0.0f, 2, 6};
  EXPECT_FLOAT_EQ(LrAt(s, 0), 1.0f);
  EXPECT_FLOAT_EQ(LrAt(s, 2), 2.0f);
  EXPECT_FLOAT_EQ(LrAt(s, 3), 1.5f);
  EXPECT_FLOAT_EQ(LrAt(s, 5), 0.5f);
  EXPECT_FLOAT_EQ(LrAt(s, 6), 0.0f);
}

TEST(LrSchedule, Constant) {
  const LrSchedule s{LrDecay::kConstant, 3e-4f};
  EXPECT_FLOAT_EQ(LrAt(s, 0), 3e-4f);
  EXPECT_FLOAT_EQ(LrAt(s, 123456), 3e-4f);
  EXPECT_TRUE(Validate(s).ok());
}

TEST(LrSchedule, ValidateNamesTheField) {
  LrSchedule s{LrDecay::kCosine, 1.0f, 0.0f, 10, 5};
  EXPECT_NE(Validate(s).message().find("decay_steps"), std::string::npos);
  s = LrSchedule{LrDecay::kConstant, 1.0f, 0.0f, -1};
  EXPECT_NE(Validate(s).message().find("warmup_steps"), std::string::npos);
  s = LrSchedule{LrDecay::kConstant, -1.0f};
  EXPECT_FALSE(Validate(s).ok());
  EXPECT_EQ(ToString(LrSchedule{LrDecay::kCosine, 1.0f, 0.5f, 1, 2}),
            "cosine(max=1, min=0.5, warmup=1, decay=2)");
}

}  // namespace
}  // namespace gtp::optimizer
