#include "plan/cluster.h"

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"

namespace gtp::plan {

namespace {

// key → (unit factor to SI, whether 0 is allowed).
struct KeySpec {
  double scale;
  bool zero_ok;
};

const std::map<std::string, KeySpec>& Specs() {
  static const auto* specs = new std::map<std::string, KeySpec>{
      {"peak_bf16_tflops", {1e12, false}},
      {"peak_fp8_tflops", {1e12, true}},  // 0: no fp8 tensor cores (A100)
      {"peak_f32_tflops", {1e12, false}},
      {"hbm_gb", {1e9, false}},
      {"hbm_bandwidth_gbps", {1e9, false}},
      {"gpus_per_node", {1, false}},
      {"nvlink_gbps", {1e9, false}},
      {"nvlink_latency_us", {1e-6, true}},
      {"nvlink_allreduce_gbps", {1e9, true}},  // 0: all-reduce = reduce-scatter + all-gather
      {"nvlink_allreduce_latency_us", {1e-6, true}},
      {"network_gbps", {1e9, false}},
      {"network_latency_us", {1e-6, true}},
      {"gemm_efficiency", {1, false}},
      {"attention_efficiency", {1, false}},
      {"memory_efficiency", {1, false}},
      {"kernel_overhead_us", {1e-6, true}},
      {"context_gb", {1e9, true}},
      {"nccl_buffer_gb", {1e9, true}},
  };
  return *specs;
}

absl::Status SetValue(const std::string& where, const std::string& key, const std::string& value,
                      std::map<std::string, double>* numbers, std::string* name) {
  if (key == "name") {
    *name = value;
    return absl::OkStatus();
  }
  auto it = Specs().find(key);
  if (it == Specs().end()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": unknown cluster key '", key,
                                                   "'; the keys are name, ",
                                                   absl::StrJoin(ClusterKeys(), ", ")));
  }
  double v = 0;
  if (!absl::SimpleAtod(value, &v) || !std::isfinite(v) || v < 0 || (v == 0 && !it->second.zero_ok)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": ", key, " = '", value, "' must be a ", it->second.zero_ok ? "non-negative" : "positive",
        " number (e.g. ", key, " = 1)"));
  }
  if (key == "gpus_per_node" && v != std::floor(v)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": gpus_per_node = ", value, " must be a whole number (e.g. 8)"));
  }
  if ((key == "gemm_efficiency" || key == "attention_efficiency" || key == "memory_efficiency") && v > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", key, " = ", value, " is a fraction of peak, at most 1 (e.g. 0.7)"));
  }
  (*numbers)[key] = v * it->second.scale;
  return absl::OkStatus();
}

}  // namespace

const std::vector<std::string>& ClusterKeys() {
  static const auto* keys = [] {
    auto* k = new std::vector<std::string>;
    for (const auto& [key, spec] : Specs()) k->push_back(key);
    return k;
  }();
  return *keys;
}

absl::StatusOr<Cluster> ParseCluster(const std::string& text, const std::string& origin,
                                     const std::vector<std::string>& overrides) {
  std::map<std::string, double> numbers;
  std::string name;
  bool have_name = false;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    const size_t hash = line.find('#');
    if (hash != absl::string_view::npos) line = line.substr(0, hash);
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    const std::string where = absl::StrCat(origin, ":", line_no);
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": expected 'key = value', got '", line, "'"));
    }
    const std::string key(absl::StripAsciiWhitespace(line.substr(0, eq)));
    const std::string value(absl::StripAsciiWhitespace(line.substr(eq + 1)));
    if (numbers.count(key) || (key == "name" && have_name)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", key, " is given twice"));
    }
    have_name |= key == "name";
    if (auto s = SetValue(where, key, value, &numbers, &name); !s.ok()) return s;
  }
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("--cluster_set '", o, "': expected key=value (e.g. gpus_per_node=64)"));
    }
    const std::string key(absl::StripAsciiWhitespace(o.substr(0, eq)));
    numbers.erase(key);
    if (auto s = SetValue(absl::StrCat("--cluster_set ", o), key, std::string(absl::StripAsciiWhitespace(o.substr(eq + 1))),
                          &numbers, &name);
        !s.ok()) {
      return s;
    }
  }
  std::vector<std::string> missing;
  for (const std::string& k : ClusterKeys()) {
    if (!numbers.count(k)) missing.push_back(k);
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": missing ", absl::StrJoin(missing, ", "),
                     " (every key must be given; see plan/clusters/h200.cluster)"));
  }
  Cluster c;
  c.name = name.empty() ? origin : name;
  c.peak_bf16_flops = numbers["peak_bf16_tflops"];
  c.peak_fp8_flops = numbers["peak_fp8_tflops"];
  c.peak_f32_flops = numbers["peak_f32_tflops"];
  c.hbm_bytes = numbers["hbm_gb"];
  c.hbm_bandwidth = numbers["hbm_bandwidth_gbps"];
  c.gpus_per_node = static_cast<int>(numbers["gpus_per_node"]);
  c.intra = {numbers["nvlink_gbps"], numbers["nvlink_latency_us"]};
  c.intra_allreduce = {numbers["nvlink_allreduce_gbps"], numbers["nvlink_allreduce_latency_us"]};
  c.inter = {numbers["network_gbps"], numbers["network_latency_us"]};
  c.gemm_efficiency = numbers["gemm_efficiency"];
  c.attention_efficiency = numbers["attention_efficiency"];
  c.memory_efficiency = numbers["memory_efficiency"];
  c.kernel_overhead = numbers["kernel_overhead_us"];
  c.context_bytes = numbers["context_gb"];
  c.nccl_buffer_bytes = numbers["nccl_buffer_gb"];
  return c;
}

absl::StatusOr<Cluster> LoadCluster(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read cluster file '", path, "' (e.g. plan/clusters/h200.cluster)"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseCluster(ss.str(), path, overrides);
}

}  // namespace gtp::plan
