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

TEST(NormBackward, ResidualGradientIsAddedIntoDx) {
  Rng rng(31);
  const int64_t N = 9, C = 13;
  const std::vector<float> x = rng.Normal(N * C), w = rng.Normal(C), b = rng.Normal(C);
  const std::vector<float> g = rng.Normal(N * C), res = rng.Normal(N * C);
  std::vector<float> y(N * C), mean(N), rstd(N), dw(C, 0.0f), db(C, 0.0f);
  for (bool rms : {false, true}) {
    std::vector<float> plain(N * C), fused(N * C);
    if (rms) {
      cpu::RMSNormForward(x.data(), w.data(), y.data(), rstd.data(), N, C, 1e-5f);
      cpu::RMSNormBackward(g.data(), x.data(), w.data(), rstd.data(), plain.data(), dw.data(), N, C);
      cpu::RMSNormBackward(g.data(), x.data(), w.data(), rstd.data(), fused.data(), dw.data(), N, C,
                           res.data());
    } else {
      cpu::LayerNormForward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C,
                            1e-5f);
      cpu::LayerNormBackward(g.data(), x.data(), w.data(), mean.data(), rstd.data(), plain.data(),
                             dw.data(), db.data(), N, C);
      cpu::LayerNormBackward(g.data(), x.data(), w.data(), mean.data(), rstd.data(), fused.data(),
                             dw.data(), db.data(), N, C, res.data());
    }
    for (int64_t i = 0; i < N * C; ++i) ASSERT_EQ(fused[i], plain[i] + res[i]) << i;  // one f32 add
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

// ---- bf16 -----------------------------------------------------------------
// Inputs are rounded to bf16 first; the double reference runs on the rounded
// values. A bf16 output carries one rounding (relative error ≤ 2⁻⁸ = 3.9e-3
// per element), f32 statistics and parameter gradients only f32 arithmetic.
// The CPU bf16 kernels are the f32 kernels' template with a widening load and
// one rounding store, so on the same (rounded) inputs they must also give the
// f32 kernels' results rounded once, bit for bit.
const Shape kBf16Shapes[] = {{1, 1}, {1, 3}, {3, 7}, {5, 257}, {64, 32}, {2, 4099}};
constexpr double kBf16Tol = 5e-3;  // bf16 outputs
constexpr double kF32Tol = 1e-4;   // f32 stats / parameter grads from bf16 inputs

// The analytic double backwards that the bf16 (and GPU) tests use as ground
// truth, against finite differences of the forwards.
TEST(RefNormBackward, MatchesFiniteDifferences) {
  Rng rng(27);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(absl::StrCat("N=", s.N, " C=", s.C));
    const std::vector<double> x = ToDouble(Inputs(rng, s)), w = ToDouble(rng.Normal(s.C)),
                              b = ToDouble(rng.Normal(s.C)), dy = ToDouble(rng.Normal(s.N * s.C));
    std::vector<double> dx, dw, db;
    RefLayerNormBackward(dy, x, w, s.N, s.C, kEps, &dx, &dw, &db);
    auto ln = [&](const std::vector<double>& xv, const std::vector<double>& wv,
                  const std::vector<double>& bv) {
      return RefLayerNorm(xv, wv, bv, s.N, s.C, kEps);
    };
    auto close = [](const std::vector<double>& got, const std::vector<double>& want, double tol) {
      return RelClose(std::vector<float>(got.begin(), got.end()), want, tol);
    };
    EXPECT_TRUE(close(dx, FiniteDifferenceGradient([&](auto& v) { return ln(v, w, b); }, x, dy),
                      s.C == 1 ? 1e-6 : 1e-5));
    EXPECT_TRUE(
        close(dw, FiniteDifferenceGradient([&](auto& v) { return ln(x, v, b); }, w, dy), 1e-5));
    EXPECT_TRUE(
        close(db, FiniteDifferenceGradient([&](auto& v) { return ln(x, w, v); }, b, dy), 1e-5));
    RefRMSNormBackward(dy, x, w, s.N, s.C, kEps, &dx, &dw);
    auto rms = [&](const std::vector<double>& xv, const std::vector<double>& wv) {
      return RefRMSNorm(xv, wv, s.N, s.C, kEps);
    };
    EXPECT_TRUE(close(dx, FiniteDifferenceGradient([&](auto& v) { return rms(v, w); }, x, dy),
                      s.C == 1 ? 1e-4 : 1e-5));
    EXPECT_TRUE(
        close(dw, FiniteDifferenceGradient([&](auto& v) { return rms(x, v); }, w, dy), 1e-5));
  }
}

TEST(LayerNormForwardBf16, MatchesReferenceAndF32KernelRoundedOnce) {
  Rng rng(41);
  for (const Shape& s : kBf16Shapes) {
    for (bool bias : {true, false}) {
      SCOPED_TRACE(absl::StrCat("N=", s.N, " C=", s.C, " bias=", bias));
      const std::vector<bf16> x = ToBF16(Inputs(rng, s)), w = ToBF16(rng.Normal(s.C)),
                              b = bias ? ToBF16(rng.Normal(s.C)) : std::vector<bf16>();
      std::vector<bf16> y = ToBF16(NaNs(s.N * s.C));
      std::vector<float> mean = NaNs(s.N), rstd = NaNs(s.N);
      cpu::LayerNormForward(x.data(), w.data(), bias ? b.data() : nullptr, y.data(), mean.data(),
                            rstd.data(), s.N, s.C, kEps);
      std::vector<double> ref_mean, ref_rstd;
      const std::vector<double> ref =
          RefLayerNorm(ToDouble(x), ToDouble(w), ToDouble(b), s.N, s.C, kEps, &ref_mean, &ref_rstd);
      EXPECT_TRUE(RelClose(y, ref, kBf16Tol));
      EXPECT_TRUE(RoundedOnce(y, ref));
      EXPECT_TRUE(RelClose(mean, ref_mean, kF32Tol));
      EXPECT_TRUE(RelClose(rstd, ref_rstd, kF32Tol));

      const std::vector<float> xf = ToFloat(x), wf = ToFloat(w), bf = ToFloat(b);
      std::vector<float> yf(s.N * s.C), meanf(s.N), rstdf(s.N);
      cpu::LayerNormForward(xf.data(), wf.data(), bias ? bf.data() : nullptr, yf.data(),
                            meanf.data(), rstdf.data(), s.N, s.C, kEps);
      EXPECT_EQ(ToFloat(y), RoundToBF16(yf));
      EXPECT_EQ(mean, meanf);
      EXPECT_EQ(rstd, rstdf);
    }
  }
}

TEST(LayerNormBackwardBf16, MatchesReferenceAndAccumulatesF32Grads) {
  Rng rng(42);
  for (const Shape& s : kBf16Shapes) {
    for (bool bias : {true, false}) {
      SCOPED_TRACE(absl::StrCat("N=", s.N, " C=", s.C, " bias=", bias));
      const std::vector<bf16> x = ToBF16(Inputs(rng, s)), w = ToBF16(rng.Normal(s.C)),
                              b = ToBF16(rng.Normal(s.C)), dy = ToBF16(rng.Normal(s.N * s.C));
      std::vector<bf16> y(s.N * s.C);
      std::vector<float> mean(s.N), rstd(s.N);
      cpu::LayerNormForward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), s.N,
                            s.C, kEps);
      std::vector<bf16> dx = ToBF16(NaNs(s.N * s.C));
      const std::vector<float> dw0 = rng.Normal(s.C), db0 = rng.Normal(s.C);
      std::vector<float> dw = dw0, db = db0;
      cpu::LayerNormBackward(dy.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(),
                             dw.data(), bias ? db.data() : nullptr, s.N, s.C);
      std::vector<double> ref_dx, ref_dw, ref_db;
      RefLayerNormBackward(ToDouble(dy), ToDouble(x), ToDouble(w), s.N, s.C, kEps, &ref_dx, &ref_dw,
                           &ref_db);
      for (int64_t c = 0; c < s.C; ++c) ref_dw[c] += dw0[c], ref_db[c] += db0[c];
      EXPECT_TRUE(RelClose(dx, ref_dx, kBf16Tol));  // C = 1: exactly 0 (absolute)
      EXPECT_TRUE(RoundedOnce(dx, ref_dx));
      EXPECT_TRUE(RelClose(dw, ref_dw, kF32Tol));
      if (bias) {
        EXPECT_TRUE(RelClose(db, ref_db, kF32Tol));
      } else {
        EXPECT_EQ(db, db0);
      }

      const std::vector<float> dyf = ToFloat(dy), xf = ToFloat(x), wf = ToFloat(w);
      std::vector<float> dxf(s.N * s.C), dwf = dw0, dbf = db0;
      cpu::LayerNormBackward(dyf.data(), xf.data(), wf.data(), mean.data(), rstd.data(), dxf.data(),
                             dwf.data(), bias ? dbf.data() : nullptr, s.N, s.C);
      EXPECT_EQ(ToFloat(dx), RoundToBF16(dxf));
      EXPECT_EQ(dw, dwf);
      EXPECT_EQ(db, dbf);
    }
  }
}

TEST(RMSNormForwardBf16, MatchesReferenceAndF32KernelRoundedOnce) {
  Rng rng(43);
  for (const Shape& s : kBf16Shapes) {
    SCOPED_TRACE(absl::StrCat("N=", s.N, " C=", s.C));
    const std::vector<bf16> x = ToBF16(Inputs(rng, s)), w = ToBF16(rng.Normal(s.C));
    std::vector<bf16> y = ToBF16(NaNs(s.N * s.C));
    std::vector<float> rstd = NaNs(s.N);
    cpu::RMSNormForward(x.data(), w.data(), y.data(), rstd.data(), s.N, s.C, kEps);
    std::vector<double> ref_rstd;
    const std::vector<double> ref = RefRMSNorm(ToDouble(x), ToDouble(w), s.N, s.C, kEps, &ref_rstd);
    EXPECT_TRUE(RelClose(y, ref, kBf16Tol));
    EXPECT_TRUE(RoundedOnce(y, ref));
    EXPECT_TRUE(RelClose(rstd, ref_rstd, kF32Tol));

    const std::vector<float> xf = ToFloat(x), wf = ToFloat(w);
    std::vector<float> yf(s.N * s.C), rstdf(s.N);
    cpu::RMSNormForward(xf.data(), wf.data(), yf.data(), rstdf.data(), s.N, s.C, kEps);
    EXPECT_EQ(ToFloat(y), RoundToBF16(yf));
    EXPECT_EQ(rstd, rstdf);
  }
}

TEST(RMSNormBackwardBf16, MatchesReferenceAndAccumulatesF32Grads) {
  Rng rng(44);
  for (const Shape& s : kBf16Shapes) {
    SCOPED_TRACE(absl::StrCat("N=", s.N, " C=", s.C));
    const std::vector<bf16> x = ToBF16(Inputs(rng, s)), w = ToBF16(rng.Normal(s.C)),
                            dy = ToBF16(rng.Normal(s.N * s.C));
    std::vector<bf16> y(s.N * s.C);
    std::vector<float> rstd(s.N);
    cpu::RMSNormForward(x.data(), w.data(), y.data(), rstd.data(), s.N, s.C, kEps);
    std::vector<bf16> dx = ToBF16(NaNs(s.N * s.C));
    const std::vector<float> dw0 = rng.Normal(s.C);
    std::vector<float> dw = dw0;
    cpu::RMSNormBackward(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), s.N,
                         s.C);
    std::vector<double> ref_dx, ref_dw;
    RefRMSNormBackward(ToDouble(dy), ToDouble(x), ToDouble(w), s.N, s.C, kEps, &ref_dx, &ref_dw);
    for (int64_t c = 0; c < s.C; ++c) ref_dw[c] += dw0[c];
    // C = 1: dx is the cancellation of two O(dy·w) f32 terms (see the f32 test).
    EXPECT_TRUE(RelClose(dx, ref_dx, s.C == 1 ? 2e-2 : kBf16Tol));
    if (s.C > 1) {
      EXPECT_TRUE(RoundedOnce(dx, ref_dx));
    }
    EXPECT_TRUE(RelClose(dw, ref_dw, kF32Tol));

    const std::vector<float> dyf = ToFloat(dy), xf = ToFloat(x), wf = ToFloat(w);
    std::vector<float> dxf(s.N * s.C), dwf = dw0;
    cpu::RMSNormBackward(dyf.data(), xf.data(), wf.data(), rstd.data(), dxf.data(), dwf.data(), s.N,
                         s.C);
    EXPECT_EQ(ToFloat(dx), RoundToBF16(dxf));
    EXPECT_EQ(dw, dwf);
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
