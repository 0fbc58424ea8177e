#include "plan/calibration.h"

#include <cmath>
#include <string>

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

// The SSD scan picks the measured shape class (P·N) nearest in log, then
// interpolates along its FLOPs inside that class only.
TEST(Calibration, ScanUsesTheNearestShapeClass) {
  absl::StatusOr<std::vector<Measurement>> rows = ParseCalibration(
      "ssm_scan_fwd f32 b=8,t=1024,h=96,p=16,n=16 1e9 0 1e-3\n"
      "ssm_scan_fwd f32 b=8,t=1024,h=96,p=16,n=16 4e9 0 2e-3\n"
      "ssm_scan_fwd f32 b=1,t=4096,h=64,p=64,n=128 1e10 0 1e-3\n"
      "ssm_scan_fwd f32 b=9,t=9,h=9 1e9 0 5e-3\n",  // no p/n: class 1
      "t");
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(ShapeClass((*rows)[0]), 256);
  EXPECT_EQ(ShapeClass((*rows)[2]), 8192);
  EXPECT_EQ(ShapeClass((*rows)[3]), 1);
  EXPECT_EQ(ShapeClass(Measurement{Op::kGemm, "bf16", "p=2,n=2", 1, 0, 1}), 1);  // scan rows only
  CostModel m(Gpu());
  m.Add(*rows);
  // Class 256 at 2e9 FLOPs: halfway in log between 1e9 and 4e9 → √(1e-3 · 2e-3).
  EXPECT_NEAR(m.Seconds(Op::kSsmFwd, "f32", 2e9, 0, 256), std::sqrt(2e-6), 1e-12);
  // P·N = 1024 is nearer 256 (×4) than 8192 (×8): class 256, linear below its first point.
  EXPECT_NEAR(m.Seconds(Op::kSsmFwd, "f32", 5e8, 0, 1024), 5e-4, 1e-15);
  // P·N = 4096 is nearer 8192 (×2): 1e-3 s per 1e10 FLOPs, so 2e9 takes 2e-4 s
  // (class 256 would give 1.41e-3 s).
  EXPECT_NEAR(m.Seconds(Op::kSsmFwd, "f32", 2e9, 0, 4096), 2e-4, 1e-15);
  // An unclassed query (1) takes the unclassed row.
  EXPECT_NEAR(m.Seconds(Op::kSsmFwd, "f32", 1e9, 0), 5e-3, 1e-15);
}

// A latency op (the MoE dispatcher's host read): the mean of its rows,
// whatever the work; uncalibrated it is the kernel overhead.
TEST(Calibration, HostSyncIsALatency) {
  absl::StatusOr<std::vector<Measurement>> rows =
      ParseCalibration("host_sync f32 i32=24 0 96 2e-5\nhost_sync f32 i32=192 0 768 4e-5\n", "t");
  ASSERT_TRUE(rows.ok()) << rows.status();
  CostModel m(Gpu());
  EXPECT_DOUBLE_EQ(m.Seconds(Op::kHostSync, "f32", 0, 0), 1e-6);
  m.Add(*rows);
  EXPECT_NEAR(m.Seconds(Op::kHostSync, "f32", 0, 0), 3e-5, 1e-18);
  EXPECT_NEAR(m.Seconds(Op::kHostSync, "f32", 0, 1e9), 3e-5, 1e-18);
  EXPECT_TRUE(IsLatencyOp(Op::kHostSync));
  EXPECT_FALSE(IsComputeOp(Op::kHostSync));
  EXPECT_TRUE(IsComputeOp(Op::kGroupedGemmWgrad));
  EXPECT_FALSE(IsComputeOp(Op::kConv1dBwd));
}

// The work conventions by hand (the bytes each kernel must move).
TEST(Calibration, WorkConventionsByHand) {
  // Scan: 7 FLOPs a state element-step; x, y, dt, B, C in f32.
  EXPECT_DOUBLE_EQ(ScanFlops(8, 1024, 96, 16, 16), 7.0 * 8 * 1024 * 96 * 256);
  EXPECT_DOUBLE_EQ(ScanBytes(8, 1024, 96, 16, 16), 4.0 * 8192 * (2 * 1536 + 96 + 32));
  EXPECT_DOUBLE_EQ(Conv1dBytes(8192, 1536, false), 4.0 * 8192 * 1536 * 2);   // x, y
  EXPECT_DOUBLE_EQ(Conv1dBytes(8192, 1536, true), 4.0 * 8192 * 1536 * 3);    // dy, x, dx
  EXPECT_DOUBLE_EQ(GatedNormBytes(8192, 1536, false), 4.0 * 8192 * 1536 * 3);  // x, z, y
  EXPECT_DOUBLE_EQ(GatedNormBytes(8192, 1536, true), 4.0 * 8192 * 1536 * 5);   // dy, x, z, dx, dz
  EXPECT_DOUBLE_EQ(SoftplusBytes(8192, 96, false), 4.0 * 8192 * 96 * 2);
  EXPECT_DOUBLE_EQ(SoftplusBytes(8192, 96, true), 4.0 * 8192 * 96 * 3);
  EXPECT_DOUBLE_EQ(CastBytes(1000), 6000);  // 2 B + 4 B an element
  // Router, 8192 tokens, 8 experts, top-2: logits 4·n·E + 20 B a slot forward;
  // logits and dlogits 8·n·E + 12 B a slot backward.
  EXPECT_DOUBLE_EQ(RouteBytes(8192, 8, 2, false), 4.0 * 8192 * 8 + 20.0 * 16384);
  EXPECT_DOUBLE_EQ(RouteBytes(8192, 8, 2, true), 8.0 * 8192 * 8 + 12.0 * 16384);
  // 16384 rows of 768 bf16: gather read + write + the i32 index; scatter-add bf16
  // read, f32 read + write.
  EXPECT_DOUBLE_EQ(PermuteBytes(16384, 768, 2), 2.0 * 2 * 16384 * 768 + 4 * 16384);
  EXPECT_DOUBLE_EQ(ScatterAddBytes(16384, 768, 2), 10.0 * 16384 * 768 + 4 * 16384);
  EXPECT_DOUBLE_EQ(CombineBytes(8192, 16384, 768, 2, false), 2.0 * (8192 + 16384) * 768 + 8 * 16384);
  EXPECT_DOUBLE_EQ(CombineBytes(8192, 16384, 768, 2, true), 2.0 * (8192 + 2 * 16384) * 768 + 8 * 16384);
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
  EXPECT_NE(std::string(ParseCalibration("conv bf16 s 1e9 0 1e-5\n", "t").status().message()).find("conv1d_fwd"),
            std::string::npos);  // the error lists the known ops
  EXPECT_FALSE(ParseCalibration("conv1d_fwd f32 s 0 0 1e-5\n", "t").ok());  // a memory op without bytes
  EXPECT_TRUE(ParseCalibration("host_sync f32 s 0 0 1e-5\n", "t").ok());    // a latency needs no work
  EXPECT_FALSE(ParseCalibration("gemm int8 s 1e9 0 1e-5\n", "t").ok());     // dtype
  EXPECT_FALSE(ParseCalibration("gemm bf16 s 1e9 0 0\n", "t").ok());        // zero time
  EXPECT_FALSE(ParseCalibration("gemm bf16 s 0 10 1e-5\n", "t").ok());      // no FLOPs
  EXPECT_FALSE(ParseCalibration("norm bf16 s 10 0 1e-5\n", "t").ok());      // no bytes
  EXPECT_FALSE(ParseCalibration("gemm bf16 s nan 0 1e-5\n", "t").ok());
}

}  // namespace
}  // namespace gtp::plan
