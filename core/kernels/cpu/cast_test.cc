#include <cmath>
#include <cstring>
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
              std::vector<float>* scales) {
  const int64_t n = x.size(), nb = (n + kFp8BlockSize - 1) / kFp8BlockSize;
  std::vector<uint8_t> qbuf(n + 16, 0xa5);
  GuardedBuffer sbuf(nb);
  std::vector<bf16> xb = ToBF16(x);
  const void* src = x_type == DType::kBF16 ? static_cast<const void*>(xb.data()) : x.data();
  cpu::QuantizeFp8Blockwise(src, x_type, qbuf.data(), sbuf.data(), n, fmt);
  for (int64_t i = n; i < n + 16; ++i) ASSERT_EQ(qbuf[i], 0xa5) << "q written past n";
  EXPECT_TRUE(sbuf.GuardIntact());
  q->assign(qbuf.begin(), qbuf.begin() + n);
  scales->assign(sbuf.data(), sbuf.data() + nb);
}

TEST(QuantizeFp8Blockwise, MatchesPerElementReference) {
  Rng rng(72);
  for (const Fp8Format& f : kFormats) {
    for (DType x_type : {DType::kF32, DType::kBF16}) {
      for (int64_t n : {1, 31, 32, 33, 257}) {
        SCOPED_TRACE(absl::StrCat(f.name, " x=", DTypeName(x_type), " n=", n));
        std::vector<float> x = Fp8Inputs(rng, n, x_type);
        std::vector<uint8_t> q;
        std::vector<float> scales;
        Quantize(x, x_type, f.fmt, &q, &scales);
        for (int64_t b = 0; b * 32 < n; ++b) {
          float amax = 0;
          for (int64_t i = b * 32; i < std::min<int64_t>(n, b * 32 + 32); ++i) {
            amax = std::max(amax, std::fabs(x[i]));
          }
          const float scale = amax == 0 ? 1.0f : amax / f.max;
          ASSERT_EQ(FloatBits(scales[b]), FloatBits(scale)) << "block " << b;
          for (int64_t i = b * 32; i < std::min<int64_t>(n, b * 32 + 32); ++i) {
            const float v = x[i] / scale;
            const uint8_t code = f.fmt == DType::kF8E4M3 ? F32ToE4M3Bits(v) : F32ToE5M2Bits(v);
            ASSERT_EQ(q[i], code) << "element " << i << " x=" << x[i];
          }
        }
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
    x[66] = -3.0f;  // the largest magnitude of the 5-element tail block
    std::vector<uint8_t> q;
    std::vector<float> scales;
    Quantize(x, DType::kF32, f.fmt, &q, &scales);
    ASSERT_EQ(scales.size(), 3u);
    EXPECT_EQ(scales[1], 1.0f);
    for (int i = 32; i < 64; ++i) EXPECT_EQ(q[i], 0) << i;
    EXPECT_FLOAT_EQ(scales[2], 3.0f / f.max);
    EXPECT_EQ(q[66], 0x80 | f.max_code);  // −amax maps to −fmt_max
  }
}

TEST(DequantizeFp8Blockwise, ErrorWithinHalfUlpOfBlockScale) {
  Rng rng(74);
  for (const Fp8Format& f : kFormats) {
    for (int64_t n : {1, 33, 257, 4096}) {
      SCOPED_TRACE(absl::StrCat(f.name, " n=", n));
      std::vector<float> x = Fp8Inputs(rng, n, DType::kF32);
      std::vector<uint8_t> q;
      std::vector<float> scales;
      Quantize(x, DType::kF32, f.fmt, &q, &scales);
      std::vector<float> y = NaNs(n);
      cpu::DequantizeFp8Blockwise(q.data(), scales.data(), y.data(), DType::kF32, n, f.fmt);
      // In units of the block scale: a normal value is off by at most half an
      // ulp, 2^-(mbits+1) of itself; a subnormal one by half the subnormal step.
      const double half_subnormal = std::ldexp(1.0, -f.bias - f.mbits);
      for (int64_t i = 0; i < n; ++i) {
        const double s = scales[i / 32], v = std::fabs(x[i]) / s;
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

}  // namespace
}  // namespace gtp::kernels::testing
