// ColumnSumAccumulate on the CPU (cpu/column_sum.cc; the order cuda/column_sum.cu
// repeats, checked bit for bit by cuda/column_sum_gpu_test.cc) against the
// double column sums.
//
// Bound: the order adds at most kColumnSumSlabRows / kColumnSumLanes terms
// per lane, kColumnSumLanes lanes, S = ceil(R / kColumnSumSlabRows) slabs and
// the old sum, each addition rounding once (u = 2⁻²⁴), so every partial's
// error is at most (depth)·u times the sum of |terms| beneath it (first
// order): |got − exact| ≤ (R/S-lane depth + lanes + S + 1)·u·(Σ_r |x| + |s0|)
// (+ a negligible second-order term: the factor 1.01 below). Deterministic
// data where one column's sum cancels to 0 keeps the comparison honest about
// relative error. NaN never passes (every check is ASSERT_TRUE(err <= bound)).
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/kernels/cpu.h"
#include "core/kernels/testing/harness.h"
#include "gtest/gtest.h"

namespace gtp::kernels {
namespace {

// The error bound above for column c.
double Bound(int64_t R, double abs_sum) {
  const int64_t S = (R + kColumnSumSlabRows - 1) / kColumnSumSlabRows;
  const double depth = kColumnSumSlabRows / kColumnSumLanes + kColumnSumLanes + S + 1;
  return 1.01 * depth * 0x1p-24 * abs_sum;
}

template <typename T>
void Check(const std::vector<T>& x, const std::vector<float>& xf, int64_t R, int64_t C) {
  std::vector<float> sums(C);
  for (int64_t c = 0; c < C; ++c) sums[c] = 0.25f * static_cast<float>(c % 5) - 0.5f;
  const std::vector<float> s0 = sums;
  cpu::ColumnSumAccumulate(x.data(), R, C, sums.data());
  for (int64_t c = 0; c < C; ++c) {
    double exact = s0[c], abs_sum = std::abs(s0[c]);
    for (int64_t r = 0; r < R; ++r) {
      exact += xf[r * C + c];
      abs_sum += std::abs(xf[r * C + c]);
    }
    const double err = std::abs(sums[c] - exact);
    ASSERT_TRUE(err <= Bound(R, abs_sum))
        << "R=" << R << " C=" << C << " column " << c << ": " << sums[c] << " vs " << exact;
  }
}

TEST(ColumnSumAccumulate, AddsEachColumnsSumWithinTheOrdersRoundingBound) {
  testing::Rng rng(3);
  // Rows: fewer than a lane's stride, a partial slab, whole slabs, many slabs.
  for (int64_t R : {1, 5, 63, 64, 65, 200, 8192}) {
    for (int64_t C : {1, 7, 24}) {
      const std::vector<float> xf = rng.Normal(R * C);
      Check(xf, xf, R, C);
      const std::vector<bf16> xb = testing::ToBF16(xf);
      Check(xb, testing::ToFloat(xb), R, C);
    }
  }
}

TEST(ColumnSumAccumulate, ZeroRowsLeaveTheSumsAsTheyAre) {
  std::vector<float> sums = {-0.0f, 1.5f};
  cpu::ColumnSumAccumulate(static_cast<const float*>(nullptr), 0, 2, sums.data());
  EXPECT_TRUE(std::signbit(sums[0]) && sums[0] == 0.0f);  // −0 stays −0
  EXPECT_EQ(sums[1], 1.5f);
}

// The order is the documented one: one column of 9 rows where the f32 sum
// depends on the grouping. Lane 0 adds rows 0 and 8: 2²⁴ + 1 rounds (to
// even) to 2²⁴; lane 1 holds row 1, −2²⁴; lane 2 row 2, 1. The lanes in
// order: (2²⁴ − 2²⁴) + 1 = 1. Row by row it would be 2 (row 8's 1 survives),
// and adding lane 2 before lane 1 would give 0.
TEST(ColumnSumAccumulate, RunsTheDocumentedOrder) {
  std::vector<float> x(9, 0.0f);
  x[0] = 0x1p24f;
  x[8] = 1.0f;
  x[1] = -0x1p24f;
  x[2] = 1.0f;
  std::vector<float> sums = {0.0f};
  cpu::ColumnSumAccumulate(x.data(), 9, 1, sums.data());
  EXPECT_EQ(sums[0], 1.0f);
}

}  // namespace
}  // namespace gtp::kernels
