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
// without spaces (for people), except that the SSD scan's rows carry p=P and
// n=N (its shape class, below); flops are the FLOPs the kernel executes
// (causal attention: half of the square); bytes what it reads and writes, by
// the conventions below (the same functions `plan calibrate` records with).
// Three kinds of op:
//   compute ops (gemm, grouped_gemm*, attention, ssm scan): work = flops;
//   memory ops (norm, elementwise, cast, adamw, the Mamba and MoE small
//     kernels): work = bytes;
//   latency ops (host_sync: one device-to-host read that waits for the
//     stream): no work; the time is the mean of the measurements.
// A query interpolates the measurements of the same op, dtype (and shape
// class) linearly in log(seconds) over log(work), and extrapolates at the
// nearest end's throughput. An (op, dtype) with no measurement uses the
// default curve and is reported uncalibrated (plan/step.h Prediction).
//
// Shape classes (the SSD scan only). The CUDA scan (core/kernels/ssm/
// ssd_scan.cu) runs the recurrence with one thread per state element
// (b, h, p, n), serial over t: its time follows the state-element-steps
// B·T·H·P·N (= flops / 7, so interpolating over flops is the same in log-log),
// but its efficiency per element depends on P·N (a block owns P·N elements of
// one head and stages x, dt, B, C and reduces over p and n each step: small
// heads spend more per element; measured 2026-12-01 at B·T = 8192: 1.9 ps an
// element-step forward at P·N = 256, 0.57–0.78 at 4096–8192, 12 vs 4.3 ps
// backward). So a scan row's class is P·N, and a query uses the measured
// class nearest in log(P·N), then interpolates along the flops inside it.
//
// Default curve (uncalibrated; from the cluster file):
//   compute op: kernel_overhead + max(flops / (peak(dtype) · eff(op)), bytes / (hbm_bw · memory_efficiency))
//   memory op:  kernel_overhead + bytes / (hbm_bw · memory_efficiency)
//   latency op: kernel_overhead
// eff: gemm_efficiency for gemm and grouped gemm; attention_efficiency for
// attention; attention_efficiency / 2 for the SSM scan (a chunked scan,
// assumption).
// Pure once built; const methods thread-safe.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "plan/cluster.h"

namespace gtp::plan {

enum class Op {
  kGemm, kAttentionFwd, kAttentionBwd, kSsmFwd, kSsmBwd, kNorm, kElementwise, kAdamW,
  kCast,  // ops::Cast between bf16 and f32
  // The Mamba-2 mixer's small ops (core/kernels/ssm/mamba_ops.h), f32.
  kConv1dFwd, kConv1dBwd, kGatedNormFwd, kGatedNormBwd, kSoftplusFwd, kSoftplusBwd,
  // The MoE layer's ops (layers/moe): the experts' grouped GEMM (forward and
  // data gradient: ops::GroupedLinear{,BackwardData}; the weight gradient
  // into f32: GroupedLinearBackwardWeight), the router's device ops after
  // its gate GEMM (forward: RouteTokens, Dispatch, CountSelections, AuxLoss;
  // backward: RouteBackward), the token permutation (a row gather,
  // ops::EmbeddingForward), its backward (a scatter-add into f32,
  // ops::EmbeddingBackward), the weighted unpermute (CombineForward /
  // CombineBackward) and the dispatcher's one host read of the counts.
  kGroupedGemm, kGroupedGemmWgrad, kMoeRouteFwd, kMoeRouteBwd, kMoePermute, kMoeScatterAdd,
  kMoeCombineFwd, kMoeCombineBwd, kHostSync,
};
const char* OpName(Op op);
// Every op, in the order of the enum (for parsing and listing).
const std::vector<Op>& AllOps();
// Compute-bound ops interpolate over FLOPs, latency ops not at all, the
// others over bytes.
bool IsComputeOp(Op op);
bool IsLatencyOp(Op op);

// The work conventions: what the model queries and `plan calibrate`
// records (one definition, so the two cannot drift apart). Elements are
// counted on one rank; f32 = 4 bytes, `ab` the activation dtype's bytes.
// The scan: 7 FLOPs a state element-step (recipes/trainer/mfu.h's 7·d_inner·
// d_state a token); the backward counts twice the forward.
double ScanFlops(double B, double T, double H, double P, double N);
// The scan's bytes: x, y [B·T·H·P], dt [B·T·H], B and C [B·T·N·G] f32 (G = 1
// per group counted in `GN`).
double ScanBytes(double B, double T, double H, double P, double GN);
// Causal conv1d over `rows` tokens of `ch` channels, f32: forward x read, y
// written (8 B an element); backward dy, x read, dx written (12 B).
double Conv1dBytes(double rows, double ch, bool backward);
// Gated RMSNorm, f32: forward x, z read, y written (12 B); backward dy, x, z
// read, dx, dz written (20 B).
double GatedNormBytes(double rows, double ch, bool backward);
// dt's softplus + bias, f32: forward raw read, dt written (8 B); backward
// ddt, raw read, draw written (12 B).
double SoftplusBytes(double rows, double heads, bool backward);
// A bf16 <-> f32 cast of n elements: 2 B read or written + 4 B.
double CastBytes(double n);
// The router's forward device ops over n tokens, E experts, top-k: the f32
// logits read (4·n·E) and every slot's i32 expert, f32 weight, i32 sorted
// position, slot and token (20 B a slot, n·k slots); backward: logits read,
// dlogits written (8·n·E), the slots' expert, selection and weight
// gradient read (12 B a slot).
double RouteBytes(double n, double E, double k, bool backward);
// The permutation of `rows` routed rows of C: gathered rows read and written
// (2·ab·rows·C) plus the i32 index; the scatter-add back: ab read, f32
// read-modify-write (ab + 8 B an element) plus the index.
double PermuteBytes(double rows, double C, double ab);
double ScatterAddBytes(double rows, double C, double ab);
// The combine of n tokens from `rows` = n·k expert rows: forward ye read,
// y written (ab·(rows + n)·C); backward dy, ye read, dye written
// (ab·(n + 2·rows)·C); plus the slots' i32 position and f32 weight (8 B).
double CombineBytes(double n, double rows, double C, double ab, bool backward);

struct Measurement {
  Op op = Op::kGemm;
  std::string dtype;  // "f32" | "bf16" | "fp8"
  std::string shape;
  double flops = 0, bytes = 0, seconds = 0;
};

// A row's shape class: P·N for an SSD scan row whose shape names p= and n=
// (see above), else 1.
double ShapeClass(const Measurement& m);

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

  // Seconds for one kernel; `shape_class` (the scan's P·N) picks the
  // nearest measured class (ignored by ops measured in one class).
  double Seconds(Op op, const std::string& dtype, double flops, double bytes, double shape_class = 1) const;
  // The default curve's seconds (what Seconds falls back to).
  double DefaultSeconds(Op op, const std::string& dtype, double flops, double bytes) const;
  bool Calibrated(Op op, const std::string& dtype) const;
  bool CalibratedAny() const { return !points_.empty(); }
  // Peak FLOP/s of a dtype on this GPU (fp8 without fp8 cores: bf16's).
  double Peak(const std::string& dtype) const;
  const Cluster& cluster() const { return cluster_; }

 private:
  Cluster cluster_;
  // (op, dtype) → shape class → sorted (work, seconds).
  std::map<std::pair<Op, std::string>, std::map<double, std::vector<std::pair<double, double>>>> points_;
};

}  // namespace gtp::plan
