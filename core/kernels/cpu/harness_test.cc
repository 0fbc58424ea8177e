// Tests of the op-test harness itself (core/kernels/testing). They live here
// because core/kernels/BUILD makes test targets only from cpu/*_test.cc.
#include "core/kernels/testing/harness.h"

#include <cmath>
#include <vector>

#include "core/kernels/testing/reference.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

TEST(RelClose, MeasuresNormwiseRelativeError) {
  const std::vector<double> ref = {3.0, 4.0};  // ‖ref‖ = 5
  EXPECT_DOUBLE_EQ(RelativeError(std::vector<float>{3.0f, 4.5f}.data(), ref.data(), 2), 0.1);
  EXPECT_TRUE(RelClose({3.0f, 4.5f}, ref, 0.11));
  EXPECT_FALSE(RelClose({3.0f, 4.5f}, ref, 0.09));
  // All-zero reference: absolute error.
  EXPECT_TRUE(RelClose({0.0f, 1e-7f}, {0.0, 0.0}, 1e-6));
  EXPECT_FALSE(RelClose({0.0f, 1e-5f}, {0.0, 0.0}, 1e-6));
  EXPECT_FALSE(RelClose({1.0f}, {1.0, 2.0}, 1.0)) << "size mismatch must fail";
}

TEST(RelClose, FailsOnNaNAndInf) {
  EXPECT_FALSE(RelClose({1.0f, NAN}, {1.0, 2.0}, 1e30));
  EXPECT_FALSE(RelClose({1.0f, INFINITY}, {1.0, 2.0}, 1e30));
  EXPECT_FALSE(RelClose({1.0f, 2.0f}, {1.0, NAN}, 1e30));
  EXPECT_FALSE(RelClose(NaNs(3), {0.0, 0.0, 0.0}, 1e30));
}

TEST(FiniteDifferenceGradient, MatchesAnalyticGradient) {
  // f(x) = (x0·x1, sin x2, x0³): ∂(w·f)/∂x = (w0·x1 + 3·w2·x0², w0·x0, w1·cos x2).
  auto f = [](const std::vector<double>& x) {
    return std::vector<double>{x[0] * x[1], std::sin(x[2]), x[0] * x[0] * x[0]};
  };
  const std::vector<double> x = {0.7, -1.3, 2.1}, w = {0.5, -2.0, 1.5};
  std::vector<double> g = FiniteDifferenceGradient(f, x, w);
  EXPECT_NEAR(g[0], w[0] * x[1] + 3 * w[2] * x[0] * x[0], 1e-8);
  EXPECT_NEAR(g[1], w[0] * x[0], 1e-8);
  EXPECT_NEAR(g[2], w[1] * std::cos(x[2]), 1e-8);
}

TEST(GuardedBuffer, DetectsWritesPastTheEnd) {
  GuardedBuffer ok(4);
  for (int i = 0; i < 4; ++i) ok.data()[i] = 1.0f;
  EXPECT_TRUE(ok.GuardIntact());
  GuardedBuffer bad(4);
  bad.data()[4] = NAN;  // an ordinary NaN differs from the sentinel's bits
  EXPECT_FALSE(bad.GuardIntact());
}

TEST(SymmetricEigenvalues, MatchesKnownSpectrum) {
  // [[2, 1, 0], [1, 2, 0], [0, 0, -1]] has eigenvalues −1, 1, 3.
  std::vector<double> e = SymmetricEigenvalues({2, 1, 0, 1, 2, 0, 0, 0, -1}, 3);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_NEAR(e[0], -1.0, 1e-12);
  EXPECT_NEAR(e[1], 1.0, 1e-12);
  EXPECT_NEAR(e[2], 3.0, 1e-12);
}

TEST(Rng, IsDeterministicPerSeed) {
  EXPECT_EQ(Rng(5).Normal(8), Rng(5).Normal(8));
  EXPECT_NE(Rng(5).Normal(8), Rng(6).Normal(8));
  for (int32_t v : Rng(7).Ints(1000, -2, 3)) {
    ASSERT_GE(v, -2);
    ASSERT_LE(v, 3);
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
