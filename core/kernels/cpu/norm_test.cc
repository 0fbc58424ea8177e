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
const Shape kShapes[] = {{1, 1}, {1, 3}, {3, 7}, {5, 257}, {64, 32}};
constexpr float kEps = 1e-5f;

// Inputs with a common offset per row: the variance must not cancel.
std::vector<float> Inputs(Rng& rng, const Shape& s) {
  std::vector<float> x = rng.Normal(s.N * s.C);
  std::vector<float> offset = rng.Uniform(s.N, -3.0f, 3.0f);
  for (int64_t n = 0; n < s.N; ++n) {
    for (int64_t c = 0; c < s.C; ++c) x[n * s.C + c] += offset[n];
  }
  return x;
}

TEST(LayerNormForward, MatchesReference) {
  Rng rng(21);
  for (const Shape& s : kShapes) {
    for (bool bias : {true, false}) {
      SCOPED_TRACE(absl::StrCat("N=", s.N, " C=", s.C, " bias=", bias));
      std::vector<float> x = Inputs(rng, s), w = rng.Normal(s.C),
                         b = bias ? rng.Normal(s.C) : std::vector<float>();
      std::vector<float> y = NaNs(s.N * s.C), mean = NaNs(s.N), rstd = NaNs(s.N);
      cpu::LayerNormForward(x.data(), w.data(), bias ? b.data() : nullptr, y.data(), mean.data(),
                            rstd.data(), s.N, s.C, kEps);
      std::vector<double> ref_mean, ref_rstd;
      std::vector<double> ref =
          RefLayerNorm(ToDouble(x), ToDouble(w), ToDouble(b), s.N, s.C, kEps, &ref_mean, &ref_rstd);
      EXPECT_TRUE(RelClose(y, ref, 1e-5));
      EXPECT_TRUE(RelClose(mean, ref_mean, 1e-5));
      EXPECT_TRUE(RelClose(rstd, ref_rstd, 1e-5));
    }
  }
}

TEST(LayerNormBackward, MatchesFiniteDifferences) {
  Rng rng(22);
  for (const Shape& s : kShapes) {
    for (bool bias : {true, false}) {
      SCOPED_TRACE(absl::StrCat("N=", s.N, " C=", s.C, " bias=", bias));
      std::vector<float> x = Inputs(rng, s), w = rng.Normal(s.C),
                         b = bias ? rng.Normal(s.C) : std::vector<float>(),
                         dy = rng.Normal(s.N * s.C);
      std::vector<double> xd = ToDouble(x), wd = ToDouble(w), bd = ToDouble(b), dyd = ToDouble(dy);
      std::vector<float> y(s.N * s.C), mean(s.N), rstd(s.N);
      cpu::LayerNormForward(x.data(), w.data(), bias ? b.data() : nullptr, y.data(), mean.data(),
                            rstd.data(), s.N, s.C, kEps);

      // dx is written (=); dw and db accumulate onto what they held.
      std::vector<float> dx = NaNs(s.N * s.C), dw0 = rng.Normal(s.C), dw = dw0,
                         db0 = rng.Normal(s.C), db = db0;
      cpu::LayerNormBackward(dy.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(),
                             dw.data(), bias ? db.data() : nullptr, s.N, s.C);

      std::vector<double> fd_x = FiniteDifferenceGradient(
          [&](const std::vector<double>& v) { return RefLayerNorm(v, wd, bd, s.N, s.C, kEps); }, xd,
          dyd);
      std::vector<double> fd_w = FiniteDifferenceGradient(
          [&](const std::vector<double>& v) { return RefLayerNorm(xd, v, bd, s.N, s.C, kEps); }, wd,
          dyd);
      for (int64_t c = 0; c < s.C; ++c) fd_w[c] += dw0[c];
      // C = 1 has dx = 0 exactly (y = b), so compare absolutely there.
      EXPECT_TRUE(RelClose(dx, fd_x, s.C == 1 ? 1e-6 : 1e-4));
      EXPECT_TRUE(RelClose(dw, fd_w, 1e-5));
      if (bias) {
        std::vector<double> fd_b = FiniteDifferenceGradient(
            [&](const std::vector<double>& v) { return RefLayerNorm(xd, wd, v, s.N, s.C, kEps); },
            bd, dyd);
        for (int64_t c = 0; c < s.C; ++c) fd_b[c] += db0[c];
        EXPECT_TRUE(RelClose(db, fd_b, 1e-5));
      } else {
        EXPECT_EQ(db, db0);  // null db: nothing written anywhere
      }
    }
  }
}

TEST(RMSNormForward, MatchesReference) {
  Rng rng(23);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(absl::StrCat("N=", s.N, " C=", s.C));
    std::vector<float> x = Inputs(rng, s), w = rng.Normal(s.C);
    std::vector<float> y = NaNs(s.N * s.C), rstd = NaNs(s.N);
    cpu::RMSNormForward(x.data(), w.data(), y.data(), rstd.data(), s.N, s.C, kEps);
    std::vector<double> ref_rstd;
    std::vector<double> ref = RefRMSNorm(ToDouble(x), ToDouble(w), s.N, s.C, kEps, &ref_rstd);
    EXPECT_TRUE(RelClose(y, ref, 1e-5));
    EXPECT_TRUE(RelClose(rstd, ref_rstd, 1e-5));
  }
}

TEST(RMSNormBackward, MatchesFiniteDifferences) {
  Rng rng(24);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(absl::StrCat("N=", s.N, " C=", s.C));
    std::vector<float> x = Inputs(rng, s), w = rng.Normal(s.C), dy = rng.Normal(s.N * s.C);
    std::vector<double> xd = ToDouble(x), wd = ToDouble(w), dyd = ToDouble(dy);
    std::vector<float> y(s.N * s.C), rstd(s.N);
    cpu::RMSNormForward(x.data(), w.data(), y.data(), rstd.data(), s.N, s.C, kEps);
    std::vector<float> dx = NaNs(s.N * s.C), dw0 = rng.Normal(s.C), dw = dw0;
    cpu::RMSNormBackward(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), s.N,
                         s.C);

    std::vector<double> fd_x = FiniteDifferenceGradient(
        [&](const std::vector<double>& v) { return RefRMSNorm(v, wd, s.N, s.C, kEps); }, xd, dyd);
    std::vector<double> fd_w = FiniteDifferenceGradient(
        [&](const std::vector<double>& v) { return RefRMSNorm(xd, v, s.N, s.C, kEps); }, wd, dyd);
    for (int64_t c = 0; c < s.C; ++c) fd_w[c] += dw0[c];
    // C = 1: dx = dy·w·eps/(x² + eps)^1.5 is the tiny difference of two O(dy·w)
    // f32 terms, so only about 1e-3 of it survives; wider rows are not affected.
    EXPECT_TRUE(RelClose(dx, fd_x, s.C == 1 ? 1e-2 : 1e-4));
    EXPECT_TRUE(RelClose(dw, fd_w, 1e-5));
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
