// The project's e4m3 codec (core/dtype.h F32ToE4M3Bits / E4M3BitsToF32, the
// one every fp8 path uses) against e4m3_reference.h, written from the OCP
// E4M3FN definition in double: every one of the 256 codes, every rounding
// boundary between neighbouring codes (ties to even, the subnormals,
// saturation at 448), NaN, and a sweep over f32 bit patterns. Then the scalar
// block-scaling rules of block_scale.h. Comparisons are exact (codes are
// integers; e4m3 values are exact in f32 and double).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/dtype.h"
#include "core/kernels/fp8/block_scale.h"
#include "core/kernels/fp8/e4m3_reference.h"
#include "gtest/gtest.h"

namespace gtp::kernels::fp8 {
namespace {

using reference::E4M3Decode;
using reference::E4M3Encode;
using reference::E4M3IsNaN;

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(E4M3, EveryCodeDecodesToItsDefinitionAndEncodesBack) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    const float v = E4M3BitsToF32(code);
    if (E4M3IsNaN(code)) {
      ++nans;
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    ASSERT_EQ(static_cast<double>(v), E4M3Decode(code)) << "code " << c;
    ASSERT_EQ(std::signbit(v), (c & 0x80) != 0) << c;  // 0x80 is −0
    ASSERT_EQ(F32ToE4M3Bits(v), code) << "code " << c;
  }
  EXPECT_EQ(nans, 2);  // 0x7F and 0xFF only: no inf, every other pattern finite
  // Landmarks of the format, written out.
  EXPECT_EQ(E4M3BitsToF32(0x7e), 448.0f);
  EXPECT_EQ(E4M3BitsToF32(0xfe), -448.0f);
  EXPECT_EQ(E4M3BitsToF32(0x38), 1.0f);
  EXPECT_EQ(E4M3BitsToF32(0x08), std::ldexp(1.0f, -6));      // smallest normal
  EXPECT_EQ(E4M3BitsToF32(0x07), 7 * std::ldexp(1.0f, -9));  // largest subnormal
  EXPECT_EQ(E4M3BitsToF32(0x01), std::ldexp(1.0f, -9));      // smallest subnormal
  EXPECT_EQ(E4M3BitsToF32(0x77), 240.0f);
}

// For every pair of neighbouring finite magnitudes v_c < v_{c+1}: their
// midpoint (exact in f32: e4m3 has 4 significant bits) goes to the even
// code, the f32 just below it to c, the f32 just above it to c + 1; the same
// with the sign set. That is every decision the encoder makes.
TEST(E4M3, RoundsToNearestWithTiesToEvenAtEveryBoundary) {
  int ties_up = 0, ties_down = 0;
  for (int c = 0; c < 0x7e; ++c) {
    const double lo = E4M3Decode(static_cast<uint8_t>(c));
    const double hi = E4M3Decode(static_cast<uint8_t>(c + 1));
    const float mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2) << c;
    const uint8_t even = (c & 1) ? c + 1 : c;
    (even == c ? ties_down : ties_up)++;
    for (const float s : {1.0f, -1.0f}) {
      const uint8_t sign = s < 0 ? 0x80 : 0;
      ASSERT_EQ(F32ToE4M3Bits(s * mid), sign | even) << "tie between codes " << c << ", " << c + 1;
      ASSERT_EQ(F32ToE4M3Bits(s * std::nextafter(mid, 0.0f)), sign | c) << c;
      ASSERT_EQ(F32ToE4M3Bits(s * std::nextafter(mid, kInf)), sign | (c + 1)) << c;
      ASSERT_EQ(E4M3Encode(s * mid), sign | even) << c;  // the reference agrees
    }
  }
  EXPECT_EQ(ties_up, 63);
  EXPECT_EQ(ties_down, 63);
  // Below the smallest subnormal 2⁻⁹: its half 2⁻¹⁰ ties to 0 (even); above rounds up.
  EXPECT_EQ(F32ToE4M3Bits(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(F32ToE4M3Bits(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(F32ToE4M3Bits(-std::ldexp(1.0f, -11)), 0x80);  // −0: the sign stays
  EXPECT_EQ(F32ToE4M3Bits(std::numeric_limits<float>::denorm_min()), 0x00);
  // The subnormal/normal seam: 15·2⁻¹⁰ is the midpoint of 0x07 and 0x08; 0x08 is even.
  EXPECT_EQ(F32ToE4M3Bits(15 * std::ldexp(1.0f, -10)), 0x08);
}

TEST(E4M3, SaturatesAt448AndNeverMakesNaNFromANumber) {
  // 464 would be the midpoint between 448 and 480 if e4m3 had 480; E4M3FN
  // saturates (the OCP "satfinite" conversion) instead of producing NaN.
  for (const float x : {448.0f, std::nextafter(448.0f, kInf), 464.0f, 465.0f, 1e6f, 1e30f,
                        std::numeric_limits<float>::max(), kInf}) {
    EXPECT_EQ(F32ToE4M3Bits(x), 0x7e) << x;
    EXPECT_EQ(F32ToE4M3Bits(-x), 0xfe) << x;
    EXPECT_EQ(E4M3Encode(x), 0x7e) << x;
  }
  // 432 = midpoint of 416 (0x7D) and 448 (0x7E): ties to the even 0x7E.
  EXPECT_EQ(F32ToE4M3Bits(432.0f), 0x7e);
  EXPECT_EQ(F32ToE4M3Bits(std::nextafter(432.0f, 0.0f)), 0x7d);
}

TEST(E4M3, NaNEncodesTo0x7FWhateverItsSignAndPayload) {
  float neg_nan = -std::numeric_limits<float>::quiet_NaN();
  uint32_t bits = 0x7f800001u;  // a signalling NaN
  float snan;
  std::memcpy(&snan, &bits, 4);
  for (const float x : {std::numeric_limits<float>::quiet_NaN(), neg_nan, snan}) {
    EXPECT_EQ(F32ToE4M3Bits(x), 0x7f);
    EXPECT_TRUE(std::isnan(E4M3BitsToF32(F32ToE4M3Bits(x))));
  }
}

// Every 4099th f32 bit pattern from +0 up to 1024 (all exponents, mantissas
// of every residue), and its negation, against the reference.
TEST(E4M3, MatchesTheReferenceOverASweepOfF32) {
  const uint32_t top = 0x44800000u;  // 1024.0f
  int64_t checked = 0;
  for (uint32_t b = 0; b <= top; b += 4099) {
    float x;
    std::memcpy(&x, &b, 4);
    ASSERT_EQ(F32ToE4M3Bits(x), E4M3Encode(x)) << x;
    ASSERT_EQ(F32ToE4M3Bits(-x), E4M3Encode(-x)) << -x;
    ++checked;
  }
  EXPECT_GT(checked, 250000);
}

// The scalar rules of block_scale.h.
TEST(BlockScale, ScaleRule) {
  auto bits = [](float f) { return FloatBits(f) & 0x7fffffffu; };
  EXPECT_EQ(Fp8BlockScale(0), 1.0f);                            // an all-zero block
  EXPECT_EQ(Fp8BlockScale(bits(448.0f)), 1.0f);                 // exact
  EXPECT_EQ(Fp8BlockScale(bits(7.0f)), 7.0f / 448.0f);          // one f32 division
  EXPECT_EQ(Fp8BlockScale(bits(1.0f)), 0.002232142857142857f);  // 1/448 rounded to f32
  EXPECT_TRUE(std::isnan(Fp8BlockScale(bits(kInf))));
  EXPECT_TRUE(std::isnan(Fp8BlockScale(0x7fc00000u)));
  // amax below 448·2⁻¹²⁶: the scale stops at FLT_MIN (no zero, no subnormal scale).
  EXPECT_EQ(Fp8BlockScale(bits(1e-40f)), std::numeric_limits<float>::min());
  EXPECT_EQ(Fp8BlockScale(1), std::numeric_limits<float>::min());  // amax = denorm_min
  EXPECT_EQ(kMinBlockScale, std::numeric_limits<float>::min());
  const float edge = 448.0f * std::numeric_limits<float>::min();  // exact: 448·2⁻¹²⁶
  EXPECT_EQ(Fp8BlockScale(bits(edge)), std::numeric_limits<float>::min());
  EXPECT_EQ(Fp8BlockScale(bits(2 * edge)), 2 * std::numeric_limits<float>::min());
  // Codes: x / scale then e4m3; a NaN scale gives the NaN code.
  EXPECT_EQ(Fp8BlockEncode(7.0f, 7.0f / 448.0f), 0x7e);
  EXPECT_EQ(Fp8BlockEncode(-7.0f, 7.0f / 448.0f), 0xfe);
  EXPECT_EQ(Fp8BlockEncode(1.0f, 1.0f), 0x38);
  EXPECT_EQ(Fp8BlockEncode(1.0f, std::nanf("")), kE4M3NaNCode);
  EXPECT_EQ(Fp8BlockDecode(0x7e, 0.5f), 224.0f);
  EXPECT_TRUE(std::isnan(Fp8BlockDecode(0x38, std::nanf(""))));
  EXPECT_EQ(Fp8NumBlocks(0), 0);
  EXPECT_EQ(Fp8NumBlocks(128), 1);
  EXPECT_EQ(Fp8NumBlocks(129), 2);
}

// Fp8Quotient (the CUDA quantisers' division by a block's scale) is x / s
// bit for bit wherever s >= kFp8FastDivMinScale, |x| >= 2^-100 and x / s is
// normal, and gives the same e4m3 code (±0) otherwise. Every finite bf16 x
// against the scales of 518 bf16 amaxes spread over the whole range and over
// every mantissa (every 63rd positive finite bf16), then 2^21 random f32
// (x, amax) pairs with log-uniform magnitudes (the f32 inputs' path), then
// 2^20 pairs whose quotient lies next to a rounding midpoint.
TEST(BlockScale, QuotientByTheReciprocalIsTheDivision) {
  int64_t checked = 0, below = 0;
  auto check = [&](float x, float s) {
    if (!(s >= kFp8FastDivMinScale)) return;
    const float want = x / s, got = Fp8Quotient(x, s, 1.0f / s);
    ++checked;
    if (std::fabs(x) >= 0x1p-100f && std::fabs(want) >= 0x1p-126f) {
      ASSERT_EQ(FloatBits(got), FloatBits(want)) << x << " / " << s;
    } else {
      ++below;
      ASSERT_EQ(F32ToE4M3Bits(got), F32ToE4M3Bits(want)) << x << " / " << s;
    }
  };
  // Positive finite bf16 amax; the step 63 is coprime to 128, so the amaxes
  // (and their scales) take every bf16 mantissa.
  for (uint32_t a = 1; a < 0x7f80u; a += 63) {
    const float amax = BitsFloat(a << 16);
    const float s = Fp8BlockScale(FloatBits(amax));
    for (uint32_t b = 0; b < 0x10000u; ++b) {
      const float x = BitsFloat(b << 16);
      if (std::isfinite(x) && std::fabs(x) <= amax) check(x, s);
    }
  }
  uint64_t st = 0x243F6A8885A308D3ull;
  auto next = [&] {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(st >> 32);
  };
  for (int i = 0; i < (1 << 21); ++i) {
    const float amax =
        std::ldexp(1.0f + (next() >> 9) * 0x1p-23f, static_cast<int>(next() % 198) - 70);
    const float x = (next() & 1 ? -amax : amax) *
                    std::ldexp(1.0f + (next() >> 9) * 0x1p-23f, -static_cast<int>(next() % 40) - 1);
    check(x, Fp8BlockScale(FloatBits(amax) & 0x7fffffffu));
  }
  // Quotients next to a rounding midpoint: x = RN(s·m) for m halfway
  // between two floats, so x/s lies within a few ulp of m (where a wrong
  // correction step would round the other way).
  for (int i = 0; i < (1 << 20); ++i) {
    const float s = std::ldexp(1.0f + (next() >> 9) * 0x1p-23f, static_cast<int>(next() % 60) - 30);
    const double m = std::ldexp(1.0 + ((next() >> 9) + 0.5) * 0x1p-23, static_cast<int>(next() % 20) - 10);
    check(static_cast<float>(s * m), s);
  }
  EXPECT_GT(checked, 10000000);
  EXPECT_GT(below, 0);  // the tiny-quotient branch was reached
  EXPECT_EQ(FloatBits(Fp8Quotient(-0.0f, 0.5f, 2.0f)), FloatBits(-0.0f));  // −0 stays −0
}

}  // namespace
}  // namespace gtp::kernels::fp8
