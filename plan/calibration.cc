#include "plan/calibration.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace gtp::plan {

const char* OpName(Op op) {
  switch (op) {
    case Op::kGemm: return "gemm";
    case Op::kAttentionFwd: return "attention_fwd";
    case Op::kAttentionBwd: return "attention_bwd";
    case Op::kSsmFwd: return "ssm_scan_fwd";
    case Op::kSsmBwd: return "ssm_scan_bwd";
    case Op::kNorm: return "norm";
    case Op::kElementwise: return "elementwise";
    case Op::kAdamW: return "adamw";
    case Op::kCast: return "cast";
    case Op::kConv1dFwd: return "conv1d_fwd";
    case Op::kConv1dBwd: return "conv1d_bwd";
    case Op::kGatedNormFwd: return "gated_norm_fwd";
    case Op::kGatedNormBwd: return "gated_norm_bwd";
    case Op::kSoftplusFwd: return "softplus_fwd";
    case Op::kSoftplusBwd: return "softplus_bwd";
    case Op::kGroupedGemm: return "grouped_gemm";
    case Op::kGroupedGemmWgrad: return "grouped_gemm_wgrad";
    case Op::kMoeRouteFwd: return "moe_route_fwd";
    case Op::kMoeRouteBwd: return "moe_route_bwd";
    case Op::kMoePermute: return "moe_permute";
    case Op::kMoeScatterAdd: return "moe_scatter_add";
    case Op::kMoeCombineFwd: return "moe_combine_fwd";
    case Op::kMoeCombineBwd: return "moe_combine_bwd";
    case Op::kHostSync: return "host_sync";
  }
  return "?";
}

const std::vector<Op>& AllOps() {
  static const std::vector<Op> kAll = [] {
    std::vector<Op> v;
    for (int i = 0; i <= static_cast<int>(Op::kHostSync); ++i) v.push_back(static_cast<Op>(i));
    return v;
  }();
  return kAll;
}

bool IsComputeOp(Op op) {
  return op == Op::kGemm || op == Op::kAttentionFwd || op == Op::kAttentionBwd || op == Op::kSsmFwd ||
         op == Op::kSsmBwd || op == Op::kGroupedGemm || op == Op::kGroupedGemmWgrad;
}

bool IsLatencyOp(Op op) { return op == Op::kHostSync; }

double ScanFlops(double B, double T, double H, double P, double N) { return 7.0 * B * T * H * P * N; }
double ScanBytes(double B, double T, double H, double P, double GN) {
  return 4.0 * B * T * (2 * H * P + H + 2 * GN);
}
double Conv1dBytes(double rows, double ch, bool backward) { return (backward ? 12.0 : 8.0) * rows * ch; }
double GatedNormBytes(double rows, double ch, bool backward) { return (backward ? 20.0 : 12.0) * rows * ch; }
double SoftplusBytes(double rows, double heads, bool backward) { return (backward ? 12.0 : 8.0) * rows * heads; }
double CastBytes(double n) { return 6.0 * n; }
double RouteBytes(double n, double E, double k, bool backward) {
  return backward ? 8.0 * n * E + 12.0 * n * k : 4.0 * n * E + 20.0 * n * k;
}
double PermuteBytes(double rows, double C, double ab) { return 2 * ab * rows * C + 4 * rows; }
double ScatterAddBytes(double rows, double C, double ab) { return (ab + 8) * rows * C + 4 * rows; }
double CombineBytes(double n, double rows, double C, double ab, bool backward) {
  return ab * ((backward ? n + 2 * rows : n + rows) * C) + 8 * rows;
}

double ShapeClass(const Measurement& m) {
  if (m.op != Op::kSsmFwd && m.op != Op::kSsmBwd) return 1;
  double p = 0, n = 0;
  for (absl::string_view kv : absl::StrSplit(m.shape, ',')) {
    double v = 0;
    if (absl::ConsumePrefix(&kv, "p=") && absl::SimpleAtod(kv, &v)) p = v;
    if (absl::ConsumePrefix(&kv, "n=") && absl::SimpleAtod(kv, &v)) n = v;
  }
  return p > 0 && n > 0 ? p * n : 1;
}

absl::StatusOr<std::vector<Measurement>> ParseCalibration(const std::string& text,
                                                          const std::string& origin) {
  std::vector<Measurement> rows;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    const size_t hash = line.find('#');
    if (hash != absl::string_view::npos) line = line.substr(0, hash);
    std::vector<std::string> f = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (f.empty()) continue;
    const std::string where = absl::StrCat(origin, ":", line_no);
    if (f.size() != 6) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": expected 6 fields 'op dtype shape flops bytes seconds', got ", f.size()));
    }
    Measurement m;
    bool known = false;
    std::string names;
    for (Op op : AllOps()) {
      if (f[0] == OpName(op)) m.op = op, known = true;
      absl::StrAppend(&names, names.empty() ? "" : ", ", OpName(op));
    }
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown op '", f[0], "' (", names, ")"));
    }
    if (f[1] != "f32" && f[1] != "bf16" && f[1] != "fp8") {
      return absl::InvalidArgumentError(absl::StrCat(where, ": dtype '", f[1], "' is not f32, bf16 or fp8"));
    }
    m.dtype = f[1];
    m.shape = f[2];
    if (!absl::SimpleAtod(f[3], &m.flops) || !absl::SimpleAtod(f[4], &m.bytes) ||
        !absl::SimpleAtod(f[5], &m.seconds) || !std::isfinite(m.flops) || !std::isfinite(m.bytes) ||
        !std::isfinite(m.seconds) || m.flops < 0 || m.bytes < 0 || m.seconds <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": flops and bytes must be numbers >= 0 and seconds > 0"));
    }
    if (!IsLatencyOp(m.op) && (IsComputeOp(m.op) ? m.flops : m.bytes) <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", f[0], " needs ",
                                                     IsComputeOp(m.op) ? "flops" : "bytes", " > 0"));
    }
    rows.push_back(m);
  }
  return rows;
}

std::string FormatCalibration(const std::vector<Measurement>& rows, const std::string& device) {
  std::string out = absl::StrCat("# gtp plan calibration v1\n# device: ", device,
                                 "\n# op dtype shape flops bytes seconds\n");
  for (const Measurement& m : rows) {
    absl::StrAppend(&out, absl::StrFormat("%s %s %s %.6g %.6g %.6g\n", OpName(m.op), m.dtype, m.shape,
                                          m.flops, m.bytes, m.seconds));
  }
  return out;
}

void CostModel::Add(const std::vector<Measurement>& rows) {
  for (const Measurement& m : rows) {
    points_[{m.op, m.dtype}][ShapeClass(m)].push_back({IsComputeOp(m.op) ? m.flops : m.bytes, m.seconds});
  }
  for (auto& [key, classes] : points_) {
    for (auto& [cls, pts] : classes) {
      std::sort(pts.begin(), pts.end());
      // Average repeated work values (repeats of one shape).
      std::vector<std::pair<double, double>> merged;
      for (size_t i = 0; i < pts.size();) {
        size_t j = i;
        double sum = 0;
        while (j < pts.size() && pts[j].first == pts[i].first) sum += pts[j++].second;
        merged.push_back({pts[i].first, sum / (j - i)});
        i = j;
      }
      pts = merged;
    }
  }
}

double CostModel::Peak(const std::string& dtype) const {
  if (dtype == "f32") return cluster_.peak_f32_flops;
  if (dtype == "fp8" && cluster_.peak_fp8_flops > 0) return cluster_.peak_fp8_flops;
  return cluster_.peak_bf16_flops;
}

double CostModel::DefaultSeconds(Op op, const std::string& dtype, double flops, double bytes) const {
  const double mem = bytes / (cluster_.hbm_bandwidth * cluster_.memory_efficiency);
  if (IsLatencyOp(op)) return cluster_.kernel_overhead;
  if (!IsComputeOp(op)) return cluster_.kernel_overhead + mem;
  double eff = cluster_.gemm_efficiency;
  if (op == Op::kAttentionFwd || op == Op::kAttentionBwd) eff = cluster_.attention_efficiency;
  if (op == Op::kSsmFwd || op == Op::kSsmBwd) eff = cluster_.attention_efficiency / 2;
  return cluster_.kernel_overhead + std::max(flops / (Peak(dtype) * eff), mem);
}

bool CostModel::Calibrated(Op op, const std::string& dtype) const {
  return points_.count({op, dtype}) > 0;
}

double CostModel::Seconds(Op op, const std::string& dtype, double flops, double bytes, double shape_class) const {
  auto it = points_.find({op, dtype});
  if (it == points_.end()) return DefaultSeconds(op, dtype, flops, bytes);
  if (IsLatencyOp(op)) {  // the mean over every measurement
    double sum = 0;
    int n = 0;
    for (const auto& [cls, pts] : it->second) {
      for (const auto& p : pts) sum += p.second, ++n;
    }
    return sum / n;
  }
  // The measured class nearest in log (classes > 0; one class: that one).
  const std::vector<std::pair<double, double>>* best = nullptr;
  double best_d = 0;
  const double q = std::log(std::max(shape_class, 1e-300));
  for (const auto& [cls, pts] : it->second) {
    const double dist = std::fabs(std::log(cls) - q);
    if (best == nullptr || dist < best_d) best = &pts, best_d = dist;
  }
  const auto& pts = *best;
  const double w = IsComputeOp(op) ? flops : bytes;
  if (w <= 0) return 0.0;
  if (w <= pts.front().first) {
    return std::max(cluster_.kernel_overhead, pts.front().second * w / pts.front().first);
  }
  if (w >= pts.back().first) return pts.back().second * w / pts.back().first;
  const auto hi = std::lower_bound(pts.begin(), pts.end(), std::make_pair(w, 0.0));
  const auto lo = hi - 1;
  const double x = (std::log(w) - std::log(lo->first)) / (std::log(hi->first) - std::log(lo->first));
  return std::exp(std::log(lo->second) + x * (std::log(hi->second) - std::log(lo->second)));
}

}  // namespace gtp::plan
