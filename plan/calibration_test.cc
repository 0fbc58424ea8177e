#include "plan/calibration.h"

#include <cmath>

#include "gtest/gtest.h"

namespace gtp::plan {
namespace {

Cluster Gpu() {
  Cluster c;
  c.peak_bf16_flops = 100e12;
  c.peak_f32_flops = 10e12;
  c.hbm_bandwidth = 1e12;
  c.gemm_efficiency = 0.5;
  c.attention_efficiency = 0.25;
  c.memory_efficiency = 0.5;
  c.kernel_overhead = 1e-6;
  return c;
}

TEST(Calibration, DefaultCurveByHand) {
  const CostModel m(Gpu());
  // 1e12 FLOPs at 100e12 · 0.5 = 20 ms, + 1 µs; the bytes term (1e6 / 5e11) is smaller.
  EXPECT_DOUBLE_EQ(m.Seconds(Op::kGemm, "bf16", 1e12, 1e6), 1e-6 + 0.02);
  // Memory-bound: 1e9 bytes at 1e12 · 0.5 = 2 ms, + 1 µs.
  EXPECT_DOUBLE_EQ(m.Seconds(Op::kNorm, "bf16", 0, 1e9), 1e-6 + 2e-3);
  // A GEMM with tiny FLOPs and many bytes is bandwidth-bound.
  EXPECT_DOUBLE_EQ(m.Seconds(Op::kGemm, "bf16", 1e6, 1e9), 1e-6 + 2e-3);
  // f32 at its own peak: 1e12 / (10e12 · 0.5) = 0.2 s.
  EXPECT_DOUBLE_EQ(m.Seconds(Op::kGemm, "f32", 1e12, 0), 1e-6 + 0.2);
  // Attention at 0.25: 1e12 / 25e12 = 40 ms.
  EXPECT_DOUBLE_EQ(m.Seconds(Op::kAttentionFwd, "bf16", 1e12, 0), 1e-6 + 0.04);
  EXPECT_FALSE(m.CalibratedAny());
}

TEST(Calibration, ParsesAndInterpolatesLogLog) {
  absl::StatusOr<std::vector<Measurement>> rows = ParseCalibration(
      "# gtp plan calibration v1\n"
      "gemm bf16 m=1,n=1,k=1 1e9 0 1e-5\n"
      "gemm bf16 m=2,n=2,k=2 1e11 0 1e-4\n"
      "norm bf16 rows=1 0 1e6 2e-6\n",
      "t");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 3u);
  CostModel m(Gpu());
  m.Add(*rows);
  EXPECT_TRUE(m.Calibrated(Op::kGemm, "bf16"));
  EXPECT_FALSE(m.Calibrated(Op::kGemm, "f32"));
  // Halfway in log FLOPs (1e10) → halfway in log seconds: √(1e-5 · 1e-4) = 3.1623e-5.
  EXPECT_NEAR(m.Seconds(Op::kGemm, "bf16", 1e10, 0), std::sqrt(1e-9), 1e-12);
  // Beyond the largest: its throughput (1e11 FLOPs per 1e-4 s).
  EXPECT_NEAR(m.Seconds(Op::kGemm, "bf16", 1e12, 0), 1e-3, 1e-12);
  // Below the smallest: its throughput, no less than the launch overhead.
  EXPECT_NEAR(m.Seconds(Op::kGemm, "bf16", 5e8, 0), 5e-6, 1e-15);
  EXPECT_NEAR(m.Seconds(Op::kGemm, "bf16", 1e3, 0), 1e-6, 1e-15);
  // Memory ops interpolate over bytes.
  EXPECT_NEAR(m.Seconds(Op::kNorm, "bf16", 0, 2e6), 4e-6, 1e-15);
  // No table for f32: the default curve.
  EXPECT_DOUBLE_EQ(m.Seconds(Op::kGemm, "f32", 1e12, 0), m.DefaultSeconds(Op::kGemm, "f32", 1e12, 0));
}

TEST(Calibration, RoundTripsItsOwnFormat) {
  std::vector<Measurement> rows = {{Op::kAttentionBwd, "bf16", "b=1,t=2", 5e9, 1e6, 2e-4},
                                   {Op::kAdamW, "f32", "n=4", 0, 112, 3e-6}};
  absl::StatusOr<std::vector<Measurement>> back = ParseCalibration(FormatCalibration(rows, "dev"), "rt");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].op, Op::kAttentionBwd);
  EXPECT_EQ((*back)[1].shape, "n=4");
  EXPECT_DOUBLE_EQ((*back)[1].seconds, 3e-6);
}

TEST(Calibration, RefusesBadRows) {
  EXPECT_FALSE(ParseCalibration("gemm bf16 s 1e9 0\n", "t").ok());          // 5 fields
  EXPECT_FALSE(ParseCalibration("conv bf16 s 1e9 0 1e-5\n", "t").ok());     // unknown op
  EXPECT_FALSE(ParseCalibration("gemm int8 s 1e9 0 1e-5\n", "t").ok());     // dtype
  EXPECT_FALSE(ParseCalibration("gemm bf16 s 1e9 0 0\n", "t").ok());        // zero time
  EXPECT_FALSE(ParseCalibration("gemm bf16 s 0 10 1e-5\n", "t").ok());      // no FLOPs
  EXPECT_FALSE(ParseCalibration("norm bf16 s 10 0 1e-5\n", "t").ok());      // no bytes
  EXPECT_FALSE(ParseCalibration("gemm bf16 s nan 0 1e-5\n", "t").ok());
}

}  // namespace
}  // namespace gtp::plan
