// plan/calibration.h — how long one kernel takes: measured (a calibration
// table from `plan calibrate`) or the built-in default curve.
//
// Table format (text; `#` comments; one measurement a line, whitespace-separated):
//
//   # gtp plan calibration v1
//   # op     dtype  shape                  flops     bytes     seconds
//   gemm     bf16   m=4096,n=4096,k=4096   1.374e11  1.007e8   2.05e-4
//   norm     bf16   rows=8192,c=4096       0         1.342e8   4.1e-5
//
// op is one of OpName()'s names; dtype f32 | bf16 | fp8; shape is free text
// without spaces (for people); flops are the FLOPs the kernel executes
// (causal attention: half of the square); bytes what it reads and writes.
// A query interpolates the measurements of the same op and dtype linearly
// in log(seconds) over log(work) — work = flops for compute ops (gemm,
// attention, ssm scan), bytes for memory-bound ones (norm, elementwise,
// adamw) — and extrapolates at the nearest end's throughput. An (op, dtype)
// with no measurement uses the default curve and is reported uncalibrated.
//
// Default curve (uncalibrated; from the cluster file):
//   compute op: kernel_overhead + max(flops / (peak(dtype) · eff(op)), bytes / (hbm_bw · memory_efficiency))
//   memory op:  kernel_overhead + bytes / (hbm_bw · memory_efficiency)
// eff: gemm_efficiency for gemm; attention_efficiency for attention;
// attention_efficiency / 2 for the SSM scan (a chunked scan, assumption).
// Pure once built; const methods thread-safe.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "plan/cluster.h"

namespace gtp::plan {

enum class Op { kGemm, kAttentionFwd, kAttentionBwd, kSsmFwd, kSsmBwd, kNorm, kElementwise, kAdamW };
const char* OpName(Op op);
// Compute-bound ops interpolate over FLOPs, the others over bytes.
bool IsComputeOp(Op op);

struct Measurement {
  Op op = Op::kGemm;
  std::string dtype;  // "f32" | "bf16" | "fp8"
  std::string shape;
  double flops = 0, bytes = 0, seconds = 0;
};

absl::StatusOr<std::vector<Measurement>> ParseCalibration(const std::string& text,
                                                          const std::string& origin);
// The table text (with a header naming `device`).
std::string FormatCalibration(const std::vector<Measurement>& rows, const std::string& device);

class CostModel {
 public:
  // The default curve only.
  explicit CostModel(const Cluster& cluster) : cluster_(cluster) {}
  // Adds measured points (repeated ones are averaged per work value).
  void Add(const std::vector<Measurement>& rows);

  // Seconds for one kernel.
  double Seconds(Op op, const std::string& dtype, double flops, double bytes) const;
  // The default curve's seconds (what Seconds falls back to).
  double DefaultSeconds(Op op, const std::string& dtype, double flops, double bytes) const;
  bool Calibrated(Op op, const std::string& dtype) const;
  bool CalibratedAny() const { return !points_.empty(); }
  // Peak FLOP/s of a dtype on this GPU (fp8 without fp8 cores: bf16's).
  double Peak(const std::string& dtype) const;
  const Cluster& cluster() const { return cluster_; }

 private:
  Cluster cluster_;
  // (op, dtype) → sorted (work, seconds).
  std::map<std::pair<Op, std::string>, std::vector<std::pair<double, double>>> points_;
};

}  // namespace gtp::plan
