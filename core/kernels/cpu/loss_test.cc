// cpu::MaskedMeanAccumulate / FillReciprocal against closed forms.
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/kernels/cpu.h"
#include "core/kernels/testing/harness.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

TEST(MaskedMeanAccumulate, MeanOverValidTargetsAddsIntoAcc) {
  Rng rng(7);
  for (int64_t n : {1, 5, 1000, 8193}) {
    SCOPED_TRACE(absl::StrCat("n=", n));
    std::vector<float> loss = rng.Normal(n, 3.0f, 1.0f);
    std::vector<int32_t> tg(n);
    double sum = 0;
    int64_t valid = 0;
    for (int64_t i = 0; i < n; ++i) {
      tg[i] = (i % 3 == 1) ? -1 : static_cast<int32_t>(i % 11);
      if (tg[i] >= 0) sum += loss[i], ++valid;
    }
    float acc = 0.5f, count = -1.0f;
    cpu::MaskedMeanAccumulate(loss.data(), tg.data(), n, &acc, &count);
    EXPECT_EQ(count, static_cast<float>(valid));
    EXPECT_NEAR(acc, 0.5 + sum / valid, 1e-6);
  }
}

TEST(MaskedMeanAccumulate, NoValidTargetLeavesAccAlone) {
  std::vector<float> loss = {1.0f, 2.0f};
  std::vector<int32_t> tg = {-1, -1};
  float acc = 2.0f, count = 5.0f;
  cpu::MaskedMeanAccumulate(loss.data(), tg.data(), 2, &acc, &count);
  EXPECT_EQ(acc, 2.0f);
  EXPECT_EQ(count, 0.0f);
}

TEST(MaskedMeanAccumulate, NaNLossPropagates) {
  std::vector<float> loss = {1.0f, NaNs(1)[0]};
  std::vector<int32_t> tg = {0, 1};
  float acc = 0.0f, count = 0.0f;
  cpu::MaskedMeanAccumulate(loss.data(), tg.data(), 2, &acc, &count);
  EXPECT_TRUE(acc != acc);
}

TEST(FillReciprocal, OneOverCountOrZero) {
  std::vector<float> out = NaNs(7);
  float count = 4.0f;
  cpu::FillReciprocal(&count, out.data(), 7);
  EXPECT_EQ(out, std::vector<float>(7, 0.25f));
  count = 0.0f;
  cpu::FillReciprocal(&count, out.data(), 7);
  EXPECT_EQ(out, std::vector<float>(7, 0.0f));
}

}  // namespace
}  // namespace gtp::kernels::testing
