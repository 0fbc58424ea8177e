#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/kernels/cpu.h"
#include "core/kernels/testing/harness.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

TEST(CastBF16ToF32, RoundTripsEveryBF16Value) {
  std::vector<bf16> all;
  for (uint32_t b = 0; b < 65536; ++b) {
    if ((b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0) continue;  // NaN payloads may change
    all.push_back(bf16{static_cast<uint16_t>(b)});
  }
  std::vector<float> wide(all.size());
  std::vector<bf16> back(all.size());
  cpu::CastBF16ToF32(all.data(), wide.data(), all.size());
  cpu::CastF32ToBF16(wide.data(), back.data(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    // Widening is exact: the bf16 bits are the top half of the f32.
    ASSERT_EQ(FloatBits(wide[i]), static_cast<uint32_t>(all[i].bits) << 16) << i;
    ASSERT_EQ(back[i].bits, all[i].bits) << i;
  }
}

TEST(CastF32ToBF16, RoundsToNearestEven) {
  Rng rng(71);
  std::vector<float> x = rng.Normal(4096);
  for (size_t i = 0; i < x.size(); i += 3) x[i] *= std::ldexp(1.0f, static_cast<int>(i % 60) - 30);
  // Exact ties: halfway between two bf16 values, which round to the even one.
  x.push_back(1.0f + std::ldexp(1.0f, -8));      // → 1.0
  x.push_back(1.0f + 3 * std::ldexp(1.0f, -8));  // → 1 + 2⁻⁶
  x.push_back(-(1.0f + std::ldexp(1.0f, -8)));   // → −1.0
  std::vector<bf16> y(x.size());
  cpu::CastF32ToBF16(x.data(), y.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    // The two bf16 neighbours of x: truncation and one step away from zero.
    const uint32_t lo = FloatBits(x[i]) & 0xffff0000u, hi = lo + 0x10000u;
    const double dlo = std::fabs(static_cast<double>(BitsFloat(lo)) - x[i]);
    const double dhi = std::fabs(static_cast<double>(BitsFloat(hi)) - x[i]);
    const uint32_t expect = dlo < dhi ? lo : dhi < dlo ? hi : ((lo >> 16) & 1 ? hi : lo);
    ASSERT_EQ(static_cast<uint32_t>(y[i].bits) << 16, expect) << "x = " << x[i];
  }
  EXPECT_EQ(BF16BitsToF32(y[y.size() - 3].bits), 1.0f);
  EXPECT_EQ(BF16BitsToF32(y[y.size() - 2].bits), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(BF16BitsToF32(y[y.size() - 1].bits), -1.0f);
}

struct Fp8Format {
  DType fmt;
  float max;
  int mbits, bias;
  uint8_t max_code;
  const char* name;
};
const Fp8Format kFormats[] = {{DType::kF8E4M3, kE4M3Max, 3, 7, 0x7e, "e4m3"},
                              {DType::kF8E5M2, kE5M2Max, 2, 15, 0x7b, "e5m2"}};

// The test's own fp8 and E8M0 arithmetic, in double (not core/dtype.h's encoders).
// Magnitude of a non-negative finite code.
double RefDecode(const Fp8Format& f, uint8_t code) {
  const int e = code >> f.mbits, m = code & ((1 << f.mbits) - 1);
  return e == 0 ? std::ldexp(m, 1 - f.bias - f.mbits)
                : std::ldexp(1.0 + std::ldexp(m, -f.mbits), e - f.bias);
}
// Nearest finite code to v (ties to the even code), saturating at ±max.
uint8_t RefEncode(const Fp8Format& f, double v) {
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const double a = std::fabs(v);
  uint8_t best = 0;
  for (int c = 1; c <= f.max_code; ++c) {
    const double d = std::fabs(RefDecode(f, c) - a), db = std::fabs(RefDecode(f, best) - a);
    if (d < db || (d == db && c % 2 == 0)) best = static_cast<uint8_t>(c);
  }
  return sign | best;
}
double RefDequant(const Fp8Format& f, uint8_t code, int e) {
  const double m = RefDecode(f, code & 0x7f);
  return std::ldexp(code & 0x80 ? -m : m, e - 127);
}
// The smallest e in [0, 254] with amax ≤ fmt_max·2^(e − 127), found by
// counting up; 255 when some element is NaN or ±inf.
int RefExponent(const Fp8Format& f, const float* x, int64_t n) {
  double amax = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return 255;
    amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
  }
  int e = 0;
  while (e < 254 && amax > std::ldexp(static_cast<double>(f.max), e - 127)) ++e;
  return e;
}

// Blocks of very different magnitudes (one scale each must adapt), an
// all-zero second block when there is one, and a partial last block when n % 32 != 0.
std::vector<float> Fp8Inputs(Rng& rng, int64_t n, DType x_type) {
  std::vector<float> x = rng.Normal(n);
  std::vector<float> mag = rng.Uniform((n + 31) / 32, -6.0f, 6.0f);
  for (int64_t i = 0; i < n; ++i) x[i] *= std::exp2(mag[i / 32]);
  if (n > 64) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
  return x_type == DType::kBF16 ? RoundToBF16(x) : x;
}

// Runs QuantizeFp8Blockwise on x (as x_type), checking q and scales stay in bounds.
void Quantize(const std::vector<float>& x, DType x_type, DType fmt, std::vector<uint8_t>* q,
              std::vector<uint8_t>* scales) {
  const int64_t n = x.size(), nb = (n + kFp8BlockSize - 1) / kFp8BlockSize;
  std::vector<uint8_t> qbuf(n + 16, 0xa5), sbuf(nb + 16, 0xa5);
  std::vector<bf16> xb = ToBF16(x);
  const void* src = x_type == DType::kBF16 ? static_cast<const void*>(xb.data()) : x.data();
  cpu::QuantizeFp8Blockwise(src, x_type, qbuf.data(), sbuf.data(), n, fmt);
  for (int64_t i = n; i < n + 16; ++i) ASSERT_EQ(qbuf[i], 0xa5) << "q written past n";
  for (int64_t i = nb; i < nb + 16; ++i) ASSERT_EQ(sbuf[i], 0xa5) << "scales written past end";
  q->assign(qbuf.begin(), qbuf.begin() + n);
  scales->assign(sbuf.begin(), sbuf.begin() + nb);
}

// q and scales against the reference: each block's exponent, then each
// element's code from the exact quotient x / 2^(e − 127).
void ExpectReferenceCodes(const Fp8Format& f, const std::vector<float>& x,
                          const std::vector<uint8_t>& q, const std::vector<uint8_t>& scales) {
  const int64_t n = x.size();
  for (int64_t b = 0; b * 32 < n; ++b) {
    const int64_t lo = b * 32, hi = std::min<int64_t>(n, lo + 32);
    const int e = RefExponent(f, x.data() + lo, hi - lo);
    ASSERT_EQ(scales[b], e) << "block " << b;
    for (int64_t i = lo; i < hi; ++i) {
      const uint8_t code =
          e == 255 ? 0x7f : RefEncode(f, std::ldexp(static_cast<double>(x[i]), 127 - e));
      ASSERT_EQ(q[i], code) << "element " << i << " x=" << x[i] << " e=" << e;
    }
  }
}

TEST(QuantizeFp8Blockwise, MatchesDoublePrecisionReference) {
  Rng rng(72);
  for (const Fp8Format& f : kFormats) {
    for (DType x_type : {DType::kF32, DType::kBF16}) {
      for (int64_t n : {1, 31, 32, 33, 257}) {
        SCOPED_TRACE(absl::StrCat(f.name, " x=", DTypeName(x_type), " n=", n));
        std::vector<float> x = Fp8Inputs(rng, n, x_type);
        std::vector<uint8_t> q, scales;
        Quantize(x, x_type, f.fmt, &q, &scales);
        ExpectReferenceCodes(f, x, q, scales);
      }
    }
  }
}

TEST(QuantizeFp8Blockwise, ZeroBlockAndPartialLastBlock) {
  Rng rng(73);
  for (const Fp8Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    std::vector<float> x = rng.Uniform(32 + 32 + 5);
    std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
    x[40] = -0.0f;
    x[66] = -3.0f;  // the largest magnitude of the 5-element tail block
    std::vector<uint8_t> q, scales;
    Quantize(x, DType::kF32, f.fmt, &q, &scales);
    ASSERT_EQ(scales.size(), 3u);
    EXPECT_EQ(scales[1], 0);  // all zero: the smallest scale, 2^-127
    for (int i = 32; i < 64; ++i) EXPECT_EQ(q[i], i == 40 ? 0x80 : 0) << i;
    // 3 ≤ fmt_max·2^(e − 127) first at e = 127 − 7 (e4m3: 3.5) or 127 − 14 (e5m2: 3.5).
    EXPECT_EQ(scales[2], 127 + (f.fmt == DType::kF8E4M3 ? -7 : -14));
    EXPECT_EQ(q[66], RefEncode(f, -3.0 * std::ldexp(1.0, 127 - scales[2])));
    ExpectReferenceCodes(f, x, q, scales);
  }
}

// The exponent steps exactly where amax crosses fmt_max·2^k, and the largest
// element of a block never saturates past fmt_max.
TEST(QuantizeFp8Blockwise, ExponentStepsAtTheSaturationBoundary) {
  for (const Fp8Format& f : kFormats) {
    for (int k : {-120, -20, -1, 0, 1, 20, 100}) {
      SCOPED_TRACE(absl::StrCat(f.name, " k=", k));
      const float edge = std::ldexp(f.max, k);
      const float below = std::nextafter(edge, 0.0f), above = std::nextafter(edge, 2 * edge);
      std::vector<float> x;
      for (float amax : {edge, below, above}) {
        std::vector<float> block(32, 0.0f);
        for (int i = 0; i < 32; ++i) block[i] = amax * (i + 1) / 32 * (i % 2 ? -1 : 1);
        block[31] = amax;
        x.insert(x.end(), block.begin(), block.end());
      }
      std::vector<uint8_t> q, scales;
      Quantize(x, DType::kF32, f.fmt, &q, &scales);
      EXPECT_EQ(scales[0], 127 + k);
      EXPECT_EQ(scales[1], 127 + k);
      EXPECT_EQ(scales[2], 127 + k + 1);
      EXPECT_EQ(q[31], f.max_code);  // exactly fmt_max
      EXPECT_EQ(q[63], f.max_code);  // one f32 ulp below: rounds to fmt_max
      EXPECT_EQ(q[95], RefEncode(f, std::ldexp(static_cast<double>(above), -k - 1)));
      EXPECT_LT(q[95], f.max_code);  // just over fmt_max/2
      ExpectReferenceCodes(f, x, q, scales);
    }
  }
}

// The exponent range ends: amax at FLT_MAX and in f32's subnormal range.
TEST(QuantizeFp8Blockwise, ExtremeMagnitudes) {
  for (const Fp8Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    const float kMax = std::numeric_limits<float>::max(), kTiny = 1e-40f;
    std::vector<float> x = {kMax, -kMax / 3, 1.0f};
    x.resize(32, 0.0f);
    x.push_back(kTiny);
    x.push_back(-kTiny);
    std::vector<uint8_t> q, scales;
    Quantize(x, DType::kF32, f.fmt, &q, &scales);
    EXPECT_EQ(scales[1], 0);  // clamped: 2^-127 is the smallest scale
    ExpectReferenceCodes(f, x, q, scales);
  }
}

// A NaN or ±inf makes its block's scale NaN and every code of that block NaN;
// other blocks are unaffected; the whole block dequantises to NaN.
TEST(QuantizeFp8Blockwise, NonFiniteMakesTheBlockNaN) {
  Rng rng(75);
  for (const Fp8Format& f : kFormats) {
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
          -std::numeric_limits<float>::infinity()}) {
      for (DType x_type : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(absl::StrCat(f.name, " ", bad, " x=", DTypeName(x_type)));
        std::vector<float> x = rng.Normal(32 * 3 + 7);
        x[32 + 5] = bad;
        x[96 + 6] = bad;  // in the partial last block
        if (x_type == DType::kBF16) x = RoundToBF16(x);
        std::vector<uint8_t> q, scales;
        Quantize(x, x_type, f.fmt, &q, &scales);
        EXPECT_EQ(scales[1], kE8M0NaN);
        EXPECT_EQ(scales[3], kE8M0NaN);
        EXPECT_NE(scales[0], kE8M0NaN);
        EXPECT_NE(scales[2], kE8M0NaN);
        ExpectReferenceCodes(f, x, q, scales);
        std::vector<float> y(x.size());
        cpu::DequantizeFp8Blockwise(q.data(), scales.data(), y.data(), DType::kF32, y.size(),
                                    f.fmt);
        for (size_t i = 0; i < y.size(); ++i) {
          const bool nan_block = i / 32 == 1 || i / 32 == 3;
          ASSERT_EQ(std::isnan(y[i]), nan_block) << i;
        }
      }
    }
  }
}

TEST(DequantizeFp8Blockwise, IsTheCodeTimesThePowerOfTwoExactly) {
  Rng rng(74);
  for (const Fp8Format& f : kFormats) {
    for (int64_t n : {1, 33, 257, 4096}) {
      SCOPED_TRACE(absl::StrCat(f.name, " n=", n));
      std::vector<float> x = Fp8Inputs(rng, n, DType::kF32);
      std::vector<uint8_t> q, scales;
      Quantize(x, DType::kF32, f.fmt, &q, &scales);
      std::vector<float> y = NaNs(n);
      cpu::DequantizeFp8Blockwise(q.data(), scales.data(), y.data(), DType::kF32, n, f.fmt);
      // Exact: y is the code's value times 2^(e − 127), no rounding. In units
      // of the scale a normal value is off by at most half an ulp, 2^-(mbits+1)
      // of itself; a subnormal one by half the subnormal step.
      const double half_subnormal = std::ldexp(1.0, -f.bias - f.mbits);
      for (int64_t i = 0; i < n; ++i) {
        const int e = scales[i / 32];
        ASSERT_EQ(static_cast<double>(y[i]), RefDequant(f, q[i], e)) << "element " << i;
        const double s = std::ldexp(1.0, e - 127), v = std::fabs(x[i]) / s;
        const double bound = s * std::max(std::ldexp(v, -(f.mbits + 1)), half_subnormal);
        ASSERT_LE(std::fabs(static_cast<double>(y[i]) - x[i]), bound * (1 + 1e-6) + 1e-30)
            << "element " << i << " x=" << x[i] << " y=" << y[i] << " scale=" << s;
      }
      EXPECT_TRUE(RelClose(y, ToDouble(x), std::ldexp(1.0, -(f.mbits + 1))));

      // bf16 output: the f32 result rounded once.
      std::vector<bf16> yb(n);
      cpu::DequantizeFp8Blockwise(q.data(), scales.data(), yb.data(), DType::kBF16, n, f.fmt);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(yb[i].bits, F32ToBF16Bits(y[i])) << i;
    }
  }
}

// Every (code, exponent) pair, including e = 0 (a subnormal scale) whose
// products are f32 subnormals: still exact.
TEST(DequantizeFp8Blockwise, ExactForEveryCodeAndExponent) {
  for (const Fp8Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    std::vector<uint8_t> q, scales;
    for (int e = 0; e < 255; ++e) {
      for (int c = 0; c < 256; ++c) {
        if ((c & 0x7f) > f.max_code) continue;  // NaN/inf codes
        q.push_back(static_cast<uint8_t>(c));
        if (q.size() % 32 == 1) scales.push_back(static_cast<uint8_t>(e));
      }
      q.resize(scales.size() * 32, 0);  // one exponent per whole block
    }
    std::vector<float> y(q.size());
    cpu::DequantizeFp8Blockwise(q.data(), scales.data(), y.data(), DType::kF32, q.size(), f.fmt);
    for (size_t i = 0; i < q.size(); ++i) {
      const double want = RefDequant(f, q[i], scales[i / 32]);
      if (std::fabs(want) > std::numeric_limits<float>::max()) {
        ASSERT_TRUE(std::isinf(y[i])) << i;
      } else {
        ASSERT_EQ(static_cast<double>(y[i]), want) << "code " << +q[i] << " e " << +scales[i / 32];
      }
    }
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
