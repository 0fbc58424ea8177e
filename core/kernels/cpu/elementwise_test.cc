#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/kernels/cpu.h"
#include "core/kernels/testing/harness.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

TEST(Axpby, MatchesReference) {
  Rng rng(101);
  for (int64_t n : {1, 3, 257}) {
    for (float beta : {0.0f, 1.0f, -0.5f}) {
      SCOPED_TRACE(absl::StrCat("n=", n, " beta=", beta));
      std::vector<float> x = rng.Normal(n), y = rng.Normal(n);
      std::vector<double> ref(n);
      for (int64_t i = 0; i < n; ++i) ref[i] = 1.5 * x[i] + beta * static_cast<double>(y[i]);
      cpu::Axpby(1.5f, x.data(), beta, y.data(), n);
      EXPECT_TRUE(RelClose(y, ref, 1e-6));
    }
  }
}

TEST(Axpby, BetaZeroDoesNotReadY) {
  std::vector<float> x = {1.0f, -2.0f, 3.0f}, y = NaNs(3);
  cpu::Axpby(2.0f, x.data(), 0.0f, y.data(), 3);
  EXPECT_EQ(y, (std::vector<float>{2.0f, -4.0f, 6.0f}));
}

TEST(Axpby, AllowsXToAliasY) {
  std::vector<float> y = {1.0f, 2.0f, -3.0f};
  cpu::Axpby(2.0f, y.data(), 1.0f, y.data(), 3);  // y ← 3y
  EXPECT_EQ(y, (std::vector<float>{3.0f, 6.0f, -9.0f}));
}

TEST(Fill, WritesEveryElementAndNoMore) {
  GuardedBuffer x(257);
  cpu::Fill(x.data(), -1.25f, 257);
  for (int i = 0; i < 257; ++i) ASSERT_EQ(x.data()[i], -1.25f) << i;
  EXPECT_TRUE(x.GuardIntact());
}

TEST(SumSquares, AccumulatesInDouble) {
  Rng rng(102);
  for (int64_t n : {0, 1, 3, 257}) {
    std::vector<float> x = rng.Normal(n);
    double ref = 0;
    for (float v : x) ref += static_cast<double>(v) * v;
    double out = NAN;
    cpu::SumSquares(x.data(), n, &out);
    EXPECT_NEAR(out, ref, 1e-12 * std::max(1.0, ref)) << "n=" << n;
  }
  // 2²⁴ + 1 ones: an f32 accumulator stalls at 2²⁴, a double one does not.
  const int64_t n = (int64_t{1} << 24) + 1;
  std::vector<float> ones(n, 1.0f);
  double out = 0;
  cpu::SumSquares(ones.data(), n, &out);
  EXPECT_EQ(out, static_cast<double>(n));
}

// ---- bf16 -----------------------------------------------------------------
// Axpby rounds alpha·x + beta·y (f32) once: ≤ 2⁻⁸ relative per element.
TEST(AxpbyBf16, MatchesReference) {
  Rng rng(103);
  for (int64_t n : {1, 3, 257, 4099}) {
    for (float beta : {0.0f, 1.0f, -0.5f}) {
      SCOPED_TRACE(absl::StrCat("n=", n, " beta=", beta));
      const std::vector<bf16> x = ToBF16(rng.Normal(n));
      std::vector<bf16> y = ToBF16(rng.Normal(n));
      std::vector<double> ref(n);
      for (int64_t i = 0; i < n; ++i) {
        ref[i] = 1.5 * ToF32(x[i]) + beta * static_cast<double>(ToF32(y[i]));
      }
      std::vector<float> yf = ToFloat(y);
      cpu::Axpby(1.5f, ToFloat(x).data(), beta, yf.data(), n);
      cpu::Axpby(1.5f, x.data(), beta, y.data(), n);
      EXPECT_TRUE(RelClose(y, ref, 5e-3));
      EXPECT_TRUE(RoundedOnce(y, ref));
      EXPECT_EQ(ToFloat(y), RoundToBF16(yf));  // f32 math, one rounding
    }
  }
}

TEST(AxpbyBf16, BetaZeroDoesNotReadYAndXMayAliasY) {
  const std::vector<bf16> x = ToBF16({1.0f, -2.0f, 3.0f});
  std::vector<bf16> y = ToBF16(NaNs(3));
  cpu::Axpby(2.0f, x.data(), 0.0f, y.data(), 3);
  EXPECT_EQ(ToFloat(y), (std::vector<float>{2.0f, -4.0f, 6.0f}));
  cpu::Axpby(2.0f, y.data(), 1.0f, y.data(), 3);  // y ← 3y
  EXPECT_EQ(ToFloat(y), (std::vector<float>{6.0f, -12.0f, 18.0f}));
}

TEST(FillBf16, WritesTheRoundedValueEverywhere) {
  std::vector<bf16> x = ToBF16(NaNs(259));
  cpu::Fill(x.data(), 0.1f, 257);  // 0.1 is not a bf16: rounded once
  for (int i = 0; i < 257; ++i) ASSERT_EQ(x[i].bits, gtp::ToBF16(0.1f).bits) << i;
  for (int i = 257; i < 259; ++i) ASSERT_TRUE(std::isnan(ToF32(x[i]))) << "wrote past n at " << i;
}

TEST(SumSquaresBf16, AccumulatesWidenedValuesInDouble) {
  Rng rng(104);
  for (int64_t n : {0, 1, 3, 4099}) {
    const std::vector<bf16> x = ToBF16(rng.Normal(n));
    double ref = 0;
    for (bf16 v : x) ref += static_cast<double>(ToF32(v)) * ToF32(v);
    double out = NAN;
    cpu::SumSquares(x.data(), n, &out);
    EXPECT_NEAR(out, ref, 1e-12 * std::max(1.0, ref)) << "n=" << n;
  }
  const int64_t n = (int64_t{1} << 24) + 1;
  const std::vector<bf16> ones(n, gtp::ToBF16(1.0f));
  double out = 0;
  cpu::SumSquares(ones.data(), n, &out);
  EXPECT_EQ(out, static_cast<double>(n));
}

}  // namespace
}  // namespace gtp::kernels::testing
