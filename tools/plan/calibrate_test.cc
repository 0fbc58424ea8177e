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
  // Every op the planner can ask for (plan/calibration.h AllOps) is measured,
  // the Mamba mixer's and the MoE layer's kernels included.
  std::set<std::string> all;
  for (Op op : AllOps()) all.insert(OpName(op));
  EXPECT_EQ(ops, all);
  EXPECT_EQ(all.size(), 24u);
  absl::StatusOr<std::vector<Measurement>> back = ParseCalibration(FormatCalibration(*rows, device), "cpu table");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->size(), rows->size());
  // The scan rows carry their shape class P·N (the quick shape: P = N = 16).
  for (const Measurement& m : *back) {
    if (m.op == Op::kSsmFwd) {
      EXPECT_EQ(ShapeClass(m), 256) << m.shape;
    }
  }
}

TEST(Calibrate, RefusesAnUnknownDevice) {
  CalibrateOptions o;
  o.device = "tpu";
  std::string device;
  EXPECT_FALSE(Calibrate(o, &device).ok());
}

}  // namespace
}  // namespace gtp::plan
