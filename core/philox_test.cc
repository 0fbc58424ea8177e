#include "core/philox.h"

#include <cmath>

#include "gtest/gtest.h"

namespace gtp {
namespace {

// Known-answer vectors of Random123's Philox4x32-10 (kat_vectors).
TEST(Philox, KnownAnswers) {
  Philox4 a = Philox4x32_10(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(a.v[0], 0x6627e8d5u);
  EXPECT_EQ(a.v[1], 0xe169c58du);
  EXPECT_EQ(a.v[2], 0xbc57ac4cu);
  EXPECT_EQ(a.v[3], 0x9b00dbd8u);
  Philox4 b = Philox4x32_10(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu,
                            0xffffffffu);
  EXPECT_EQ(b.v[0], 0x408f276du);
  EXPECT_EQ(b.v[1], 0x41c83b0eu);
  EXPECT_EQ(b.v[2], 0xa20bc7c6u);
  EXPECT_EQ(b.v[3], 0x6d5451fdu);
  Philox4 c = Philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u,
                            0x299f31d0u);
  EXPECT_EQ(c.v[0], 0xd16cfe09u);
  EXPECT_EQ(c.v[1], 0x94fdccebu);
  EXPECT_EQ(c.v[2], 0x5001e420u);
  EXPECT_EQ(c.v[3], 0x24126ea1u);
}

TEST(Philox, UniformMoments) {
  const int n = 200000;
  double s = 0, s2 = 0;
  for (int i = 0; i < n; ++i) {
    float u = PhiloxUniform(42, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    s += u;
    s2 += u * u;
  }
  EXPECT_NEAR(s / n, 0.5, 0.005);
  EXPECT_NEAR(s2 / n - (s / n) * (s / n), 1.0 / 12, 0.002);
}

TEST(Philox, NormalMoments) {
  const int n = 200000;
  double s = 0, s2 = 0, s4 = 0;
  for (int i = 0; i < n; ++i) {
    double z = PhiloxNormal(7, i);
    ASSERT_TRUE(std::isfinite(z));
    s += z;
    s2 += z * z;
    s4 += z * z * z * z;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.01);
  EXPECT_NEAR(s4 / n, 3.0, 0.06);  // kurtosis of a normal
}

TEST(Philox, InternalMathIsAccurate) {
  for (int i = 1; i <= 1000; ++i) {
    float x = i / 1000.0f;
    EXPECT_NEAR(philox_internal::Log(x), std::log(static_cast<double>(x)), 2e-6) << x;
    float s, c;
    float t = x * 0.999f;
    philox_internal::SinCos2Pi(t, &s, &c);
    EXPECT_NEAR(s, std::sin(2 * M_PI * t), 2e-6);
    EXPECT_NEAR(c, std::cos(2 * M_PI * t), 2e-6);
  }
}

TEST(Philox, StreamsDifferByKeyAndName) {
  EXPECT_NE(PhiloxUniform(1, 5), PhiloxUniform(2, 5));
  EXPECT_NE(KeyFromName("a.weight"), KeyFromName("b.weight"));
  EXPECT_NE(KeyFromName("a.weight", 1), KeyFromName("a.weight", 2));
  EXPECT_EQ(KeyFromName("a.weight", 3), KeyFromName("a.weight", 3));
}

}  // namespace
}  // namespace gtp
