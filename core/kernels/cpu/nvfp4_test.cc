// Tests of the NVFP4 wire codec (kernels.h; cpu/nvfp4.cc, ops::EncodeNvfp4 /
// DecodeNvfp4): the e2m1 codec of core/dtype.h against the test's own
// nearest-value search, the wire layout byte by byte, and round trips
// against an independent double-precision quantiser written here (its own
// e4m3 and e2m1 searches; f32 operations emulated as a double operation
// rounded once to f32, which is the correctly rounded f32 result for one
// +, ×, ÷ of f32 operands) within kernels.h's error bound, which a wrong
// block scale must break.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/allocator.h"
#include "core/kernels/cpu.h"
#include "core/kernels/ops.h"
#include "core/kernels/testing/harness.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr int kB = kNvfp4BlockSize;

// ---- The test's own arithmetic (never core/dtype.h's or kernels.h's) ----------

// e2m1 magnitudes by code.
constexpr double kE2M1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

// Nearest e2m1 code to v, ties to the even code, saturating at ±6; NaN → 0x7.
uint8_t RefE2M1(double v) {
  if (std::isnan(v)) return 0x7;
  const uint8_t sign = std::signbit(v) ? 0x8 : 0;
  const double a = std::fabs(v);
  if (a >= 6) return sign | 0x7;  // (for huge a, |a − 4| and |a − 6| round alike)
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    const double d = std::fabs(kE2M1[c] - a), db = std::fabs(kE2M1[best] - a);
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return static_cast<uint8_t>(sign | best);
}
double RefE2M1Value(uint8_t c) { return (c & 0x8 ? -1 : 1) * kE2M1[c & 0x7]; }

// e4m3fn magnitude of a code 0..0x7E.
double RefE4M3Value(int c) {
  const int e = c >> 3, m = c & 7;
  return e == 0 ? std::ldexp(m, -9) : std::ldexp(1 + m / 8.0, e - 7);
}
// Nearest e4m3 code to t ≥ 0, ties to even, saturating at 448; NaN → 0x7F.
uint8_t RefE4M3(double t) {
  if (std::isnan(t)) return 0x7f;
  if (t >= 448) return 0x7e;
  int best = 0;
  for (int c = 1; c <= 0x7e; ++c) {
    const double d = std::fabs(RefE4M3Value(c) - t), db = std::fabs(RefE4M3Value(best) - t);
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return static_cast<uint8_t>(best);
}

// One f32 operation: the exact (or double-rounded, which is innocuous for
// one +, ×, ÷ of f32 operands) double result rounded once to f32.
float F32(double v) { return static_cast<float>(v); }

// bf16 nearest even of an f32, from its two bf16 neighbours.
float RefBF16(float v) {
  if (std::isnan(v)) return v;
  uint32_t u;
  std::memcpy(&u, &v, 4);
  const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
  float flo, fhi;
  std::memcpy(&flo, &lo, 4);
  std::memcpy(&fhi, &hi, 4);
  const double dlo = std::fabs(static_cast<double>(flo) - v);
  const double dhi = std::fabs(static_cast<double>(fhi) - v);
  return dlo < dhi ? flo : dhi < dlo ? fhi : ((lo >> 16) & 1 ? fhi : flo);
}

// The reference quantiser: the wire of x (values already as the input dtype
// holds them), its tensor scale g and block amaxes (for the bound).
struct RefWire {
  std::vector<uint8_t> bytes;
  double g = 0;
  std::vector<double> block_amax;
};

RefWire RefEncode(const std::vector<float>& x) {
  const int64_t n = x.size(), nb = (n + kB - 1) / kB;
  RefWire r;
  double amax = 0;
  bool finite = true;
  for (float v : x) {
    finite = finite && std::isfinite(v);
    amax = std::max(amax, std::fabs(static_cast<double>(v)));
  }
  float g = !finite ? kNaN : amax == 0 ? 1.0f : F32(amax / 2688.0);
  if (finite && g < std::numeric_limits<float>::min()) g = std::numeric_limits<float>::min();
  r.g = g;
  const int64_t code_bytes = (n + 1) / 2;
  // Layout written out by hand here, not through Nvfp4WireBytes.
  const int64_t used = 4 + code_bytes + nb, total = (used + 15) / 16 * 16;
  r.bytes.assign(total, 0);
  std::memcpy(r.bytes.data(), &g, 4);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t lo = b * kB, hi = std::min(n, lo + kB);
    double ab = 0;
    for (int64_t i = lo; i < hi; ++i) ab = std::max(ab, std::fabs(static_cast<double>(x[i])));
    r.block_amax.push_back(ab);
    const uint8_t s = RefE4M3(F32(F32(ab / 6.0) / g));
    r.bytes[4 + code_bytes + b] = s;
    const float d = s == 0x7f ? kNaN : F32(RefE4M3Value(s) * g);
    for (int64_t i = lo; i < hi; ++i) {
      const uint8_t c = d == 0 ? 0 : RefE2M1(F32(x[i] / static_cast<double>(d)));
      r.bytes[4 + i / 2] |= static_cast<uint8_t>(c << (4 * (i & 1)));
    }
  }
  return r;
}

// Decoded values of a wire (f32, or bf16 widened), by the reference rules.
std::vector<float> RefDecode(const std::vector<uint8_t>& wire, int64_t n, bool bf16_out) {
  float g;
  std::memcpy(&g, wire.data(), 4);
  const int64_t scales_at = 4 + (n + 1) / 2;
  std::vector<float> y(n);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t s = wire[scales_at + i / kB];
    const uint8_t c = (wire[4 + i / 2] >> (4 * (i & 1))) & 0xf;
    const float d = (s & 0x7f) == 0x7f || std::isnan(g)
                        ? kNaN
                        : F32((s & 0x80 ? -1 : 1) * RefE4M3Value(s & 0x7f) * g);
    const float v = std::isnan(d) ? kNaN : F32(RefE2M1Value(c) * d);
    y[i] = bf16_out ? RefBF16(v) : v;
  }
  return y;
}

// kernels.h's per-element bound (bf16 outputs add their rounding).
double Bound(double ax, double block_amax, double g, bool bf16_out) {
  const double b = kNvfp4RelativeError * ax + kNvfp4BlockFloor * block_amax + kNvfp4ScaleFloor * g;
  return bf16_out ? b * (1 + 0x1p-9) + 0x1p-9 * ax : b;
}

struct ErrorStats {
  int64_t violations = 0;
  int64_t first_violation = -1;
  double worst_over_bound = 0;  // max |y − x| / bound
  double err2 = 0, x2 = 0;      // Σ (y − x)², Σ x²
  double rel_rms() const { return x2 > 0 ? std::sqrt(err2 / x2) : std::sqrt(err2); }
};

ErrorStats Measure(const std::vector<float>& x, const std::vector<float>& y, const RefWire& ref,
                   bool bf16_out, int64_t lo = 0, int64_t hi = -1) {
  if (hi < 0) hi = x.size();
  ErrorStats s;
  for (int64_t i = lo; i < hi; ++i) {
    const double e = std::fabs(static_cast<double>(y[i]) - x[i]);
    const double b = Bound(std::fabs(x[i]), ref.block_amax[i / kB], ref.g, bf16_out);
    s.err2 += e * e;
    s.x2 += static_cast<double>(x[i]) * x[i];
    s.worst_over_bound = std::max(s.worst_over_bound, e / b);
    if (!(e <= b)) {
      if (s.violations++ == 0) s.first_violation = i;
    }
  }
  return s;
}

// ---- Running the code under test -------------------------------------------------

// x (f32 values, exactly representable in x_type) stored as x_type.
std::vector<uint8_t> Store(const std::vector<float>& x, DType t) { return StoreAs(x, t); }

// cpu::EncodeNvfp4 into a buffer with a guard zone that must stay untouched.
std::vector<uint8_t> Encode(const std::vector<float>& x, DType x_type) {
  const int64_t n = x.size(), bytes = Nvfp4WireBytes(n);
  const std::vector<uint8_t> xs = Store(x, x_type);
  std::vector<uint8_t> wire(bytes + 32, 0xa5);
  cpu::EncodeNvfp4(xs.data(), x_type, wire.data(), n);
  for (int64_t i = bytes; i < bytes + 32; ++i) EXPECT_EQ(wire[i], 0xa5) << "written past the wire";
  wire.resize(bytes);
  return wire;
}

std::vector<float> Decode(const std::vector<uint8_t>& wire, int64_t n, DType y_type) {
  std::vector<uint8_t> y(n * SizeOf(y_type) + 32, 0xa5);
  cpu::DecodeNvfp4(wire.data(), y.data(), y_type, n);
  for (size_t i = n * SizeOf(y_type); i < y.size(); ++i) EXPECT_EQ(y[i], 0xa5) << "written past y";
  y.resize(n * SizeOf(y_type));
  return LoadAs(y, y_type);
}

::testing::AssertionResult SameFloats(const std::vector<float>& got,
                                      const std::vector<float>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < got.size(); ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    if (!both_nan && std::memcmp(&got[i], &want[i], 4) != 0) {
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << got[i] << ", want " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult SameBytes(const std::vector<uint8_t>& got,
                                     const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return ::testing::AssertionFailure() << "byte " << i << " of " << got.size() << ": got 0x"
                                           << std::hex << +got[i] << ", want 0x" << +want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Values over many binades: blocks scaled by 2^U(−14, 4) (e4m3 covers about
// 2^18 between the largest block scale and the smallest nonzero one, so the
// smallest of these get subnormal scale codes), blocks whose elements spread
// over 2^−20..1 of their amax, all-zero blocks, blocks 2⁻⁶⁰ below the rest
// (scale code 0: decoded as zeros), signed zeros.
std::vector<float> Spanning(Rng& rng, int64_t n, DType x_type) {
  std::vector<float> x = rng.Normal(n);
  const std::vector<float> mag = rng.Uniform((n + kB - 1) / kB, -14.0f, 4.0f);
  const std::vector<float> wide = rng.Uniform(n, -20.0f, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t b = i / kB;
    x[i] = std::ldexp(x[i], static_cast<int>(mag[b]));
    if (b % 7 == 3) x[i] = std::ldexp(x[i], static_cast<int>(wide[i]));
    if (b % 7 == 5) x[i] = 0.0f;
    if (b % 7 == 6) x[i] = std::ldexp(x[i], -60);  // far below the tensor amax
    if (b % 11 == 1) x[i] = (i % 3 == 0 ? -0.0f : 0.0f);
  }
  return x_type == DType::kBF16 ? RoundToBF16(x) : x;
}

// ---- e2m1 ------------------------------------------------------------------------

TEST(E2M1, EveryCodeDecodes) {
  for (int c = 0; c < 16; ++c) {
    const float v = E2M1BitsToF32(static_cast<uint8_t>(c));
    EXPECT_EQ(v, RefE2M1Value(static_cast<uint8_t>(c))) << c;
    EXPECT_EQ(std::signbit(v), c >= 8) << c;  // 0x8 is −0
    EXPECT_EQ(F32ToE2M1Bits(v), c) << c;      // round trip
    // The high nibble is ignored.
    EXPECT_EQ(FloatBits(E2M1BitsToF32(static_cast<uint8_t>(c | 0xa0))), FloatBits(v)) << c;
  }
  EXPECT_EQ(kE2M1Max, 6.0f);
}

TEST(E2M1, RoundsToNearestEvenAtEveryBoundary) {
  // Each midpoint between neighbouring magnitudes, one ulp either side, and
  // each magnitude with its neighbours, both signs.
  std::vector<float> probes;
  for (int c = 0; c < 8; ++c) {
    const float v = static_cast<float>(kE2M1[c]);
    probes.insert(probes.end(), {v, std::nextafter(v, 0.0f), std::nextafter(v, 100.0f)});
    if (c < 7) {
      const float mid = static_cast<float>((kE2M1[c] + kE2M1[c + 1]) / 2);
      probes.insert(probes.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 100.0f)});
    }
  }
  for (float p : probes) {
    for (float x : {p, -p}) {
      ASSERT_EQ(F32ToE2M1Bits(x), RefE2M1(x)) << "x = " << x;
    }
  }
  // The ties by name: 0.25 → 0, 0.75 → 1, 1.25 → 1, 1.75 → 2, 2.5 → 2,
  // 3.5 → 4, 5 → 4.
  const float ties[][2] = {{0.25f, 0}, {0.75f, 1}, {1.25f, 1}, {1.75f, 2},
                           {2.5f, 2},  {3.5f, 4},  {5.0f, 4}};
  for (const auto& t : ties) EXPECT_EQ(E2M1BitsToF32(F32ToE2M1Bits(t[0])), t[1]) << t[0];
  EXPECT_EQ(F32ToE2M1Bits(std::nextafter(0.25f, 1.0f)), 0x1);
  EXPECT_EQ(F32ToE2M1Bits(-0.25f), 0x8);  // rounds to −0
}

TEST(E2M1, MatchesReferenceOverF32Binades) {
  // Every f32 bit pattern whose low 12 mantissa bits are one of a few
  // (rounding boundaries of e2m1 lie far above bit 12), both signs: 6M values.
  const uint32_t lows[] = {0x000, 0x001, 0x7ff, 0x800, 0x801, 0xfff};
  for (uint32_t top = 0; top < (1u << 20); ++top) {
    for (uint32_t low : lows) {
      const uint32_t u = top << 12 | low;
      const float x = BitsFloat(u);
      const uint8_t got = F32ToE2M1Bits(x), want = RefE2M1(x);
      if (got != want)
        FAIL() << "bits 0x" << std::hex << u << " (" << x << "): got 0x" << +got << ", want 0x"
               << +want;
    }
  }
}

TEST(E2M1, SaturatesAndMapsNaN) {
  for (float x :
       {6.0f, std::nextafter(6.0f, 7.0f), 7.0f, 1e30f, std::numeric_limits<float>::max(), kInf}) {
    EXPECT_EQ(F32ToE2M1Bits(x), 0x7) << x;
    EXPECT_EQ(F32ToE2M1Bits(-x), 0xf) << x;
  }
  EXPECT_EQ(F32ToE2M1Bits(kNaN), 0x7);
  EXPECT_EQ(F32ToE2M1Bits(-kNaN), 0x7);
  EXPECT_EQ(F32ToE2M1Bits(std::numeric_limits<float>::denorm_min()), 0x0);
  EXPECT_EQ(F32ToE2M1Bits(-0.0f), 0x8);
}

// ---- Wire layout -------------------------------------------------------------------

TEST(Nvfp4WireBytes, HeaderCodesScalesPaddedTo16) {
  EXPECT_EQ(Nvfp4WireBytes(0), 16);
  EXPECT_EQ(Nvfp4WireBytes(1), 16);   // 4 + 1 + 1
  EXPECT_EQ(Nvfp4WireBytes(20), 16);  // 4 + 10 + 2
  EXPECT_EQ(Nvfp4WireBytes(21), 32);  // 4 + 11 + 2
  EXPECT_EQ(Nvfp4WireBytes(768 * 768), 331792);
  for (int64_t n = 0; n < 1000; ++n) {
    const int64_t used = 4 + (n + 1) / 2 + (n + 15) / 16;
    ASSERT_EQ(Nvfp4WireBytes(n) % 16, 0) << n;
    ASSERT_GE(Nvfp4WireBytes(n), used) << n;
    ASSERT_LT(Nvfp4WireBytes(n), used + 16) << n;
    ASSERT_EQ(Nvfp4ScalesOffset(n), 4 + (n + 1) / 2) << n;
  }
  static_assert(Nvfp4WireBytes(64) == 48, "usable in constant expressions");
}

TEST(Nvfp4Wire, ByteLayout) {
  // n = 35: blocks of 16, 16 and 3. A = 2688 makes g exactly 1.
  // Block 0: amax 2688 → t = 448 → s = 0x7E, d = 448; x = 448·e2m1 values.
  // Block 1: amax 6 → t = 1 → s = 0x38, d = 1; x = the e2m1 values.
  // Block 2: zeros and −0 → s = 0, d = 0 → every code +0.
  std::vector<float> x(35, 0.0f);
  for (int i = 0; i < 16; ++i) {
    const double v = (i % 2 ? -1 : 1) * kE2M1[i % 8];
    x[i] = static_cast<float>(448 * v);
    x[16 + i] = static_cast<float>(v);
  }
  x[7] = 2688.0f;      // block 0's amax (code 0x7)
  x[16 + 13] = -6.0f;  // block 1's amax (code 0xF)
  x[33] = -0.0f;
  for (DType t : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(t));
    const std::vector<uint8_t> wire = Encode(x, t);
    ASSERT_EQ(wire.size(), 32u);
    const uint8_t g_bytes[4] = {0x00, 0x00, 0x80, 0x3f};  // 1.0f, little-endian
    for (int k = 0; k < 4; ++k) EXPECT_EQ(wire[k], g_bytes[k]) << k;
    for (int i = 0; i < 32; i += 2) {
      // Element 2j in the low nibble, 2j + 1 in the high one.
      EXPECT_EQ(wire[4 + i / 2], RefE2M1(x[i] / (i < 16 ? 448.0 : 1.0)) |
                                     RefE2M1(x[i + 1] / (i < 16 ? 448.0 : 1.0)) << 4)
          << "pair " << i;
    }
    EXPECT_EQ(wire[4 + 3], 0x06 | 0x07 << 4);  // 448·4 → 0x6, 2688 → 0x7
    EXPECT_EQ(wire[4 + 16], 0x00);             // elements 32, 33 (d = 0: even −0 codes +0)
    EXPECT_EQ(wire[4 + 17], 0x00);             // element 34, then the pad nibble
    EXPECT_EQ(wire[22], 0x7e);
    EXPECT_EQ(wire[23], 0x38);
    EXPECT_EQ(wire[24], 0x00);
    for (int k = 25; k < 32; ++k) EXPECT_EQ(wire[k], 0) << "padding byte " << k;
    // These values are exact: the round trip gives x back (−0 as +0).
    const std::vector<float> y = Decode(wire, 35, t);
    for (int i = 0; i < 35; ++i) EXPECT_EQ(y[i], x[i] == 0 ? 0.0f : x[i]) << i;
    EXPECT_FALSE(std::signbit(y[33]));
  }
}

TEST(Nvfp4Wire, OddLengthLeavesTheLastHighNibbleZero) {
  for (int64_t n : {1, 3, 17, 33}) {
    std::vector<float> x(n, -5.5f);  // code 0xF everywhere
    const std::vector<uint8_t> wire = Encode(x, DType::kF32);
    EXPECT_EQ(wire[4 + n / 2], 0x0f) << n;
  }
}

// ---- Round trips against the reference ---------------------------------------------

TEST(Nvfp4, MatchesReferenceAndStaysWithinTheBound) {
  Rng rng(31);
  ErrorStats total;
  for (DType x_type : {DType::kF32, DType::kBF16}) {
    for (DType y_type : {DType::kF32, DType::kBF16}) {
      for (int64_t n : {0, 1, 2, 15, 16, 17, 31, 33, 257, 1000, 4099, 65536 + 9}) {
        SCOPED_TRACE(absl::StrCat("x=", DTypeName(x_type), " y=", DTypeName(y_type), " n=", n));
        const std::vector<float> x = Spanning(rng, n, x_type);
        const RefWire ref = RefEncode(x);
        const std::vector<uint8_t> wire = Encode(x, x_type);
        ASSERT_TRUE(SameBytes(wire, ref.bytes));
        const bool bf16_out = y_type == DType::kBF16;
        const std::vector<float> y = Decode(wire, n, y_type);
        ASSERT_TRUE(SameFloats(y, RefDecode(ref.bytes, n, bf16_out)));
        const ErrorStats s = Measure(x, y, ref, bf16_out);
        EXPECT_EQ(s.violations, 0)
            << "first at " << s.first_violation << ": x = " << x[s.first_violation]
            << ", y = " << y[s.first_violation];
        total.worst_over_bound = std::max(total.worst_over_bound, s.worst_over_bound);
      }
    }
  }
  std::printf("spanning data: worst |y - x| / bound = %.4f\n", total.worst_over_bound);
}

// The numbers the report quotes: Gaussian data of a 768×768 weight.
TEST(Nvfp4, ErrorOfGaussianData) {
  Rng rng(32);
  const int64_t n = 768 * 768;
  for (DType t : {DType::kF32, DType::kBF16}) {
    const std::vector<float> x =
        t == DType::kBF16 ? RoundToBF16(rng.Normal(n, 0.0f, 0.02f)) : rng.Normal(n, 0.0f, 0.02f);
    const RefWire ref = RefEncode(x);
    const std::vector<uint8_t> wire = Encode(x, t);
    ASSERT_TRUE(SameBytes(wire, ref.bytes));
    const std::vector<float> y = Decode(wire, n, t);
    const ErrorStats s = Measure(x, y, ref, t == DType::kBF16);
    EXPECT_EQ(s.violations, 0);
    EXPECT_LT(s.rel_rms(), 0.12);
    std::printf(
        "N(0, 0.02^2), n = 768^2, %s in/out: relative RMS error %.4f, worst/bound %.4f, "
        "wire %lld bytes = %.5f bytes/element (bf16 2, MXFP8 %.5f)\n",
        DTypeName(t), s.rel_rms(), s.worst_over_bound, static_cast<long long>(wire.size()),
        static_cast<double>(wire.size()) / n, 1 + 1.0 / kFp8BlockSize);
  }
}

TEST(Nvfp4, BoundCatchesAWrongBlockScale) {
  Rng rng(33);
  const int64_t n = 16 * 64 + 5;
  const std::vector<float> x = rng.Normal(n);
  const RefWire ref = RefEncode(x);
  const std::vector<uint8_t> wire = Encode(x, DType::kF32);
  ASSERT_EQ(Measure(x, Decode(wire, n, DType::kF32), ref, false).violations, 0);
  const int64_t scales_at = Nvfp4ScalesOffset(n);
  // Twice or half the right scale (one e4m3 binade: ±8 codes) in one block,
  // the first, a middle one and the short last one.
  for (int64_t b : {int64_t{0}, int64_t{37}, n / 16}) {
    for (int delta : {8, -8}) {
      SCOPED_TRACE(absl::StrCat("block ", b, " scale code ", delta > 0 ? "+8" : "-8"));
      std::vector<uint8_t> bad = wire;
      ASSERT_GE(bad[scales_at + b], 0x10);  // a normal e4m3 code, so ±8 stays one
      bad[scales_at + b] = static_cast<uint8_t>(bad[scales_at + b] + delta);
      const std::vector<float> y = Decode(bad, n, DType::kF32);
      const int64_t lo = b * 16, hi = std::min(n, lo + 16);
      EXPECT_GT(Measure(x, y, ref, false, lo, hi).violations, 0);
      EXPECT_EQ(Measure(x, y, ref, false, 0, lo).violations, 0);
      EXPECT_EQ(Measure(x, y, ref, false, hi, n).violations, 0);
    }
  }
  // A tensor scale off by a factor of two breaks it too.
  std::vector<uint8_t> bad = wire;
  float g;
  std::memcpy(&g, bad.data(), 4);
  g *= 2;
  std::memcpy(bad.data(), &g, 4);
  EXPECT_GT(Measure(x, Decode(bad, n, DType::kF32), ref, false).violations, 0);
}

// ---- Special values ------------------------------------------------------------

TEST(Nvfp4, NonFiniteInputPoisonsTheWholeWire) {
  for (float special : {kNaN, kInf, -kInf}) {
    for (DType x_type : {DType::kF32, DType::kBF16}) {
      for (int64_t n : {1, 16, 35, 1001}) {
        SCOPED_TRACE(absl::StrCat("special ", special, " x=", DTypeName(x_type), " n=", n));
        Rng rng(34);
        std::vector<float> x = rng.Normal(n);
        x[n / 3] = special;
        const std::vector<uint8_t> wire = Encode(x, x_type);
        ASSERT_TRUE(SameBytes(wire, RefEncode(x_type == DType::kBF16 ? RoundToBF16(x) : x).bytes));
        EXPECT_EQ(wire[0] | wire[1] << 8 | wire[2] << 16 | uint32_t{wire[3]} << 24, 0x7fc00000u);
        const int64_t scales_at = Nvfp4ScalesOffset(n), nb = (n + 15) / 16;
        for (int64_t i = 4; i < scales_at; ++i) {
          ASSERT_EQ(wire[i], (n % 2 && i == scales_at - 1) ? 0x07 : 0x77) << "code byte " << i;
        }
        for (int64_t b = 0; b < nb; ++b) ASSERT_EQ(wire[scales_at + b], 0x7f) << "block " << b;
        for (size_t i = scales_at + nb; i < wire.size(); ++i) ASSERT_EQ(wire[i], 0) << i;
        for (DType y_type : {DType::kF32, DType::kBF16}) {
          for (float v : Decode(wire, n, y_type)) ASSERT_TRUE(std::isnan(v));
        }
      }
    }
  }
}

TEST(Nvfp4, ANaNBlockScaleOnTheWireDecodesThatBlockToNaN) {
  Rng rng(35);
  const int64_t n = 48;
  const std::vector<float> x = rng.Normal(n);
  std::vector<uint8_t> wire = Encode(x, DType::kF32);
  wire[Nvfp4ScalesOffset(n) + 1] = 0x7f;
  const std::vector<float> y = Decode(wire, n, DType::kF32);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(std::isnan(y[i]), i / 16 == 1) << i;
}

TEST(Nvfp4, AllZeroInputDecodesToZeros) {
  for (int64_t n : {0, 1, 16, 100}) {
    for (float z : {0.0f, -0.0f}) {
      const std::vector<float> x(n, z);
      const std::vector<uint8_t> wire = Encode(x, DType::kF32);
      std::vector<uint8_t> want(Nvfp4WireBytes(n), 0);
      want[2] = 0x80;
      want[3] = 0x3f;  // g = 1
      EXPECT_TRUE(SameBytes(wire, want)) << n;
      for (DType t : {DType::kF32, DType::kBF16}) {
        for (float v : Decode(wire, n, t)) EXPECT_EQ(FloatBits(v), 0u);  // +0
      }
    }
  }
}

TEST(Nvfp4, ExtremeMagnitudes) {
  // Tensor amax near FLT_MAX, near the f32 subnormals (g clamped at 2⁻¹²⁶),
  // and a tensor of subnormals only: codes match the reference, values stay
  // within the bound.
  const float kMax = std::numeric_limits<float>::max();
  Rng rng(36);
  for (float top : {kMax, 3e38f, 1e-30f, 1e-36f, 1e-38f, 1e-44f}) {
    SCOPED_TRACE(absl::StrCat("amax ", top));
    std::vector<float> x = rng.Uniform(100, -1.0f, 1.0f);
    for (float& v : x) v *= top;
    x[17] = top;
    const RefWire ref = RefEncode(x);
    const std::vector<uint8_t> wire = Encode(x, DType::kF32);
    ASSERT_TRUE(SameBytes(wire, ref.bytes));
    const std::vector<float> y = Decode(wire, x.size(), DType::kF32);
    for (float v : y) ASSERT_TRUE(std::isfinite(v));
    const ErrorStats s = Measure(x, y, ref, false);
    EXPECT_EQ(s.violations, 0) << "first at " << s.first_violation;
  }
}

// ---- ops:: dispatch --------------------------------------------------------------

TEST(Nvfp4Ops, EncodeDecodeAnyShapeAsTheCpuKernels) {
  HeapAllocator heap;
  const Exec e = Exec::Cpu(heap);
  Rng rng(37);
  const Shape shape{3, 5, 7};
  const int64_t n = shape.numel();
  for (DType t : {DType::kF32, DType::kBF16}) {
    const std::vector<float> xf = Spanning(rng, n, t);
    std::vector<uint8_t> xs = Store(xf, t);
    const Tensor x = Tensor::Wrap(xs.data(), shape, t, Device::Cpu());
    const Tensor wire = e.Empty({Nvfp4WireBytes(n)}, DType::kU8);
    std::memset(wire.raw_data(), 0xa5, wire.nbytes());
    ops::EncodeNvfp4(e, x, wire);
    const std::vector<uint8_t> got(static_cast<uint8_t*>(wire.raw_data()),
                                   static_cast<uint8_t*>(wire.raw_data()) + wire.nbytes());
    EXPECT_TRUE(SameBytes(got, Encode(xf, t)));
    for (DType yt : {DType::kF32, DType::kBF16}) {
      const Tensor y = e.Empty({n / 7, 7}, yt);
      ops::DecodeNvfp4(e, wire, y);
      const std::vector<uint8_t> yb(static_cast<uint8_t*>(y.raw_data()),
                                    static_cast<uint8_t*>(y.raw_data()) + y.nbytes());
      EXPECT_TRUE(SameFloats(LoadAs(yb, yt), Decode(got, n, yt)));
    }
  }
}

TEST(Nvfp4OpsDeathTest, RefusesWrongWireSizesAndDTypes) {
  HeapAllocator heap;
  const Exec e = Exec::Cpu(heap);
  const Tensor x = e.Zeros({40});
  EXPECT_DEATH(ops::EncodeNvfp4(e, x, e.Empty({Nvfp4WireBytes(40) - 1}, DType::kU8)),
               "EncodeNvfp4");
  EXPECT_DEATH(ops::EncodeNvfp4(e, x, e.Empty({Nvfp4WireBytes(40)}, DType::kI32)), "EncodeNvfp4");
  EXPECT_DEATH(ops::EncodeNvfp4(e, e.Zeros({40}, DType::kI32), e.Empty({32}, DType::kU8)),
               "EncodeNvfp4");
  EXPECT_DEATH(ops::DecodeNvfp4(e, e.Zeros({16}, DType::kU8), e.Empty({41})), "DecodeNvfp4");
}

}  // namespace
}  // namespace gtp::kernels::testing
