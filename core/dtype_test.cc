#include "core/dtype.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace gtp {
namespace {

// An independent reference: every code of a format decoded from its fields
// with ldexp, then nearest-value search with ties to the even code.
struct Format {
  int ebits, mbits, bias;
  bool has_inf;     // IEEE-style all-ones exponent = inf/NaN
  bool e4m3fn;      // only code 0x7F (magnitude) is NaN
  uint32_t nbits() const { return 1 + ebits + mbits; }
};

double DecodeRef(const Format& f, uint32_t code, bool* is_nan, bool* is_inf) {
  uint32_t mag = code & ((1u << (f.nbits() - 1)) - 1);
  bool neg = code >> (f.nbits() - 1);
  uint32_t e = mag >> f.mbits, m = mag & ((1u << f.mbits) - 1);
  uint32_t emax = (1u << f.ebits) - 1;
  *is_nan = *is_inf = false;
  if (f.has_inf && e == emax) {
    *is_nan = m != 0;
    *is_inf = m == 0;
    return neg ? -INFINITY : INFINITY;
  }
  if (f.e4m3fn && e == emax && m == (1u << f.mbits) - 1) {
    *is_nan = true;
    return NAN;
  }
  double v = e == 0 ? std::ldexp(static_cast<double>(m), 1 - f.bias - f.mbits)
                    : std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -f.mbits), e - f.bias);
  return neg ? -v : v;
}

// Nearest-even encoding of x with saturation to the largest finite value
// (saturate = true) or overflow to inf by IEEE rounding (saturate = false).
uint32_t EncodeRef(const Format& f, double x, bool saturate) {
  uint32_t sign = std::signbit(x) ? (1u << (f.nbits() - 1)) : 0;
  double ax = std::fabs(x);
  uint32_t best = 0;
  double best_err = INFINITY, max_finite = 0;
  uint32_t max_code = 0;
  for (uint32_t c = 0; c < (1u << (f.nbits() - 1)); ++c) {
    bool nan, inf;
    double v = DecodeRef(f, c, &nan, &inf);
    if (nan || inf) continue;
    if (v > max_finite) { max_finite = v; max_code = c; }
    double err = std::fabs(v - ax);
    if (err < best_err || (err == best_err && (c & 1) == 0)) { best = c; best_err = err; }
  }
  if (ax > max_finite) {
    if (saturate) return sign | max_code;
    // IEEE: values at or beyond max + half ulp round to inf.
    bool n, i;
    double ulp = max_finite - DecodeRef(f, max_code - 1, &n, &i);
    if (ax >= max_finite + ulp / 2) return sign | (((1u << f.ebits) - 1) << f.mbits);
    return sign | max_code;
  }
  return sign | best;
}

std::vector<float> Samples(float scale, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v;
  std::uniform_real_distribution<float> u(-1, 1);
  std::uniform_int_distribution<int> ex(-30, 30);
  for (int i = 0; i < n; ++i) v.push_back(u(rng) * scale * std::ldexp(1.0f, ex(rng) / 3));
  for (float s : {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 1.5f, 2.5f, 3.5f}) v.push_back(s * scale);
  return v;
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(SizeOf(DType::kF32), 4u);
  EXPECT_EQ(SizeOf(DType::kBF16), 2u);
  EXPECT_EQ(SizeOf(DType::kF16), 2u);
  EXPECT_EQ(SizeOf(DType::kF8E4M3), 1u);
  EXPECT_EQ(SizeOf(DType::kF8E5M2), 1u);
  EXPECT_STREQ(DTypeName(DType::kF8E4M3), "fp8_e4m3");
}

TEST(DType, BF16RoundsToNearestEven) {
  Format f{8, 7, 127, true, false};
  // bf16 has 65536 codes; the reference search is too slow per sample, so use
  // the two neighbours of truncation instead (still independent of the code).
  for (float x : Samples(1.0f, 20000, 1)) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    uint32_t lo = u >> 16, hi = lo + 1;
    bool n, i;
    double vlo = DecodeRef(f, lo, &n, &i), vhi = DecodeRef(f, hi, &n, &i);
    double dl = std::fabs(x - vlo), dh = std::fabs(vhi - x);
    uint32_t expect = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
    ASSERT_EQ(F32ToBF16Bits(x), expect) << x;
  }
  EXPECT_EQ(F32ToBF16Bits(1.00390625f), 0x3f80);  // tie -> even (down)
  EXPECT_EQ(F32ToBF16Bits(1.01171875f), 0x3f82);  // tie -> even (up)
  EXPECT_TRUE(std::isnan(BF16BitsToF32(F32ToBF16Bits(NAN))));
  EXPECT_EQ(BF16BitsToF32(F32ToBF16Bits(INFINITY)), INFINITY);
  for (uint32_t c = 0; c < 65536; ++c) {
    float v = BF16BitsToF32(static_cast<uint16_t>(c));
    if (!std::isnan(v)) {
      ASSERT_EQ(F32ToBF16Bits(v), c);
    }
  }
}

TEST(DType, F16MatchesReference) {
  Format f{5, 10, 15, true, false};
  // Decode of every code matches the field reference.
  for (uint32_t c = 0; c < 65536; ++c) {
    bool nan, inf;
    double ref = DecodeRef(f, c, &nan, &inf);
    float v = F16BitsToF32(static_cast<uint16_t>(c));
    if (nan) { ASSERT_TRUE(std::isnan(v)); continue; }
    ASSERT_EQ(static_cast<double>(v), ref) << c;
    ASSERT_EQ(F32ToF16Bits(v), c);
  }
  // Rounding at midpoints between neighbours, including subnormals.
  for (uint32_t c = 0; c < 0x7bff; c += 7) {
    bool n, i;
    double a = DecodeRef(f, c, &n, &i), b = DecodeRef(f, c + 1, &n, &i);
    float mid = static_cast<float>((a + b) / 2);
    if (static_cast<double>(mid) != (a + b) / 2) continue;
    ASSERT_EQ(F32ToF16Bits(mid), (c & 1) ? c + 1 : c) << c;
  }
  EXPECT_EQ(F32ToF16Bits(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16Bits(65519.0f), 0x7bff);
  EXPECT_EQ(F32ToF16Bits(65520.0f), 0x7c00);
}

class Fp8Test : public ::testing::TestWithParam<bool> {};

TEST_P(Fp8Test, EncodeMatchesExhaustiveReference) {
  bool e4m3 = GetParam();
  Format f = e4m3 ? Format{4, 3, 7, false, true} : Format{5, 2, 15, true, false};
  auto enc = [&](float x) { return e4m3 ? F32ToE4M3Bits(x) : F32ToE5M2Bits(x); };
  auto dec = [&](uint8_t b) { return e4m3 ? E4M3BitsToF32(b) : E5M2BitsToF32(b); };
  for (uint32_t c = 0; c < 256; ++c) {
    bool nan, inf;
    double ref = DecodeRef(f, c, &nan, &inf);
    float v = dec(static_cast<uint8_t>(c));
    if (nan) { ASSERT_TRUE(std::isnan(v)) << c; continue; }
    ASSERT_EQ(static_cast<double>(v), ref) << c;
    ASSERT_EQ(enc(v), c) << c;
  }
  float maxv = e4m3 ? kE4M3Max : kE5M2Max;
  for (float x : Samples(maxv / 8, 5000, e4m3 ? 2 : 3)) {
    ASSERT_EQ(enc(x), EncodeRef(f, x, /*saturate=*/true)) << x;
  }
  EXPECT_EQ(dec(enc(1e9f)), maxv);
  EXPECT_EQ(dec(enc(-1e9f)), -maxv);
  EXPECT_TRUE(std::isnan(dec(enc(NAN))));
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8Test, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "e4m3" : "e5m2"; });

}  // namespace
}  // namespace gtp
