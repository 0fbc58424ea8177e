// tools/plan/calibrate.h — `plan calibrate`: time the project's own kernels
// (core/kernels ops: GEMM, fused or plain attention, the SSD scan, RMSNorm,
// an elementwise pass, AdamW) on this machine's device and return the rows
// of a calibration table (plan/calibration.h).
//
// On CUDA (GPU 0) it measures bf16 (and f32) at transformer shapes up to
// 8192-wide GEMMs, timed with a stream synchronise around `reps` calls after
// a warm-up; on the CPU (no GPU, or device "cpu") small shapes only, so it
// runs anywhere and can be tested. Every measurement's FLOPs follow the
// convention the planner queries with (causal attention: half the square).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "plan/calibration.h"

namespace gtp::plan {

struct CalibrateOptions {
  std::string device = "auto";  // auto | cpu | cuda
  bool quick = false;           // the smallest shapes only (tests)
  int reps = 5;
};

// The rows measured, and the device's name in `device_name`.
absl::StatusOr<std::vector<Measurement>> Calibrate(const CalibrateOptions& o, std::string* device_name);

}  // namespace gtp::plan
