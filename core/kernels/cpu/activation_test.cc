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

// ---- bf16 -----------------------------------------------------------------
// Inputs rounded to bf16, the double reference run on the rounded values; one
// rounding of the output (≤ 2⁻⁸ per element). The bf16 kernels share the f32
// kernels' body, so they must also equal the f32 kernel's output rounded once.
constexpr double kBf16Tol = 5e-3;

TEST(RefActivationBackward, MatchesFiniteDifferences) {
  Rng rng(35);
  const std::vector<double> x = ToDouble(rng.Uniform(257, -5.0f, 5.0f)),
                            dy = ToDouble(rng.Normal(257));
  auto close = [](const std::vector<double>& got, const std::vector<double>& want) {
    return RelClose(std::vector<float>(got.begin(), got.end()), want, 1e-6);
  };
  EXPECT_TRUE(close(RefGeluBackward(dy, x), FiniteDifferenceGradient(RefGelu, x, dy)));
  const std::vector<double> dyh(dy.begin(), dy.begin() + 3 * 42);  // N = 3, H = 42 < 257 / 2
  const std::vector<double> xs(x.begin(), x.begin() + 3 * 84);
  EXPECT_TRUE(
      close(RefSwiGluBackward(dyh, xs, 3, 42),
            FiniteDifferenceGradient(
                [](const std::vector<double>& v) { return RefSwiGlu(v, 3, 42); }, xs, dyh)));
}

TEST(GeluBf16, MatchesReferenceAndF32KernelRoundedOnce) {
  Rng rng(36);
  for (int64_t n : {1, 3, 257, 4099}) {
    SCOPED_TRACE(absl::StrCat("n=", n));
    const std::vector<bf16> x = ToBF16(rng.Uniform(n, -8.0f, 8.0f)), dy = ToBF16(rng.Normal(n));
    std::vector<bf16> y = ToBF16(NaNs(n)), dx = ToBF16(NaNs(n));
    cpu::GeluForward(x.data(), y.data(), n);
    cpu::GeluBackward(dy.data(), x.data(), dx.data(), n);
    const std::vector<double> ref_y = RefGelu(ToDouble(x)),
                              ref_dx = RefGeluBackward(ToDouble(dy), ToDouble(x));
    EXPECT_TRUE(RelClose(y, ref_y, kBf16Tol));
    EXPECT_TRUE(RoundedOnce(y, ref_y));
    EXPECT_TRUE(RelClose(dx, ref_dx, kBf16Tol));
    EXPECT_TRUE(RoundedOnce(dx, ref_dx));

    const std::vector<float> xf = ToFloat(x), dyf = ToFloat(dy);
    std::vector<float> yf(n), dxf(n);
    cpu::GeluForward(xf.data(), yf.data(), n);
    cpu::GeluBackward(dyf.data(), xf.data(), dxf.data(), n);
    EXPECT_EQ(ToFloat(y), RoundToBF16(yf));
    EXPECT_EQ(ToFloat(dx), RoundToBF16(dxf));
  }
}

TEST(SwiGluBf16, MatchesReferenceAndF32KernelRoundedOnce) {
  Rng rng(37);
  for (const Shape& s : {Shape{1, 1}, Shape{3, 5}, Shape{7, 257}, Shape{64, 16}, Shape{2, 4099}}) {
    SCOPED_TRACE(absl::StrCat("N=", s.N, " H=", s.H));
    const std::vector<bf16> x = ToBF16(rng.Uniform(s.N * 2 * s.H, -8.0f, 8.0f)),
                            dy = ToBF16(rng.Normal(s.N * s.H));
    std::vector<bf16> y = ToBF16(NaNs(s.N * s.H)), dx = ToBF16(NaNs(s.N * 2 * s.H));
    cpu::SwiGluForward(x.data(), y.data(), s.N, s.H);
    cpu::SwiGluBackward(dy.data(), x.data(), dx.data(), s.N, s.H);
    const std::vector<double> ref_y = RefSwiGlu(ToDouble(x), s.N, s.H),
                              ref_dx = RefSwiGluBackward(ToDouble(dy), ToDouble(x), s.N, s.H);
    EXPECT_TRUE(RelClose(y, ref_y, kBf16Tol));
    EXPECT_TRUE(RoundedOnce(y, ref_y));
    EXPECT_TRUE(RelClose(dx, ref_dx, kBf16Tol));
    EXPECT_TRUE(RoundedOnce(dx, ref_dx));

    const std::vector<float> xf = ToFloat(x), dyf = ToFloat(dy);
    std::vector<float> yf(s.N * s.H), dxf(s.N * 2 * s.H);
    cpu::SwiGluForward(xf.data(), yf.data(), s.N, s.H);
    cpu::SwiGluBackward(dyf.data(), xf.data(), dxf.data(), s.N, s.H);
    EXPECT_EQ(ToFloat(y), RoundToBF16(yf));
    EXPECT_EQ(ToFloat(dx), RoundToBF16(dxf));
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
