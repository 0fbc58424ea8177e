#include <vector>

#include "absl/strings/str_cat.h"
#include "core/kernels/cpu.h"
#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

TEST(GeluForward, MatchesReference) {
  Rng rng(31);
  for (int64_t n : {1, 3, 257, 4096}) {
    SCOPED_TRACE(absl::StrCat("n=", n));
    // Wide range: both tails (where tanh saturates) and the curved middle.
    std::vector<float> x = rng.Uniform(n, -8.0f, 8.0f), y = NaNs(n);
    cpu::GeluForward(x.data(), y.data(), n);
    EXPECT_TRUE(RelClose(y, RefGelu(ToDouble(x)), 1e-6));
  }
}

TEST(GeluBackward, MatchesFiniteDifferences) {
  Rng rng(32);
  for (int64_t n : {1, 3, 257}) {
    SCOPED_TRACE(absl::StrCat("n=", n));
    std::vector<float> x = rng.Uniform(n, -5.0f, 5.0f), dy = rng.Normal(n), dx = NaNs(n);
    cpu::GeluBackward(dy.data(), x.data(), dx.data(), n);
    EXPECT_TRUE(RelClose(dx, FiniteDifferenceGradient(RefGelu, ToDouble(x), ToDouble(dy)), 1e-5));
  }
}

struct Shape {
  int64_t N, H;
};
const Shape kSwiGluShapes[] = {{1, 1}, {3, 5}, {7, 257}, {64, 16}};

TEST(SwiGluForward, MatchesReference) {
  Rng rng(33);
  for (const Shape& s : kSwiGluShapes) {
    SCOPED_TRACE(absl::StrCat("N=", s.N, " H=", s.H));
    std::vector<float> x = rng.Uniform(s.N * 2 * s.H, -8.0f, 8.0f), y = NaNs(s.N * s.H);
    cpu::SwiGluForward(x.data(), y.data(), s.N, s.H);
    EXPECT_TRUE(RelClose(y, RefSwiGlu(ToDouble(x), s.N, s.H), 1e-6));
  }
}

TEST(SwiGluBackward, MatchesFiniteDifferences) {
  Rng rng(34);
  for (const Shape& s : kSwiGluShapes) {
    SCOPED_TRACE(absl::StrCat("N=", s.N, " H=", s.H));
    std::vector<float> x = rng.Uniform(s.N * 2 * s.H, -5.0f, 5.0f), dy = rng.Normal(s.N * s.H),
                       dx = NaNs(s.N * 2 * s.H);
    cpu::SwiGluBackward(dy.data(), x.data(), dx.data(), s.N, s.H);
    std::vector<double> fd = FiniteDifferenceGradient(
        [&](const std::vector<double>& v) { return RefSwiGlu(v, s.N, s.H); }, ToDouble(x),
        ToDouble(dy));
    EXPECT_TRUE(RelClose(dx, fd, 1e-5));
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
