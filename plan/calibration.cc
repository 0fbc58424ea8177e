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

namespace {
constexpr Op kAllOps[] = {Op::kGemm, Op::kAttentionFwd, Op::kAttentionBwd, Op::kSsmFwd,
                          Op::kSsmBwd, Op::kNorm,         Op::kElementwise,  Op::kAdamW};
}

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
  }
  return "?";
}

bool IsComputeOp(Op op) {
  return op == Op::kGemm || op == Op::kAttentionFwd || op == Op::kAttentionBwd || op == Op::kSsmFwd ||
         op == Op::kSsmBwd;
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
    for (Op op : kAllOps) {
      if (f[0] == OpName(op)) m.op = op, known = true;
    }
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown op '", f[0],
                                                     "' (gemm, attention_fwd, attention_bwd, ssm_scan_fwd, "
                                                     "ssm_scan_bwd, norm, elementwise, adamw)"));
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
    if ((IsComputeOp(m.op) ? m.flops : m.bytes) <= 0) {
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
    auto& pts = points_[{m.op, m.dtype}];
    pts.push_back({IsComputeOp(m.op) ? m.flops : m.bytes, m.seconds});
  }
  for (auto& [key, pts] : points_) {
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

double CostModel::Peak(const std::string& dtype) const {
  if (dtype == "f32") return cluster_.peak_f32_flops;
  if (dtype == "fp8" && cluster_.peak_fp8_flops > 0) return cluster_.peak_fp8_flops;
  return cluster_.peak_bf16_flops;
}

double CostModel::DefaultSeconds(Op op, const std::string& dtype, double flops, double bytes) const {
  const double mem = bytes / (cluster_.hbm_bandwidth * cluster_.memory_efficiency);
  if (!IsComputeOp(op)) return cluster_.kernel_overhead + mem;
  double eff = cluster_.gemm_efficiency;
  if (op == Op::kAttentionFwd || op == Op::kAttentionBwd) eff = cluster_.attention_efficiency;
  if (op == Op::kSsmFwd || op == Op::kSsmBwd) eff = cluster_.attention_efficiency / 2;
  return cluster_.kernel_overhead + std::max(flops / (Peak(dtype) * eff), mem);
}

bool CostModel::Calibrated(Op op, const std::string& dtype) const {
  return points_.count({op, dtype}) > 0;
}

double CostModel::Seconds(Op op, const std::string& dtype, double flops, double bytes) const {
  auto it = points_.find({op, dtype});
  if (it == points_.end()) return DefaultSeconds(op, dtype, flops, bytes);
  const auto& pts = it->second;
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
