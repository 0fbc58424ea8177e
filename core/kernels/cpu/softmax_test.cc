#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/kernels/cpu.h"
#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

struct Shape {
  int64_t N, C;
};
const Shape kShapes[] = {{1, 1}, {1, 3}, {4, 7}, {3, 257}, {32, 64}};

TEST(SoftmaxForward, MatchesReferenceAndRowsSumToOne) {
  Rng rng(41);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(absl::StrCat("N=", s.N, " C=", s.C));
    std::vector<float> x = rng.Uniform(s.N * s.C, -6.0f, 6.0f), y = NaNs(s.N * s.C);
    cpu::SoftmaxForward(x.data(), y.data(), s.N, s.C);
    EXPECT_TRUE(RelClose(y, RefSoftmax(ToDouble(x), s.N, s.C), 1e-6));
    for (int64_t n = 0; n < s.N; ++n) {
      double sum = 0;
      for (int64_t c = 0; c < s.C; ++c) sum += y[n * s.C + c];
      EXPECT_NEAR(sum, 1.0, 1e-6) << "row " << n;
    }
  }
}

// exp(x) overflows f32 above 88: the max must be subtracted first.
TEST(SoftmaxForward, StableForLargeLogits) {
  Rng rng(42);
  const int64_t N = 3, C = 65;
  std::vector<float> x = rng.Uniform(N * C, -5.0f, 5.0f), y = NaNs(N * C);
  for (int64_t c = 0; c < C; ++c) {
    x[c] += 1000.0f;
    x[C + c] -= 1000.0f;
  }
  cpu::SoftmaxForward(x.data(), y.data(), N, C);
  EXPECT_TRUE(RelClose(y, RefSoftmax(ToDouble(x), N, C), 1e-5));
}

TEST(SoftmaxBackward, MatchesFiniteDifferences) {
  Rng rng(43);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(absl::StrCat("N=", s.N, " C=", s.C));
    std::vector<float> x = rng.Uniform(s.N * s.C, -3.0f, 3.0f), dy = rng.Normal(s.N * s.C);
    std::vector<float> y(s.N * s.C), dx = NaNs(s.N * s.C);
    cpu::SoftmaxForward(x.data(), y.data(), s.N, s.C);
    cpu::SoftmaxBackward(dy.data(), y.data(), dx.data(), s.N, s.C);
    std::vector<double> fd = FiniteDifferenceGradient(
        [&](const std::vector<double>& v) { return RefSoftmax(v, s.N, s.C); }, ToDouble(x),
        ToDouble(dy));
    // C = 1: the gradient is exactly 0 (y ≡ 1); RelClose compares absolutely then.
    EXPECT_TRUE(RelClose(dx, fd, 1e-5));
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
