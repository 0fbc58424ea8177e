// `plan calibrate` on the CPU (quick shapes): every op kind measured through
// core/kernels, positive times, and a table the planner reads back.
#include "tools/plan/calibrate.h"

#include <set>

#include "gtest/gtest.h"

namespace gtp::plan {
namespace {

TEST(Calibrate, MeasuresEveryOpKindOnCpu) {
  CalibrateOptions o;
  o.device = "cpu";
  o.quick = true;
  o.reps = 1;
  std::string device;
  absl::StatusOr<std::vector<Measurement>> rows = Calibrate(o, &device);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(device, "cpu");
  std::set<std::string> ops;
  for (const Measurement& m : *rows) {
    ops.insert(OpName(m.op));
    EXPECT_GT(m.seconds, 0) << OpName(m.op) << " " << m.shape;
  }
  EXPECT_EQ(ops, (std::set<std::string>{"gemm", "attention_fwd", "attention_bwd", "ssm_scan_fwd", "ssm_scan_bwd",
                                        "norm", "elementwise", "adamw"}));
  absl::StatusOr<std::vector<Measurement>> back = ParseCalibration(FormatCalibration(*rows, device), "cpu table");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->size(), rows->size());
}

TEST(Calibrate, RefusesAnUnknownDevice) {
  CalibrateOptions o;
  o.device = "tpu";
  std::string device;
  EXPECT_FALSE(Calibrate(o, &device).ok());
}

}  // namespace
}  // namespace gtp::plan
