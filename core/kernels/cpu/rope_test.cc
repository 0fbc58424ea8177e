#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/kernels/cpu.h"
#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "gtest/gtest.h"

namespace gtp::kernels {
namespace {
using testing::Rng;

struct Dims {
  int64_t B, T, NH, HS;
};

// Independent double reference: rotate pairs (d, d + HS/2) by t·θ^(−2d/HS).
std::vector<double> RefRope(const std::vector<double>& x, const Dims& s, double theta) {
  std::vector<double> y(x.size());
  const int64_t h = s.HS / 2;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t n = 0; n < s.NH; ++n)
        for (int64_t d = 0; d < h; ++d) {
          const int64_t i = ((b * s.T + t) * s.NH + n) * s.HS + d;
          const double a = t / std::pow(theta, 2.0 * d / s.HS);
          y[i] = x[i] * std::cos(a) - x[i + h] * std::sin(a);
          y[i + h] = x[i + h] * std::cos(a) + x[i] * std::sin(a);
        }
  return y;
}

class CpuRope : public ::testing::TestWithParam<Dims> {};

TEST_P(CpuRope, ForwardMatchesReferenceBackwardMatchesFiniteDifferences) {
  const Dims s = GetParam();
  const int64_t n = s.B * s.T * s.NH * s.HS;
  Rng rng(3);
  auto x = rng.Normal(n), w = rng.Normal(n);
  std::vector<float> y = testing::NaNs(n), dx = testing::NaNs(n);
  cpu::RopeForward(x.data(), y.data(), s.B, s.T, s.NH, s.HS, 10000.0f);
  EXPECT_TRUE(testing::RelClose(y, RefRope(testing::ToDouble(x), s, 10000.0), 1e-5));
  cpu::RopeBackward(w.data(), dx.data(), s.B, s.T, s.NH, s.HS, 10000.0f);
  auto f = [&](const std::vector<double>& v) { return RefRope(v, s, 10000.0); };
  EXPECT_TRUE(testing::RelClose(
      dx, testing::FiniteDifferenceGradient(f, testing::ToDouble(x), testing::ToDouble(w)), 1e-5));
  // In place, and backward undoes forward (a rotation's transpose is its inverse).
  std::vector<float> z = x;
  cpu::RopeForward(z.data(), z.data(), s.B, s.T, s.NH, s.HS, 500.0f);
  cpu::RopeBackward(z.data(), z.data(), s.B, s.T, s.NH, s.HS, 500.0f);
  EXPECT_TRUE(testing::RelClose(z, testing::ToDouble(x), 1e-6));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuRope,
                         ::testing::Values(Dims{1, 1, 1, 2}, Dims{2, 5, 3, 8}, Dims{1, 17, 2, 64},
                                           Dims{2, 33, 1, 6}));

// bf16: rotated in f32, rounded once (≤ 2⁻⁸ per element); equal to the f32
// kernel on the rounded input, rounded once. In place as well.
TEST_P(CpuRope, Bf16MatchesReferenceAndF32KernelRoundedOnce) {
  const Dims s = GetParam();
  const int64_t n = s.B * s.T * s.NH * s.HS;
  Rng rng(5);
  const std::vector<bf16> x = testing::ToBF16(rng.Normal(n)), w = testing::ToBF16(rng.Normal(n));
  std::vector<bf16> y = testing::ToBF16(testing::NaNs(n)), dx = w;
  cpu::RopeForward(x.data(), y.data(), s.B, s.T, s.NH, s.HS, 10000.0f);
  cpu::RopeBackward(dx.data(), dx.data(), s.B, s.T, s.NH, s.HS, 10000.0f);  // in place
  const std::vector<double> ref_y =
      testing::RefRope(testing::ToDouble(x), s.B, s.T, s.NH, s.HS, 10000.0, 1.0);
  const std::vector<double> ref_dx =
      testing::RefRope(testing::ToDouble(w), s.B, s.T, s.NH, s.HS, 10000.0, -1.0);
  EXPECT_TRUE(testing::RelClose(y, ref_y, 5e-3));
  EXPECT_TRUE(testing::RoundedOnce(y, ref_y));
  EXPECT_TRUE(testing::RelClose(dx, ref_dx, 5e-3));
  EXPECT_TRUE(testing::RoundedOnce(dx, ref_dx));
  // The shared reference (testing::RefRope) agrees with this file's.
  EXPECT_TRUE(testing::RelClose(std::vector<float>(ref_y.begin(), ref_y.end()),
                                RefRope(testing::ToDouble(x), s, 10000.0), 1e-7));
  std::vector<float> yf(n), dxf = testing::ToFloat(w);
  cpu::RopeForward(testing::ToFloat(x).data(), yf.data(), s.B, s.T, s.NH, s.HS, 10000.0f);
  cpu::RopeBackward(dxf.data(), dxf.data(), s.B, s.T, s.NH, s.HS, 10000.0f);
  EXPECT_EQ(testing::ToFloat(y), testing::RoundToBF16(yf));
  EXPECT_EQ(testing::ToFloat(dx), testing::RoundToBF16(dxf));
}

// Explicit positions (context parallelism): rows at positions pos[t] are
// rotated exactly like the rows at those indices of a longer sequence.
TEST(CpuRope, PositionsRotateLikeThoseRowsOfTheFullSequence) {
  const Dims full{2, 8, 3, 16}, part{2, 4, 3, 16};
  const std::vector<int32_t> pos = {0, 1, 6, 7};  // CP rank 0 of 2
  Rng rng(9);
  auto x = rng.Normal(full.B * full.T * full.NH * full.HS);
  std::vector<double> want = RefRope(testing::ToDouble(x), full, 10000.0);
  const int64_t row = full.NH * full.HS;
  std::vector<float> xs(part.B * part.T * row), ys(xs.size()), back(xs.size());
  for (int64_t b = 0; b < part.B; ++b)
    for (int64_t t = 0; t < part.T; ++t)
      for (int64_t i = 0; i < row; ++i) xs[(b * part.T + t) * row + i] = x[(b * full.T + pos[t]) * row + i];
  cpu::RopeForward(xs.data(), ys.data(), part.B, part.T, part.NH, part.HS, 10000.0f, pos.data());
  for (int64_t b = 0; b < part.B; ++b)
    for (int64_t t = 0; t < part.T; ++t)
      for (int64_t i = 0; i < row; ++i) {
        EXPECT_NEAR(ys[(b * part.T + t) * row + i], want[(b * full.T + pos[t]) * row + i], 1e-5);
      }
  cpu::RopeBackward(ys.data(), back.data(), part.B, part.T, part.NH, part.HS, 10000.0f, pos.data());
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(back[i], xs[i], 1e-5);  // a rotation's inverse
}

// row_stride: the heads as a column block of wider rows (q and k in place in
// a packed QKV matrix): rotated exactly as the dense heads, in place, the
// columns outside the block untouched; f32 and bf16, forward and backward.
template <typename E>
void CheckRowStride() {
  const int64_t B = 2, T = 5, NH = 3, HS = 8, col = 16, R = 64;  // heads at [16, 40) of 64
  Rng rng(11);
  std::vector<float> wide = rng.Normal(B * T * R);
  std::vector<E> packed;
  if constexpr (std::is_same_v<E, bf16>) {
    packed = testing::ToBF16(wide);
  } else {
    packed = wide;
  }
  std::vector<E> dense(B * T * NH * HS);
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t c = 0; c < NH * HS; ++c) dense[r * NH * HS + c] = packed[r * R + col + c];
  for (const float sign : {1.0f, -1.0f}) {
    std::vector<E> p = packed, d = dense;
    if (sign > 0) {
      cpu::RopeForward(p.data() + col, p.data() + col, B, T, NH, HS, 10000.0f, nullptr, R);
      cpu::RopeForward(d.data(), d.data(), B, T, NH, HS, 10000.0f);
    } else {
      cpu::RopeBackward(p.data() + col, p.data() + col, B, T, NH, HS, 10000.0f, nullptr, R);
      cpu::RopeBackward(d.data(), d.data(), B, T, NH, HS, 10000.0f);
    }
    for (int64_t r = 0; r < B * T; ++r) {
      for (int64_t c = 0; c < R; ++c) {
        const bool inside = c >= col && c < col + NH * HS;
        const E want = inside ? d[r * NH * HS + c - col] : packed[r * R + c];
        ASSERT_EQ(std::memcmp(&p[r * R + c], &want, sizeof(E)), 0)
            << "row " << r << " col " << c << (inside ? " (rotated)" : " (untouched)");
      }
    }
  }
}

TEST(CpuRope, RowStrideRotatesAColumnBlockInPlace) {
  CheckRowStride<float>();
  CheckRowStride<bf16>();
}

}  // namespace
}  // namespace gtp::kernels
