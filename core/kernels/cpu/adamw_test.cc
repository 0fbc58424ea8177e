#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/kernels/cpu.h"
#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

// Three consecutive steps from zero moments, each with a fresh gradient, against
// the scalar double reference: p, m and v after every step.
TEST(AdamW, MatchesDoubleReferenceOverThreeSteps) {
  Rng rng(81);
  for (int64_t n : {1, 3, 257}) {
    for (float wd : {0.0f, 0.1f}) {
      SCOPED_TRACE(absl::StrCat("n=", n, " wd=", wd));
      AdamWParams hp;
      hp.lr = 1e-2f;
      hp.beta1 = 0.9f;
      hp.beta2 = 0.95f;
      hp.eps = 1e-8f;
      hp.weight_decay = wd;
      std::vector<float> p = rng.Normal(n), m(n, 0.0f), v(n, 0.0f);
      std::vector<double> pd = ToDouble(p), md(n, 0.0), vd(n, 0.0);
      for (int64_t step = 1; step <= 3; ++step) {
        SCOPED_TRACE(absl::StrCat("step=", step));
        hp.step = step;
        std::vector<float> g = rng.Normal(n, 0.0f, 0.1f);
        cpu::AdamW(p.data(), g.data(), m.data(), v.data(), n, hp);
        RefAdamW(&pd, ToDouble(g), &md, &vd, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay,
                 step);
        EXPECT_TRUE(RelClose(p, pd, 1e-6));
        EXPECT_TRUE(RelClose(m, md, 1e-6));
        EXPECT_TRUE(RelClose(v, vd, 1e-6));
      }
    }
  }
}

// Closed form: the first step from zero moments moves each parameter by
// lr·(sign(g) + wd·p), whatever g's magnitude (bias correction undoes (1 − β)).
TEST(AdamW, FirstStepIsSignUpdate) {
  Rng rng(82);
  const int64_t n = 33;
  AdamWParams hp;
  hp.lr = 0.5f;
  hp.weight_decay = 0.25f;
  hp.eps = 0.0f;
  std::vector<float> p = rng.Normal(n), g = rng.Normal(n, 0.0f, 1e-3f), m(n, 0.0f), v(n, 0.0f);
  std::vector<double> expect(n);
  for (int64_t i = 0; i < n; ++i) expect[i] = p[i] - hp.lr * ((g[i] > 0 ? 1 : -1) + 0.25 * p[i]);
  cpu::AdamW(p.data(), g.data(), m.data(), v.data(), n, hp);
  EXPECT_TRUE(RelClose(p, expect, 1e-6));
}

// Far into training the bias corrections are ≈ 1 but not exactly; state carried in.
TEST(AdamW, MatchesDoubleReferenceLateStep) {
  Rng rng(83);
  const int64_t n = 257;
  AdamWParams hp;
  hp.step = 1000;
  hp.weight_decay = 0.01f;
  std::vector<float> p = rng.Normal(n), g = rng.Normal(n), m = rng.Normal(n, 0.0f, 0.1f),
                     v = rng.Uniform(n, 0.0f, 0.01f);
  std::vector<double> pd = ToDouble(p), md = ToDouble(m), vd = ToDouble(v);
  cpu::AdamW(p.data(), g.data(), m.data(), v.data(), n, hp);
  RefAdamW(&pd, ToDouble(g), &md, &vd, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, hp.step);
  EXPECT_TRUE(RelClose(p, pd, 1e-6));
  EXPECT_TRUE(RelClose(m, md, 1e-6));
  EXPECT_TRUE(RelClose(v, vd, 1e-6));
}

TEST(AdamWMulti, EqualsPerTensorAdamWAndRoundsTheCopy) {
  Rng rng(5);
  std::vector<float> a = rng.Normal(10), b = rng.Normal(3), ga = rng.Normal(10), gb = rng.Normal(3);
  std::vector<float> a2 = a, b2 = b, ma(10, 0.0f), va(10, 0.0f), mb(3, 0.0f), vb(3, 0.0f);
  std::vector<float> ma2 = ma, va2 = va, mb2 = mb, vb2 = vb;
  std::vector<bf16> b_bf16(3);
  AdamWParams hp;
  hp.lr = 0.01f;
  hp.step = 2;
  AdamWSegment s[2];
  s[0] = {a.data(), nullptr, ga.data(), ma.data(), va.data(), 10, 0.1f};
  s[1] = {b.data(), b_bf16.data(), gb.data(), mb.data(), vb.data(), 3, 0.0f};
  cpu::AdamWMulti(s, 2, hp);
  AdamWParams h = hp;
  h.weight_decay = 0.1f;
  cpu::AdamW(a2.data(), ga.data(), ma2.data(), va2.data(), 10, h);
  h.weight_decay = 0.0f;
  cpu::AdamW(b2.data(), gb.data(), mb2.data(), vb2.data(), 3, h);
  EXPECT_EQ(a, a2);
  EXPECT_EQ(b, b2);
  EXPECT_EQ(ma, ma2);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b_bf16[i].bits, gtp::ToBF16(b2[i]).bits);
}

}  // namespace
}  // namespace gtp::kernels::testing
